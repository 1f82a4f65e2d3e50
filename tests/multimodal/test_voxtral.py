"""Voxtral, beyond ``test_families.py``: a clip longer than one chunk (the chunking is
Hugging Face's processor's, the decoder artefact takes every chunk's rows), and the
checkpoint files fastnnef needs in place of mistral_common, each missing: a clear error,
nothing written."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.multimodal import dump_multimodal
from fastnnef.multimodal.samples import sample_audio
from fastnnef.multimodal.voxtral import FAMILY, load_inputs

NAME = "voxtral"


def _long_clip(rate: int, chunk_seconds: float) -> np.ndarray:
    """The sample clips end to end, repeated past two chunks: three chunks, the last partly padding."""
    clip = np.concatenate(sample_audio(rate))
    return np.tile(clip, int(np.ceil(2.2 * chunk_seconds * rate / clip.size)))[: int(2.2 * chunk_seconds * rate)]


def test_long_clip_chunks_as_hugging_face_and_decodes(exported: Callable[[str], Any],
                                                      mm_checkpoint: Callable[..., Path]) -> None:
    """A clip of 2.2 chunks: three chunks, the features of VoxtralProcessor's own chunking
    (``_retrieve_input_features``, which needs no mistral_common); each chunk through the
    encoder artefact (each equal to Hugging Face's rows), concatenated, spliced into the decoder
    artefact at 3 x 25 [AUDIO] tokens: last logits equal Hugging Face's forward on the features."""
    import transformers

    directory = mm_checkpoint(NAME)
    inputs = load_inputs(directory, False)
    extractor = inputs.feature_extractor
    clip = _long_clip(extractor.sampling_rate, extractor.n_samples / extractor.sampling_rate)
    chunks = inputs.chunks(clip)
    processor = transformers.VoxtralProcessor(feature_extractor=extractor, tokenizer=inputs.tokenizer)
    want_features = processor._retrieve_input_features(
        [clip], inputs.chunk_frames, sampling_rate=extractor.sampling_rate, padding=True, truncation=False,
        pad_to_multiple_of=extractor.n_samples, return_tensors="pt")
    assert chunks.shape[0] == 3
    torch.testing.assert_close(chunks, want_features, rtol=0, atol=0)

    root = exported(NAME).export_dir
    encoder = TractArtefact.load(root / "audio" / "model.nnef.tgz")
    per_chunk = [encoder.run([chunks[i : i + 1].numpy()])[0] for i in range(3)]
    model = transformers.AutoModelForMultimodalLM.from_pretrained(directory).eval()
    for index, got_rows in enumerate(per_chunk):  # the last chunk mostly padding
        want_rows = FAMILY.encoders[0].reference(model, {"input_features": chunks[index : index + 1]})[0]
        np.testing.assert_allclose(got_rows, want_rows.numpy(), rtol=1e-4, atol=1e-4)
    rows = np.concatenate(per_chunk)
    ids = [inputs.bos_token_id, inputs.token_id("[INST]"), inputs.token_id("[BEGIN_AUDIO]"),
           *[inputs.audio_token_id] * rows.shape[0], *inputs.tokenizer.encode(" what is it", add_special_tokens=False),
           inputs.token_id("[/INST]")]
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        want = model(input_ids=input_ids, input_features=chunks).logits[:, -1:].numpy()
    config = model.config.text_config
    empty = [np.zeros((1, config.num_key_value_heads, 0, config.head_dim), np.float32)] * (
        2 * config.num_hidden_layers)
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    got = decoder.run([input_ids.numpy(), *empty, rows])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_sample_prompt_is_mistral_common_layout(mm_checkpoint: Callable[..., Path]) -> None:
    """<s>[INST] text, then per clip [BEGIN_AUDIO] and its chunks' audio tokens, ... [/INST];
    the audio tokens are the encoder's rows."""
    import transformers

    directory = mm_checkpoint(NAME)
    inputs = load_inputs(directory, False)
    sample = FAMILY.sample(inputs)
    ids = sample.inputs["input_ids"][0].tolist()
    assert ids[:2] == [inputs.bos_token_id, inputs.token_id("[INST]")] and ids[-1] == inputs.token_id("[/INST]")
    model = transformers.AutoModelForMultimodalLM.from_pretrained(directory).eval()
    rows = sum(FAMILY.encoders[0].reference(model, item)[0].shape[0] for item in sample.items[0])
    assert ids.count(inputs.audio_token_id) == rows == 2 * 25
    begin = inputs.token_id("[BEGIN_AUDIO]")
    assert [ids[i + 1] for i, t in enumerate(ids) if t == begin] == [inputs.audio_token_id] * 2


def _without(mm_checkpoint: Callable[..., Path], tmp_path: Path, name: str) -> Path:
    directory = Path(shutil.copytree(mm_checkpoint(NAME), tmp_path / "ckpt"))
    (directory / name).unlink()
    return directory


def _fails(tmp_path: Path, directory: Path, error: type, match: str) -> None:
    out = tmp_path / "out" / "mm"
    with pytest.raises(error, match=match):
        dump_multimodal(out, local_dir=directory)
    assert not out.exists() and not (out.parent.exists() and list(out.parent.iterdir()))


def test_no_tokenizer_names_what_to_install(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _without(mm_checkpoint, tmp_path, "tekken.json")
    _fails(tmp_path, directory, T2NErrorNotFoundFile,
           r"no tokenizer \(tokenizer\.json or tekken\.json\).*mistral-common")


@pytest.mark.skipif(importlib.util.find_spec("mistral_common") is not None,
                    reason="mistral_common converts an old-format tekken.json")
def test_old_tekken_format_names_what_to_install(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """A tekken.json without its special_tokens list (the old format): transformers converts
    it only with mistral_common."""
    directory = Path(shutil.copytree(mm_checkpoint(NAME), tmp_path / "ckpt"))
    tekken = json.loads((directory / "tekken.json").read_text())
    del tekken["special_tokens"]
    (directory / "tekken.json").write_text(json.dumps(tekken))
    _fails(tmp_path, directory, T2NErrorInvalidArgument, r"tokenizer .* does not load .*mistral-common")


def test_no_feature_extractor(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _without(mm_checkpoint, tmp_path, "preprocessor_config.json")
    _fails(tmp_path, directory, T2NErrorNotFoundFile, r"no preprocessor_config\.json.*feature extractor")
