"""NeMo ASR export: a tiny FastConformer CTC (random weights) exported per subnet, each
artefact run in the linked tract on fresh audio of other lengths and batch sizes than the
traced ones, and compared with NeMo's own forward."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.asr", reason="the nemo extra is not installed")

from nemo.collections.asr.models import EncDecCTCModel, EncDecMultiTaskModel

from fastnnef.check import TractArtefact
from fastnnef.exceptions import (
    T2NError,
    T2NErrorDynamicShapeValue,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.inference_target import TractNNEF
from fastnnef.nemo import export_nemo_asr_model
from fastnnef.nemo.cli import main
from tests.helpers import TRACER_ALLOWED
from tests.nemo.tiny import PRED_HIDDEN, SAMPLE_RATE, build_fastconformer_ctc, build_fastconformer_rnnt

# torch.export refuses NeMo's relative positions (a slice of the encoding table by sizes the
# lowering cannot write): "auto" falls back to the tracer, whose deprecation notice is allowed.
pytestmark = TRACER_ALLOWED


def clips(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch of random clips (zeros past each length) and the lengths."""
    generator = torch.Generator().manual_seed(seed)
    audio = torch.zeros(len(lengths), max(lengths))
    for i, n in enumerate(lengths):
        audio[i, :n] = torch.randn(n, generator=generator) * 0.1
    return audio, torch.tensor(lengths)


def run_chain(export_dir: Path, audio: torch.Tensor, lengths: torch.Tensor) -> dict[str, np.ndarray]:
    """The three artefacts run one after the other in tract, as an application would."""
    pre = TractArtefact.load(export_dir / "preprocessor.nnef.tgz")
    enc = TractArtefact.load(export_dir / "encoder.nnef.tgz")
    dec = TractArtefact.load(export_dir / "decoder.nnef.tgz")
    features, frames = pre.run({"input_signal": audio.numpy(), "length": lengths.numpy()})
    encoded, encoded_len = enc.run({"audio_signal": features, "length": frames})
    (logprobs,) = dec.run({"encoder_output": encoded})
    return {"features": features, "frames": frames, "encoded_len": encoded_len, "logprobs": logprobs}


@pytest.fixture(scope="module")
def fastconformer_ctc() -> EncDecCTCModel:
    return build_fastconformer_ctc()


