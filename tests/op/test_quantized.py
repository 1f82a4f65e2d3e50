"""torch static quantization (op/aten/quantized.py): models quantized the eager-mode way
(QuantStub/DeQuantStub, fuse, prepare, calibrate, convert), exported, run in tract and
compared with torch's quantized result, which tract must match within one quantization step
of the output. Per-tensor weights (qnnpack's default qconfig) run in tract's integer
kernels; per-channel weights (x86's) are dequantized in the graph."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.ao.quantization as tq
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from tests import helpers
from tests.helpers import redrawn
from tests.op.conftest import PER_TENSOR  # the `engine` fixture is in conftest.py

# torch >= 2.10 deprecates its quantized dtypes and eager quantization API; both still work.
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    helpers.TRACER_ALLOWED,  # some tests check what torch.jit.trace records
]


class Quantized(nn.Module):
    """``body`` between a QuantStub and a DeQuantStub; ``fuse`` lists module groups to fuse."""

    def __init__(self, body: nn.Module, fuse: list[list[str]] = ()):
        super().__init__()
        self.quant, self.body, self.dequant = tq.QuantStub(), body, tq.DeQuantStub()
        self.fuse = [[f"body.{name}" for name in group] for group in fuse]

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.body(*[self.quant(x) for x in xs]))


def quantize(body: nn.Module, make_inputs: Callable[[], tuple], engine: str, fuse: list[list[str]] = ()) -> nn.Module:
    """The eager-mode static quantization flow, calibrated on a few random batches."""
    torch.manual_seed(0)
    model = Quantized(body, fuse).eval()
    model.qconfig = tq.get_default_qconfig(engine)
    if model.fuse:
        tq.fuse_modules(model, model.fuse, inplace=True)
    tq.prepare(model, inplace=True)
    with torch.no_grad():
        for _ in range(4):
            model(*make_inputs())
    return tq.convert(model, inplace=True)


def output_step(model: nn.Module) -> float:
    """The scale of the last quantized op (what the DeQuantStub dequantizes)."""
    last = [m for m in model.modules() if hasattr(m, "scale") and not isinstance(m, tq.QuantStub)][-1]
    return float(last.scale)


def export_and_compare(model: nn.Module, inputs: tuple, tmp_path: Path, dynamic: bool = False,
                       run_inputs: tuple = ()) -> Path:
    """Export (tract's own check at a quantized-friendly tolerance), then require tract's
    output within one output quantization step of torch's, on freshly drawn inputs (a
    value frozen at export fails there) and on ``run_inputs`` too."""
    names = [f"x{i}" for i in range(len(inputs))]
    target = TractNNEF(TractNNEF.latest_version(), check_io_tolerance=TractCheckTolerance.VERY,
                       dynamic_axes={n: {0: "B"} for n in names} if dynamic else None)
    path = export_model_to_nnef(model, inputs, tmp_path / "model.nnef", target, input_names=names,
                                compression_level=None, front_end=helpers.FRONT_END)
    artefact = TractArtefact.load(path)
    step = output_step(model)
    fresh = tuple(redrawn(t) for t in inputs)
    for args in (inputs, fresh, run_inputs) if run_inputs else (inputs, fresh):
        with torch.no_grad():
            expected = model(*args).numpy()
        (got,) = artefact.run(list(args))
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= step * 1.001, (np.abs(got - expected).max(), step)
    return path


def _weight_schemes(model: nn.Module) -> set[torch.qscheme]:
    schemes = set()
    for m in model.modules():
        if hasattr(m, "weight") and callable(m.weight):
            schemes.add(m.weight().qscheme())
    return schemes


# --- linear and convolutions -------------------------------------------------------------------
class LinearBody(nn.Module):
    def __init__(self, relu: bool):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.relu = nn.ReLU() if relu else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.fc(x))


@pytest.mark.parametrize("shape, relu", [((3, 6), False), ((2, 4, 6), True)], ids=["2d", "3d-relu"])
def test_linear(engine: str, relu: bool, shape: tuple, tmp_path: Path) -> None:
    make = lambda: (torch.randn(*shape),)  # noqa: E731
    model = quantize(LinearBody(relu), make, engine, [["fc", "relu"]] if relu else [])
    expected = torch.per_tensor_affine if engine == PER_TENSOR else torch.per_channel_affine
    assert _weight_schemes(model) == {expected}
    path = export_and_compare(model, make(), tmp_path)
    text = (path / "graph.nnef").read_text()
    kernel = "tract_core_einsum_q(" if engine == PER_TENSOR else "matmul("
    assert kernel in text


def test_fused_relu_above_the_lowest_code(tmp_path: Path) -> None:
    """An output zero point above the lowest code (fixed qparams here): the fused ReLU is
    not the quantization's clamp, so it is applied explicitly."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = PER_TENSOR
    try:
        torch.manual_seed(0)
        model = Quantized(ConvBody(2, True, padding=1), [["conv", "relu"]]).eval()
        fixed = tq.FixedQParamsObserver.with_args(scale=0.02, zero_point=100, dtype=torch.quint8,
                                                  quant_min=0, quant_max=255)
        model.qconfig = tq.QConfig(activation=fixed, weight=tq.default_weight_observer)
        tq.fuse_modules(model, model.fuse, inplace=True)
        tq.prepare(model, inplace=True)
        model(torch.randn(2, 4, 5, 5))
        tq.convert(model, inplace=True)
        assert model.body.conv.zero_point == 100
        path = export_and_compare(model, (torch.randn(2, 4, 5, 5),), tmp_path)
    finally:
        torch.backends.quantized.engine = previous
    assert "relu(" in (path / "graph.nnef").read_text()


