"""Remodeled subnets exported and run in the linked tract, compared with PyTorch: collapsed
axes, a scalar bound to a dynamic size, renamed symbols, kept and squeezed outputs, pinned
symbols; and every config that does not fit the model refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.remodeler import (
    BoundaryAdapter,
    IODescriptor,
    PreparedSubnet,
    Provider,
    RemodelPlan,
    RenameOutputs,
    Stage,
    SubnetSignature,
    dump_registry_from_signatures,
    dynamic_axes_from_registry,
    load_axis_symbol_registry,
    parse_axis_symbol_registry,
    plan_from_registry,
    prepare_subnet_export,
    save_config,
    validate_registry_against_signatures,
)
from tests.helpers import TRACER_ALLOWED, export_and_check

# Some adapters' dynamic axes are specialized by torch.export ("Constraints violated"), and
# LSTM cells' flat weights are refused: "auto" falls back to the tracer there.
pytestmark = TRACER_ALLOWED

F, H = 6, 5


class Encoder(nn.Module):
    """ASR-like: features [B, F, T] and their lengths [B] -> frames [B, H, T], the frames'
    mean over each length [B, H], and the lengths halved."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(F, H)

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, ...]:
        frames = self.proj(audio_signal.transpose(1, 2)).transpose(1, 2)
        pooled = frames.sum(dim=2) / length.unsqueeze(1).to(frames.dtype)
        return frames, pooled, length // 2


ENCODER_CONFIG = {
    "encoder": {
        "inputs": {
            "audio_signal": {"original_shape": ["B", F, "T"], "collapse_dims": ["B"]},
            "length": {"original_shape": ["B"], "collapse_dims": ["B"], "bind_scalar_to_dim_size": "audio_signal.T"},
        },
        "outputs": {"frames": {"collapse_dims": [0]}, "pooled": {"collapse_dims": [0]}},
        "renamed_symbols": {"S": ["T"]},
        "outputs_keep": ["pooled", "frames"],
        "extensions": ["tract_assert S >= 2"],
    }
}
ENCODER_NAMES = (["audio_signal", "length"], ["frames", "pooled", "encoded_lengths"])
GENERATED = ["tract_assert B >= 1", "tract_assert T >= 1"]


def prepare_encoder(config: dict, model: nn.Module, t: int = 7) -> PreparedSubnet:
    reg = parse_axis_symbol_registry(config)
    torch.manual_seed(1)
    example = [torch.randn(1, F, t), torch.tensor([t])]
    return prepare_subnet_export(
        model, example, *ENCODER_NAMES, "encoder", dynamic_axes_from_registry(reg, "encoder"), GENERATED, reg
    )


def export_prepared(p: PreparedSubnet, tmp_path: Path, **kwargs: object) -> Path:
    return export_and_check(
        p.model, tuple(p.test_input), tmp_path, target=TractNNEF.latest().with_dynamic_axes(p.dyn),
        compression_level=None, input_names=p.input_names, output_names=p.output_names,
        custom_extensions=p.custom_extensions, **kwargs,
    )