@pytest.fixture(scope="module")
def exported(fastconformer_ctc: EncDecCTCModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    export_dir = tmp_path_factory.mktemp("nemo") / "fastconformer_ctc"
    report = export_nemo_asr_model(fastconformer_ctc, export_dir)
    assert sorted(report.artefacts) == ["decoder", "encoder", "preprocessor"]
    return export_dir


def test_layout_and_config(exported: Path, fastconformer_ctc: EncDecCTCModel) -> None:
    assert sorted(p.name for p in exported.iterdir()) == [
        "decoder.nnef.tgz", "encoder.nnef.tgz", "model_config.json", "preprocessor.nnef.tgz"]
    config = json.loads((exported / "model_config.json").read_text())
    assert config["encoder"]["n_layers"] == 2
    assert config["labels"] == list(fastconformer_ctc.cfg.labels)
    enc = TractArtefact.load(exported / "encoder.nnef.tgz")
    assert enc.input_facts == [("f32", ["B", 32, "T"]), ("i64", ["B"])]


@pytest.mark.parametrize("lengths", [[24000, 9000, 16000], [5000]], ids=["batch3-padded", "batch1"])
def test_tract_matches_nemo_forward(exported: Path, fastconformer_ctc: EncDecCTCModel, lengths: list[int]) -> None:
    audio, audio_len = clips(lengths, seed=len(lengths))
    got = run_chain(exported, audio, audio_len)
    with torch.no_grad():
        features, frames = fastconformer_ctc.preprocessor(input_signal=audio, length=audio_len)
        logprobs, encoded_len, _ = fastconformer_ctc.forward(input_signal=audio, input_signal_length=audio_len)
    np.testing.assert_array_equal(got["frames"], frames.numpy())
    np.testing.assert_array_equal(got["encoded_len"], encoded_len.numpy())
    # Features: only the valid frames (padding is zeroed by both, normalization is per clip).
    for i, n in enumerate(frames.tolist()):
        np.testing.assert_allclose(got["features"][i, :, :n], features[i, :, :n].numpy(), atol=2e-3, rtol=1e-3)
    assert got["logprobs"].shape == tuple(logprobs.shape)
    # Log-probabilities of every valid frame, and the greedy CTC labels they give.
    for i, n in enumerate(encoded_len.tolist()):
        np.testing.assert_allclose(got["logprobs"][i, :n], logprobs[i, :n].numpy(), atol=2e-3, rtol=1e-3)
        np.testing.assert_array_equal(got["logprobs"][i, :n].argmax(-1), logprobs[i, :n].argmax(-1).numpy())


def test_encoder_bounded_by_its_positions(exported: Path) -> None:
    """The encoder's relative positions stop at pos_emb_max_len (500) encoded frames: the graph
    tells tract so, and a longer input is an error in tract, not a silently wrong output."""
    with tarfile.open(exported / "encoder.nnef.tgz") as archive:
        member = archive.extractfile("graph.nnef")
        assert member is not None
        graph = member.read().decode()
    assert "extension tract_assert T <= 4000;" in graph.splitlines()
    enc = TractArtefact.load(exported / "encoder.nnef.tgz")
    too_long = np.zeros((1, 32, 500 * 8 + 8), dtype=np.float32)
    with pytest.raises(T2NError, match="tract failed to run"):
        enc.run({"audio_signal": too_long, "length": np.array([too_long.shape[2]])})


def test_model_left_as_it_was(tmp_path: Path) -> None:
    model = build_fastconformer_ctc(dither=1e-5, pad_to=16)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_nemo_asr_model(model, tmp_path / "out", only_subnets=["preprocessor"])
    assert model.training and all(m.training for m in model.modules())
    assert model.preprocessor.featurizer.dither == 1e-5
    assert model.preprocessor.featurizer.pad_to == 16
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model_config.json", "preprocessor.nnef.tgz"]


def test_skip_preprocessor(fastconformer_ctc: EncDecCTCModel, tmp_path: Path) -> None:
    report = export_nemo_asr_model(fastconformer_ctc, tmp_path / "out", skip_preprocessor=True)
    assert list(report.artefacts) == ["encoder", "decoder"]


def test_unsupported_model_type_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(T2NErrorNotImplemented, match="EncDecMultiTaskModel is not supported.*CTC.*transducers"):
        export_nemo_asr_model(EncDecMultiTaskModel.__new__(EncDecMultiTaskModel), target)
    with pytest.raises(T2NErrorInvalidArgument, match="must be a NeMo ASR model"):
        export_nemo_asr_model(torch.nn.Linear(2, 2), target)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_leave_nothing(fastconformer_ctc: EncDecCTCModel, tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="EncDecCTCModel has preprocessor, encoder, decoder$"):
        export_nemo_asr_model(fastconformer_ctc, tmp_path / "out", only_subnets=["decoder_joint"])
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(T2NErrorInvalidArgument, match="not an empty directory"):
        export_nemo_asr_model(fastconformer_ctc, occupied)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]


def test_failure_mid_export_leaves_nothing(fastconformer_ctc: EncDecCTCModel, tmp_path: Path) -> None:
    """A subnet that fails mid-way (here the encoder, on a dynamic-axes table naming an input
    it does not have) removes the whole staging directory, the artefacts done before it too."""
    class BrokenTarget(TractNNEF):
        def with_dynamic_axes(self, dynamic_axes):  # type: ignore[no-untyped-def]
            if "audio_signal" in (dynamic_axes or {}):
                dynamic_axes = {"no_such_input": {0: "B"}}
            return super().with_dynamic_axes(dynamic_axes)

    with pytest.raises(T2NErrorDynamicShapeValue, match="no_such_input"):
        export_nemo_asr_model(fastconformer_ctc, tmp_path / "out", BrokenTarget(TractNNEF.latest_version()))
    assert list(tmp_path.iterdir()) == []