class ConvBody(nn.Module):
    def __init__(self, dims: int, relu: bool, **kwargs: Any):
        super().__init__()
        self.conv = (nn.Conv1d if dims == 1 else nn.Conv2d)(4, 6, 3, **kwargs)
        self.relu = nn.ReLU() if relu else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv(x))


CONV_CASES = [
    pytest.param(1, False, dict(), id="conv1d"),
    pytest.param(1, True, dict(stride=2, padding=2, dilation=2), id="conv1d-strided-dilated-relu"),
    pytest.param(2, True, dict(padding=1), id="conv2d-relu"),
    pytest.param(2, False, dict(stride=(2, 1), padding=(0, 1), groups=2), id="conv2d-grouped"),
]


@pytest.mark.parametrize("dims, relu, kwargs", CONV_CASES)
def test_conv(engine: str, dims: int, relu: bool, kwargs: dict, tmp_path: Path) -> None:
    shape = (2, 4, 11) if dims == 1 else (2, 4, 7, 6)
    make = lambda: (torch.randn(*shape),)  # noqa: E731
    model = quantize(ConvBody(dims, relu, **kwargs), make, engine, [["conv", "relu"]] if relu else [])
    path = export_and_compare(model, make(), tmp_path)
    quant = (path / "graph.quant").read_text() if (path / "graph.quant").exists() else ""
    weight_entries = [line for line in quant.splitlines() if "weight" in line.split(":")[0]]
    if engine == PER_TENSOR:  # the weight as int codes with its scale; the conv in integers
        assert len(weight_entries) == 1 and "tract_core_qconv(" in (path / "graph.nnef").read_text()
    else:  # graph.quant cannot hold per-channel scales: codes and scales as plain tensors
        assert weight_entries == []
    assert '"quant_quantize_per_tensor": zero_point_linear_quantize(' in quant  # every activation has its entry