def test_collapse_bind_rename_keep(tmp_path: Path) -> None:
    model = Encoder().eval()
    p = prepare_encoder(ENCODER_CONFIG, model)
    assert isinstance(p.model, BoundaryAdapter)
    assert p.input_names == ["audio_signal"]
    assert p.output_names == ["pooled", "frames"]
    assert [tuple(t.shape) for t in p.test_input] == [(F, 7)]
    assert p.dyn == {"audio_signal": {1: "S"}}
    assert p.custom_extensions == ["tract_assert S >= 1", "tract_assert S >= 2"]
    path = export_prepared(p, tmp_path)
    lines = (path / "graph.nnef").read_text().splitlines()
    assert "extension tract_symbol S;" in lines
    assert "extension tract_assert S >= 2;" in lines
    assert not any("tract_symbol B" in line or "tract_symbol T" in line for line in lines)
    art = TractArtefact.load(path)
    assert art.input_names == ["audio_signal"]
    assert art.input_facts == [("f32", [F, "S"])]
    assert art.output_names == ["pooled", "frames"]
    # At other lengths, the bound length follows the input's size: the artefact equals the
    # original model given the batch axis back and the length as an input.
    for t in (3, 12):
        x = torch.randn(F, t)
        with torch.no_grad():
            frames, pooled, _ = model(x.unsqueeze(0), torch.tensor([t]))
        got_pooled, got_frames = art.run([x])
        torch.testing.assert_close(torch.from_numpy(got_pooled), pooled[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.from_numpy(got_frames), frames[0], atol=1e-5, rtol=1e-5)


class Pair(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b


def test_renamed_symbols_tie_inputs(tmp_path: Path) -> None:
    reg = parse_axis_symbol_registry({
        "pair": {"inputs": {"a": ["A__BATCH", 4], "b": ["B__BATCH", 4]},
                 "renamed_symbols": {"batch": ["a__batch", "b__batch"]}},
    })
    dyn = dynamic_axes_from_registry(reg, "pair")
    assert dyn == {"a": {0: "A__BATCH"}, "b": {0: "B__BATCH"}}
    p = prepare_subnet_export(
        Pair(), [torch.randn(2, 4), torch.randn(2, 4)], ["a", "b"], ["y"], "pair", dyn,
        ["tract_assert A__BATCH >= 1", "tract_assert B__BATCH >= 1"], reg,
    )
    assert not isinstance(p.model, BoundaryAdapter)  # renames alone only rewrite the axes
    assert p.dyn == {"a": {0: "BATCH"}, "b": {0: "BATCH"}}
    assert p.custom_extensions == ["tract_assert BATCH >= 1"]
    path = export_prepared(p, tmp_path)
    lines = (path / "graph.nnef").read_text().splitlines()
    assert [line for line in lines if line.startswith("extension tract_symbol")] == ["extension tract_symbol BATCH;"]
    art = TractArtefact.load(path)
    assert art.input_facts == [("f32", ["BATCH", 4]), ("f32", ["BATCH", 4])]
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    (got,) = art.run([a, b])
    torch.testing.assert_close(torch.from_numpy(got), a * 2 + b)


class Cell(nn.Module):
    """A recurrent step with a tuple state: (x [B, T, 4], (h [B, 4], c [B, 4])) -> (y, (h', c'))."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple:
        h, c = state
        y = torch.tanh(self.lin(x) + h.unsqueeze(1))
        return y, (y.mean(dim=1) + c, c * 0.5)


def test_tuple_inputs_collapse_and_kept_outputs(tmp_path: Path) -> None:
    reg = parse_axis_symbol_registry({
        "cell": {
            "inputs": {
                "x": {"original_shape": ["B", "T", 4], "collapse_dims": ["B"]},
                "state": {"0": {"original_shape": ["B", 4], "collapse_dims": ["B"]},
                          "1": {"original_shape": ["B", 4], "collapse_dims": ["B"]}},
            },
            "outputs": {"y": {"collapse_dims": [0]}},
            "outputs_keep": ["new_state_1", "y"],
        }
    })
    dyn = dynamic_axes_from_registry(reg, "cell")
    assert dyn == {"x": {0: "B", 1: "T"}, "state_0": {0: "B"}, "state_1": {0: "B"}}
    torch.manual_seed(2)
    model = Cell().eval()
    example = [torch.randn(1, 5, 4), (torch.randn(1, 4), torch.randn(1, 4))]
    p = prepare_subnet_export(model, example, ["x", "state"], ["y", "new_state"], "cell", dyn, [], reg)
    assert p.input_names == ["x", "state_0", "state_1"]
    assert p.output_names == ["new_state_1", "y"]
    assert [tuple(t.shape) for t in p.test_input] == [(5, 4), (4,), (4,)]
    assert p.dyn == {"x": {0: "T"}}
    path = export_prepared(p, tmp_path)
    art = TractArtefact.load(path)
    assert art.output_names == ["new_state_1", "y"]
    assert art.input_facts == [("f32", ["T", 4]), ("f32", [4]), ("f32", [4])]
    x, h, c = torch.randn(9, 4), torch.randn(4), torch.randn(4)
    with torch.no_grad():
        y, (_, c2) = model(x.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
    got_c2, got_y = art.run([x, h, c])
    torch.testing.assert_close(torch.from_numpy(got_c2), c2)
    torch.testing.assert_close(torch.from_numpy(got_y), y[0], atol=1e-5, rtol=1e-5)


def test_eval_symbols_pin_an_axis(tmp_path: Path) -> None:
    reg = parse_axis_symbol_registry({
        "net": {"inputs": {"x": {"original_shape": [1, "T", 4], "eval_symbols": {"T": 3}}},
                "extensions": ["tract_assert T <= 8"]},
    })
    p = prepare_subnet_export(
        nn.Linear(4, 2), [torch.randn(1, 5, 4)], ["x"], ["y"], "net", dynamic_axes_from_registry(reg, "net"),
        ["tract_assert T >= 1"], reg,
    )
    assert [tuple(t.shape) for t in p.test_input] == [(1, 3, 4)]
    assert p.dyn == {"x": {}}
    assert p.custom_extensions == []  # both name T, static now
    path = export_prepared(p, tmp_path)
    assert TractArtefact.load(path).input_facts == [("f32", [1, 3, 4])]


def test_model_not_mutated_and_rename_outputs(tmp_path: Path) -> None:
    model = Encoder().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = set(vars(model))
    p = prepare_encoder(ENCODER_CONFIG, model)
    renamed = RenameOutputs(p.model, {"pooled": "mean"})
    assert renamed.output_names == ["mean", "frames"]
    assert renamed.input_names == ["audio_signal"]
    assert renamed.dynamic_shapes_for_export() == p.dyn
    path = export_and_check(
        renamed, tuple(p.test_input), tmp_path, target=TractNNEF.latest().with_dynamic_axes(p.dyn),
        input_names=renamed.input_names, output_names=renamed.output_names, custom_extensions=p.custom_extensions,
    )
    assert TractArtefact.load(path).output_names == ["mean", "frames"]
    assert set(vars(model)) == attrs
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def _with(**changes: object) -> dict:
    enc = {**ENCODER_CONFIG["encoder"], **changes}
    return {"encoder": enc}


def _inputs(**entries: object) -> dict:
    return {**ENCODER_CONFIG["encoder"]["inputs"], **entries}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "config, message",
    [
        (_with(inputs=_inputs(audio_signal={"original_shape": ["B", F, "T"], "collapse_dims": ["X"]})),
         "collapse_dims of 'audio_signal' names 'X', which is none of its dynamic axes {0: 'B', 2: 'T'}"),
        (_with(inputs=_inputs(length={"original_shape": ["B"], "collapse_dims": ["B"],
                                      "bind_scalar_to_dim_size": "audio.T"})),
         "'length' is bound to 'audio.T', but 'audio' is not an input left at the boundary"),
        (_with(inputs=_inputs(length={"original_shape": ["B"], "collapse_dims": ["B"],
                                      "bind_scalar_to_dim_size": "audio_signal.F"})),
         "'length' is bound to 'audio_signal.F', but 'F' is none of the dynamic axes of 'audio_signal'"),
        (_with(inputs=_inputs(length={"original_shape": ["B"], "collapse_dims": ["B"],
                                      "bind_scalar_to_dim_size": "decoder.audio_signal.T"})),
         "'length' is bound to 'decoder.audio_signal.T', a size of subnet 'decoder': bind to an input of this subnet"),
        (_with(inputs=_inputs(length={"original_shape": ["B"], "bind_scalar_to_dim_size": "audio_signal.T"})),
         "'length' is bound to a size, so it must be a scalar at the boundary, but its shape [1] keeps dims [1]"),
        (_with(inputs=_inputs(lenght={"original_shape": ["B"]})),
         "it configures 'encoder.lenght', which is not an input"),
        (_with(inputs=_inputs(audio_signal={"original_shape": ["B", "T"]})),
         "original_shape of 'encoder.audio_signal' is ['B', 'T'], the input has shape [1, 6, 7]"),
        (_with(inputs=_inputs(audio_signal={"original_shape": ["B", 80, "T"]})),
         "original_shape of 'encoder.audio_signal' is ['B', 80, 'T'], the input has shape [1, 6, 7]"),
        (_with(renamed_symbols={"S": ["TIME"]}), "renamed_symbols S: ['TIME'] names ['TIME']"),
        (_with(inputs=_inputs(audio_signal={"original_shape": ["B", F, "T"], "eval_symbols": {"U": 2}})),
         "eval_symbols of 'encoder.audio_signal' pins ['U'], which are none of its dynamic axes ['B', 'T']"),
        (_with(outputs={"logits": {"collapse_dims": [0]}}),
         "outputs ['logits'] have collapse_dims, but the outputs are ['frames', 'pooled', 'encoded_lengths']"),
    ],
)
def test_config_that_does_not_fit_is_refused(config: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument) as err:
        prepare_encoder(config, Encoder())
    assert message in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"outputs_keep": ["pooled", "logits"]}, "outputs_keep names ['logits'], but the outputs are "
                                                "['frames', 'pooled', 'encoded_lengths']"),
        ({"outputs": {"frames": {"collapse_dims": [1]}}},
         "output 'frames' of shape [1, 5, 7] cannot collapse axes [1]: only axes of size 1 collapse"),
    ],
)
def test_outputs_that_do_not_fit_leave_nothing(changes: dict, message: str, tmp_path: Path) -> None:
    """Outputs are known once the model runs: the error comes from the export's trace, and no
    artefact (nor a temporary file) is left."""
    p = prepare_encoder(_with(**changes), Encoder().eval())
    with pytest.raises(T2NErrorInvalidArgument) as err:
        export_model_to_nnef(
            p.model, tuple(p.test_input), tmp_path / "enc.nnef.tgz", TractNNEF.latest().with_dynamic_axes(p.dyn),
            input_names=p.input_names, output_names=p.output_names,
        )
    assert message in str(err.value)
    assert list(tmp_path.iterdir()) == []


class EncoderProvider:
    """The tutorial's provider flow for one plain module: its signature, then the plan applied."""

    def __init__(self) -> None:
        torch.manual_seed(1)
        self.example = [torch.randn(1, F, 7), torch.tensor([7])]
        self.dyn = {"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}}
        self.prepared: dict[str, PreparedSubnet] = {}

    def discover_signatures(self, model: nn.Module, stage: Stage) -> list[SubnetSignature]:
        with torch.no_grad():
            outs = model(*self.example)
        names_in, names_out = ENCODER_NAMES
        return [SubnetSignature(
            name="encoder", stage=stage,
            inputs=[IODescriptor(n, [self.dyn[n].get(i, s) for i, s in enumerate(t.shape)], str(t.dtype))
                    for n, t in zip(names_in, self.example)],
            outputs=[IODescriptor(n, list(t.shape), notes=["traced"]) for n, t in zip(names_out, outs)],
            symbol_axes=self.dyn, applied_flags=[],
        )]

    def apply(self, model: nn.Module, plan: RemodelPlan) -> dict[str, nn.Module]:
        p = prepare_subnet_export(model, self.example, *ENCODER_NAMES, "encoder", self.dyn, GENERATED, plan.registry)
        self.prepared["encoder"] = p
        return {"encoder": p.model}


def test_provider_flow(tmp_path: Path) -> None:
    model = Encoder().eval()
    provider = EncoderProvider()
    as_spi: Provider = provider  # what torch_to_nnef's Provider protocol asks for
    (sig,) = as_spi.discover_signatures(model, Stage.RAW)
    assert sig.inputs[0].shape == ["B", F, "T"] and sig.outputs[0].notes == ["traced"] and not sig.applied_flags
    starter = dump_registry_from_signatures([sig])
    save_config(tmp_path / "shapes.yaml", starter)
    assert "    audio_signal:\n      original_shape: [B, 6, T]\n      collapse_dims: []\n" in (
        tmp_path / "shapes.yaml").read_text()
    edited = parse_axis_symbol_registry(ENCODER_CONFIG)
    validate_registry_against_signatures([sig], edited)
    wrapped = as_spi.apply(model, plan_from_registry(edited))
    p = provider.prepared["encoder"]
    assert wrapped["encoder"] is p.model
    (tmp_path / "out").mkdir()
    art = TractArtefact.load(export_prepared(p, tmp_path / "out"))
    assert art.input_facts == [("f32", [F, "S"])]
    assert [s.order for s in (Stage.RAW, Stage.COLLAPSED, Stage.BOUND, Stage.FINAL)] == [0, 1, 2, 3]


def test_adapter_refusals_and_collapse_of_a_longer_example(caplog: pytest.LogCaptureFixture) -> None:
    model, example = Pair(), [torch.randn(2, 4), torch.randn(2, 4)]
    dyn = {"a": {0: "N"}, "b": {0: "N"}}
    with pytest.raises(T2NErrorInvalidArgument, match=r"dynamic axes name \['c'\], which are not inputs"):
        BoundaryAdapter(model, "pair", example, {"c": {0: "N"}}, {}, input_names=["a", "b"])
    with pytest.raises(T2NErrorInvalidArgument, match=r"outputs_keep \['y', 'y'\] repeats an output"):
        BoundaryAdapter(model, "pair", example, dyn, {}, outputs_keep=["y", "y"], input_names=["a", "b"])
    with pytest.raises(T2NErrorInvalidArgument, match="collapse_dims is set on 'c', which is not an input"):
        BoundaryAdapter(model, "pair", example, dyn, {"pair.c": {"N"}}, input_names=["a", "b"])
    with pytest.raises(T2NErrorInvalidArgument, match=r"the flat names \['a'\] repeat"):
        BoundaryAdapter(model, "pair", example, {}, {}, input_names=["a", "a"])
    with pytest.raises(T2NErrorInvalidArgument, match=r"3 names \['a', 'b', 'c'\] for 2 values holding 2 tensors"):
        BoundaryAdapter(model, "pair", example, {}, {}, input_names=["a", "b", "c"])
    with pytest.raises(T2NErrorInvalidArgument, match="axis_registry must be a parsed registry, got dict"):
        prepare_subnet_export(model, example, ["a", "b"], ["y"], "pair", dyn, [], {"pair": {}})  # type: ignore[arg-type]
    adapter = BoundaryAdapter(model, "pair", example, dyn, {"pair.a": {"n"}, "other.b": {"N"}}, input_names=["a", "b"])
    with caplog.at_level("WARNING", logger="fastnnef"):
        a, b = adapter.input_example()
    assert (a.shape, b.shape) == ((4,), (2, 4))
    assert "the example of 'a' has 2 entries on collapsed axis 0: the first one is kept" in caplog.text
    assert adapter.dynamic_shapes_for_export() == {"b": {0: "N"}}
    torch.testing.assert_close(adapter(a, b), example[0][:1] * 2 + example[1])
    with pytest.raises(T2NErrorInvalidArgument, match=r"called with 1 inputs, the boundary has 2: \['a', 'b'\]"):
        adapter(a)


# A config as torch_to_nnef's NeMo template writes it, edited as its tutorial shows: namespaced
# symbols, renames as a list, a collapse through an alias, a bind qualified by the subnet, and
# another subnet's entries (ignored when preparing this one).
NEMO_STYLE_YAML = """\
encoder:
  inputs:
    audio_signal:
      original_shape: [AUDIO_SIGNAL__BATCH, 6, AUDIO_SIGNAL__TIME]
      collapse_dims: [AUDIO_SIGNAL__BATCH]
    length:
      original_shape: [LENGTH__BATCH]
      collapse_dims: [BATCH]
      bind_scalar_to_dim_size: encoder.audio_signal.AUDIO_SIGNAL__TIME
  renamed_symbols:
  - BATCH: [AUDIO_SIGNAL__BATCH, LENGTH__BATCH]
  - S: [AUDIO_SIGNAL__TIME]
  outputs_keep: [frames, pooled]
  extensions: ["tract_assert S >= 1"]
decoder:
  inputs:
    targets:
      original_shape: [TARGETS__BATCH, TARGETS__TIME]
      collapse_dims: []
"""


def test_reference_style_config_file_applied(tmp_path: Path) -> None:
    (tmp_path / "shapes.yaml").write_text(NEMO_STYLE_YAML)
    reg = load_axis_symbol_registry(tmp_path / "shapes.yaml")
    model = Encoder().eval()
    torch.manual_seed(1)
    p = prepare_subnet_export(
        model, [torch.randn(1, F, 7), torch.tensor([7])], *ENCODER_NAMES, "encoder",
        dynamic_axes_from_registry(reg, "encoder"), [], reg,
    )
    assert (p.input_names, p.output_names) == (["audio_signal"], ["frames", "pooled"])
    assert p.dyn == {"audio_signal": {1: "S"}}
    (tmp_path / "out").mkdir()
    art = TractArtefact.load(export_prepared(p, tmp_path / "out"))
    x = torch.randn(F, 10)
    with torch.no_grad():
        frames, pooled, _ = model(x.unsqueeze(0), torch.tensor([10]))
    got_frames, got_pooled = art.run([x])
    torch.testing.assert_close(torch.from_numpy(got_frames), frames, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.from_numpy(got_pooled), pooled, atol=1e-5, rtol=1e-5)


def test_names_given_per_tensor() -> None:
    """As in export, names may name each flat tensor instead of each top-level value."""
    cell = Cell().eval()
    x, h, c = torch.randn(1, 3, 4), torch.randn(1, 4), torch.randn(1, 4)
    adapter = BoundaryAdapter(cell, "cell", [x, (h, c)], {}, {}, outputs_keep=["c2", "y"],
                              input_names=["x", "h", "c"], output_names=["y", "h2", "c2"])
    assert adapter.input_names == ["x", "h", "c"]
    with torch.no_grad():
        c2, y = adapter(x, h, c)
        expected_y, (_, expected_c2) = cell(x, (h, c))
    torch.testing.assert_close((c2, y), (expected_c2, expected_y))