def test_cli_exports_a_nemo_file(fastconformer_ctc: EncDecCTCModel, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    nemo_file = tmp_path / "tiny.nemo"
    fastconformer_ctc.save_to(str(nemo_file))
    out = tmp_path / "export"
    assert main(["--model-path", str(nemo_file), "--export-dir", str(out), "--only-subnet", "encoder", "decoder"]) == 0
    assert "exported 2 subnet(s)" in capsys.readouterr().out
    audio, audio_len = clips([SAMPLE_RATE], seed=7)
    with torch.no_grad():
        features, frames = fastconformer_ctc.preprocessor(input_signal=audio, length=audio_len)
        encoded, _ = fastconformer_ctc.encoder(audio_signal=features, length=frames)
    got, _ = TractArtefact.load(out / "encoder.nnef.tgz").run({"audio_signal": features.numpy(),
                                                             "length": frames.numpy()})
    np.testing.assert_allclose(got, encoded.numpy(), atol=2e-3, rtol=1e-3)


def test_cli_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model-path", str(tmp_path / "none.nemo"), "--export-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert T2NErrorNotFoundFile.__name__ in err and "no such file" in err
    assert list(tmp_path.iterdir()) == []


def test_rnnt_decoder_joint_matches_nemo(tmp_path: Path) -> None:
    """A FastConformer RNNT: the encoder, and NeMo's decoder_joint (prediction network and
    joint) run in tract on other batch, frame and label counts than the traced ones."""
    model = build_fastconformer_rnnt()
    report = export_nemo_asr_model(model, tmp_path / "rnnt", skip_preprocessor=True)
    assert list(report.artefacts) == ["encoder", "decoder_joint"]
    audio, audio_len = clips([20000, 7000, 12000], seed=11)
    with torch.no_grad():
        features, frames = model.preprocessor(input_signal=audio, length=audio_len)
        encoded, encoded_len = model.encoder(audio_signal=features, length=frames)
    enc = TractArtefact.load(tmp_path / "rnnt" / "encoder.nnef.tgz")
    got_encoded, got_len = enc.run({"audio_signal": features.numpy(), "length": frames.numpy()})
    np.testing.assert_array_equal(got_len, encoded_len.numpy())
    for i, n in enumerate(encoded_len.tolist()):
        np.testing.assert_allclose(got_encoded[i, :, :n], encoded[i, :, :n].numpy(), atol=2e-3, rtol=1e-3)

    generator = torch.Generator().manual_seed(5)
    targets = torch.randint(0, model.decoder.blank_idx, (3, 4), generator=generator, dtype=torch.int32)
    target_length = torch.tensor([4, 1, 3], dtype=torch.int32)
    states = [torch.randn(1, 3, PRED_HIDDEN, generator=generator) * 0.1 for _ in range(2)]
    with torch.no_grad():
        # One search step as NeMo's export runs it: the given labels, no start-of-sequence.
        decoded, (h, c) = model.decoder.predict(targets.long(), state=states, add_sos=False)
        joint = model.joint(encoder_outputs=encoded, decoder_outputs=decoded.transpose(1, 2))
    dj = TractArtefact.load(tmp_path / "rnnt" / "decoder_joint.nnef.tgz")
    got = dj.run({"encoder_outputs": encoded.numpy(), "targets": targets.numpy(),
                  "target_length": target_length.numpy(), "input_states_1": states[0].numpy(),
                  "input_states_2": states[1].numpy()})
    assert got[0].shape == tuple(joint.shape)  # [B, T, U, vocabulary + blank]
    np.testing.assert_allclose(got[0], joint.numpy(), atol=2e-3, rtol=1e-3)
    np.testing.assert_array_equal(got[1], target_length.numpy())
    np.testing.assert_allclose(got[2], h.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got[3], c.numpy(), atol=1e-4, rtol=1e-4)