class ConvNet(nn.Module):
    """conv -> relu -> flatten -> linear: a quantized tensor through ops that only move data."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.relu(self.conv(x)), 1))


def test_conv_flatten_linear_dynamic_batch(engine: str, tmp_path: Path) -> None:
    make = lambda: (torch.randn(2, 3, 6, 6),)  # noqa: E731
    model = quantize(ConvNet(), make, engine, [["conv", "relu"]])
    export_and_compare(model, make(), tmp_path, dynamic=True, run_inputs=(torch.randn(5, 3, 6, 6),))


# --- FloatFunctional: add, add_relu, mul, cat ---------------------------------------------------
class Functional(nn.Module):
    """Two quantized branches joined by a FloatFunctional op."""

    def __init__(self, op: str):
        super().__init__()
        self.a, self.b = nn.Linear(6, 5), nn.Linear(6, 5)
        self.op = op
        self.f = torch.ao.nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.a(x), self.b(x)
        if self.op == "cat":
            return self.f.cat([a, b, a], dim=-1)
        return getattr(self.f, self.op)(a, b)


@pytest.mark.parametrize("op", ["add", "add_relu", "mul", "cat"])
def test_float_functional(op: str, tmp_path: Path) -> None:
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = PER_TENSOR
    try:
        make = lambda: (torch.randn(3, 6),)  # noqa: E731
        model = quantize(Functional(op), make, PER_TENSOR)
        path = export_and_compare(model, make(), tmp_path, dynamic=True, run_inputs=(torch.randn(7, 6),))
    finally:
        torch.backends.quantized.engine = previous
    with torch.no_grad():
        graph = str(torch.jit.trace(model, make(), check_trace=False).inlined_graph)
    assert f"quantized::{op}(" in graph
    assert "tract_core_cast(" in (path / "graph.nnef").read_text()


def test_quantize_and_dequantize_roundtrip(tmp_path: Path) -> None:
    """quantize_per_tensor to each dtype and back: tract gives torch's grid values exactly."""

    class RoundTrip(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(torch.quantize_per_tensor(x, 0.05, zp, dtype).dequantize()
                         for zp, dtype in ((128, torch.quint8), (-3, torch.qint8), (0, torch.qint32)))

    x = torch.randn(4, 7) * 4
    path = export_model_to_nnef(RoundTrip(), (x,), tmp_path / "m.nnef", TractNNEF.latest(),
                                front_end=helpers.FRONT_END)
    for got, expected in zip(TractArtefact.load(path).run([x]), RoundTrip()(x)):
        np.testing.assert_array_equal(got, expected.numpy())


# --- what tract cannot take -------------------------------------------------------------------
class PerChannelBuffer(nn.Module):
    """A per-channel quantized tensor used directly: it would need a per-channel graph.quant."""

    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(3, 4)
        self.register_buffer("qw", torch.quantize_per_channel(w, torch.rand(3) / 10 + 0.01,
                                                              torch.zeros(3, dtype=torch.long), 0, torch.qint8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.qw.dequantize().t()


def test_per_channel_tensor_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorNotImplemented, match=r"^aten::dequantize in <root module> .*: tensor 'qw' is quantized "
                       r"per channel \(torch.per_channel_affine\); tract's graph.quant accepts only a scalar scale"):
        export_model_to_nnef(PerChannelBuffer(), (torch.randn(2, 4),), tmp_path / "m.nnef", TractNNEF.latest(),
                             front_end=helpers.FRONT_END)
    assert list(tmp_path.iterdir()) == []


def test_quantized_tensor_into_float_op_refused(tmp_path: Path) -> None:
    """A quantized tensor through an op exported on floats only names the op and the fix."""

    class TopK(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.topk(torch.quantize_per_tensor(x, 0.1, 10, torch.quint8), 2)[0].dequantize()

    with pytest.raises(T2NErrorNotImplemented, match=r"a torch-quantized tensor \(torch.quint8\) reaches aten::topk in "
                       r"<root module> .*dequantize\(\) before it"):
        export_model_to_nnef(TopK(), (torch.randn(2, 4),), tmp_path / "m.nnef", TractNNEF.latest(),
                             front_end=helpers.FRONT_END)
    assert list(tmp_path.iterdir()) == []


# --- quantized outputs ----------------------------------------------------------------------
def _quant_entries(path: Path) -> dict[str, str]:
    quant = (path / "graph.quant").read_text()
    return {name.strip('"'): entry for name, entry in (line.split(": ", 1) for line in quant.splitlines())}


def test_quantized_outputs_are_codes_with_their_graph_quant(tmp_path: Path) -> None:
    """A model returning torch-quantized tensors: the outputs keep their quantized types,
    graph.quant names each output's scale and zero point, and tract's codes are torch's
    int_repr(), at the traced batch and at another."""

    class Quantize(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.quantize_per_tensor(x * 3, 0.05, 128, torch.quint8),
                    torch.quantize_per_tensor(x.transpose(0, 1), 0.25, -3, torch.qint8),
                    torch.quantize_per_tensor(x, 0.001, 0, torch.qint32),
                    torch.quantize_per_tensor(x, 0.1, 2, torch.quint8).dequantize())

    model = Quantize()
    target = TractNNEF(TractNNEF.latest_version(), dynamic_axes={"x": {0: "B"}})
    path = export_model_to_nnef(model, (torch.randn(4, 7),), tmp_path / "m.nnef", target, input_names=["x"],
                                output_names=["a", "b", "c", "d"], compression_level=None,
                                front_end=helpers.FRONT_END)
    entries = _quant_entries(path)
    assert entries["a"] == ("zero_point_linear_quantize(scale = 0.05, zero_point = 128, bits = 8, signed = false, "
                            "symmetric = false);")
    assert entries["b"] == ("zero_point_linear_quantize(scale = 0.25, zero_point = -3, bits = 8, signed = true, "
                            "symmetric = false);")
    assert entries["c"] == ("zero_point_linear_quantize(scale = 0.001, zero_point = 0, bits = 32, signed = true, "
                            "symmetric = true);")
    assert "d" not in entries
    artefact = TractArtefact.load(path)
    for x in (torch.randn(4, 7) * 2, torch.randn(9, 7) * 2):
        got = artefact.run([x])
        expected = model(x)
        for g, e in zip(got[:3], expected[:3]):
            np.testing.assert_array_equal(g, e.int_repr().numpy())
        np.testing.assert_array_equal(got[3], expected[3].numpy())


def test_quantized_model_without_dequant_stub(engine: str, tmp_path: Path) -> None:
    """A converted model whose output stays quantized (no DeQuantStub): tract's codes are
    within one code of torch's (one output quantization step)."""
    make = lambda: (torch.randn(3, 6),)  # noqa: E731
    model = quantize(LinearBody(True), make, engine, [["fc", "relu"]])
    model.dequant = nn.Identity()
    x = make()[0]
    path = export_model_to_nnef(model, (x,), tmp_path / "m.nnef", TractNNEF(
        TractNNEF.latest_version(), check_io_tolerance=TractCheckTolerance.VERY), compression_level=None,
        front_end=helpers.FRONT_END)
    with torch.no_grad():
        expected = model(x)
    assert expected.is_quantized
    (entry,) = [v for k, v in _quant_entries(path).items() if k.startswith("output")]
    scale, zero_point = re.search(r"scale = ([0-9.e-]+), zero_point = (-?\d+),", entry).groups()  # type: ignore[union-attr]
    assert np.float32(scale) == np.float32(expected.q_scale()) and int(zero_point) == expected.q_zero_point()
    (got,) = TractArtefact.load(path).run([x])
    assert got.dtype == np.uint8
    assert np.abs(got.astype(np.int32) - expected.int_repr().numpy().astype(np.int32)).max() <= 1
