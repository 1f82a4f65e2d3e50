"""torch-quantized tensors through the ops torch runs on them (op/aten/quantized.py
``torch_quantized``, and the ``quantized::`` activations and QFunctional ops), then whole
eager-mode static-quantized models (MobileNet-style blocks, an MLP): exported, run in
tract and compared with torch's quantized result within one output quantization step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.ao.nn.quantized as nnq
import torch.ao.quantization as tq
import torch.nn.functional as F
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from tests import helpers
from tests.op.conftest import PER_CHANNEL, PER_TENSOR
from tests.op.test_quantized import export_and_compare, quantize

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    helpers.TRACER_ALLOWED,  # some tests check what torch.jit.trace records
]


def _traced_kinds(model: nn.Module, inputs: tuple) -> set[str]:
    with torch.no_grad():
        graph = torch.jit.trace(model, inputs, check_trace=False).inlined_graph
    return {node.kind() for node in graph.nodes()}


class ConvThen(nn.Module):
    """A conv (so that ``op`` sees a quantized activation of a calibrated grid), then
    ``op``: a module (swapped by convert when torch has a quantized version) or a function
    of the quantized tensor. ``quantize`` puts it between a QuantStub and a DeQuantStub."""

    def __init__(self, op: nn.Module):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.conv(x))


def _lambda(fn: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    class Fn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fn(x)
    return Fn()


# (id, op, the kind it must trace to, native: computed on the codes, no cast but the stubs')
OP_CASES = [
    ("relu", nn.ReLU(), "aten::relu", True),
    ("relu6", nn.ReLU6(), "quantized::relu6", True),
    ("hardtanh", nn.Hardtanh(-0.37, 0.61), "aten::hardtanh", True),
    ("clamp", _lambda(lambda x: torch.clamp(x, min=-0.2, max=0.45)), "aten::clamp", True),
    ("relu6-functional", _lambda(F.relu6), "aten::relu6", True),
    ("max-pool", nn.MaxPool2d(2), "aten::max_pool2d", True),
    ("max-pool-padded", nn.MaxPool2d(3, 2, padding=1), "aten::max_pool2d", True),
    ("flatten-permute-reshape", _lambda(lambda x: x.permute(0, 2, 3, 1).reshape(2, -1, 4).flatten(1)),
     "aten::flatten", True),
    ("cat", _lambda(lambda x: torch.cat([x, torch.relu(x)], 1)), "aten::cat", True),
    ("stack", _lambda(lambda x: torch.stack([x, torch.relu(x)], 1).flatten(1, 2)), "aten::stack", True),
    ("pad", _lambda(lambda x: F.pad(x, (1, 2, 0, 1), value=0.25)), "aten::pad", False),
    ("reflection-pad", nn.ReflectionPad2d(1), "aten::pad", False),
    ("sigmoid", nn.Sigmoid(), "aten::sigmoid", False),
    ("tanh", nn.Tanh(), "aten::tanh", False),
    ("hardsigmoid", nn.Hardsigmoid(), "aten::hardsigmoid", False),
    ("hardswish", nn.Hardswish(), "quantized::hardswish", False),
    ("leaky-relu", nn.LeakyReLU(0.2), "quantized::leaky_relu", False),
    ("leaky-relu-functional", _lambda(lambda x: F.leaky_relu(x, 0.1)), "aten::leaky_relu", False),
    ("elu", nn.ELU(0.7), "quantized::elu", False),
    ("gelu", nn.GELU(), "aten::gelu", False),
    ("threshold", _lambda(lambda x: F.threshold(x, 0.1, -0.2)), "aten::threshold", False),
    ("avg-pool", nn.AvgPool2d(3, 2, padding=1), "aten::avg_pool2d", False),
    ("adaptive-avg-pool", nn.AdaptiveAvgPool2d(1), "aten::adaptive_avg_pool2d", False),
    ("adaptive-avg-pool-3", nn.AdaptiveAvgPool2d(3), "aten::adaptive_avg_pool2d", False),
    ("mean", _lambda(lambda x: x.mean((2, 3), keepdim=True)), "aten::mean", False),
    ("upsample-nearest", nn.Upsample(scale_factor=2), "aten::upsample_nearest2d", False),
    ("upsample-bilinear", nn.Upsample(scale_factor=2, mode="bilinear"), "aten::upsample_bilinear2d", False),
]


@pytest.mark.parametrize("name, op, kind, native", OP_CASES, ids=[c[0] for c in OP_CASES])
def test_op_on_quantized_tensor(name: str, op: nn.Module, kind: str, native: bool, tmp_path: Path) -> None:
    """x86's engine: qnnpack's relu6, hardtanh and clamp misread the channels-last tensors
    its convolutions return (torch 2.x gives values of other positions), tract does not."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = PER_CHANNEL
    try:
        make = lambda: (torch.randn(2, 3, 6, 6),)  # noqa: E731
        model = quantize(ConvThen(op), make, PER_CHANNEL)
        assert kind in _traced_kinds(model, make())
        path = export_and_compare(model, make(), tmp_path, run_inputs=make())
    finally:
        torch.backends.quantized.engine = previous
    op_casts = [line for line in (path / "graph.nnef").read_text().splitlines()
                if line.strip().startswith("body_op") and "tract_core_cast(" in line]
    if native:  # computed on the codes
        assert op_casts == []
    else:  # dequantized, computed in f32, quantized to the output's grid
        assert len(op_casts) >= 2


class QFunctionalOps(nn.Module):
    """The QFunctional ops that convert leaves as ``quantized::`` calls."""

    def __init__(self, op: str):
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)
        self.f = nnq.FloatFunctional()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.a(self.quant(x)), self.b(self.quant(x))
        if self.op == "add_scalar":
            y = self.f.add_scalar(a, 0.3)
        elif self.op == "mul_scalar":
            y = self.f.mul_scalar(a, -1.7)
        elif self.op == "matmul":
            y = self.f.matmul(a.reshape(-1, 2, 3), b.reshape(-1, 3, 2)).reshape(-1, 4)
        else:
            y = self.f.add(a, b)
        return self.dequant(y)


@pytest.mark.parametrize("op", ["add_scalar", "mul_scalar", "matmul"])
def test_qfunctional_ops(op: str, tmp_path: Path) -> None:
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = PER_TENSOR
    try:
        make = lambda: (torch.randn(3, 6),)  # noqa: E731
        torch.manual_seed(0)
        model = QFunctionalOps(op).eval()
        model.qconfig = tq.get_default_qconfig(PER_TENSOR)
        tq.prepare(model, inplace=True)
        with torch.no_grad():
            for _ in range(4):
                model(*make())
        tq.convert(model, inplace=True)
        assert f"quantized::{op}" in _traced_kinds(model, make())
        export_and_compare(model, make(), tmp_path, dynamic=True, run_inputs=(torch.randn(5, 6),))
    finally:
        torch.backends.quantized.engine = previous


def test_cat_of_two_grids(tmp_path: Path) -> None:
    """aten::cat of tensors quantized differently: torch requantizes to the first one's grid."""

    class Cat(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
            b = torch.quantize_per_tensor(x * 0.3, 0.01, 3, torch.quint8)
            return torch.cat([a, b], 1).dequantize()

    _check_within_step(Cat(), (torch.randn(4, 5),), (torch.randn(4, 5) * 2,), 0.05, tmp_path)


def _check_within_step(model: nn.Module, inputs: tuple, other: tuple, step: float, tmp_path: Path) -> None:
    target = TractNNEF(TractNNEF.latest_version(), check_io_tolerance=TractCheckTolerance.VERY)
    path = export_model_to_nnef(model, inputs, tmp_path / "m.nnef", target, front_end=helpers.FRONT_END)
    artefact = TractArtefact.load(path)
    for args in (inputs, other):
        (got,) = artefact.run(list(args))
        assert np.abs(got - model(*args).numpy()).max() <= step * 1.001


def test_mul_relu(tmp_path: Path) -> None:
    """quantized::mul_relu (what the FX flow fuses mul + relu into)."""

    class MulRelu(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
            b = torch.quantize_per_tensor(x.flip(-1), 0.04, 100, torch.quint8)
            return torch.ops.quantized.mul_relu(a, b, 0.02, 7).dequantize()

    _check_within_step(MulRelu(), (torch.randn(4, 5),), (torch.randn(4, 5) * 2,), 0.02, tmp_path)


# --- whole models -------------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    """MobileNetV2/V3's block: pointwise expand (conv-bn-relu6), depthwise (conv-bn-relu6),
    squeeze-excite (avg pool, 1x1 convs, hardsigmoid, mul), pointwise project (conv-bn),
    residual add, hardswish."""

    def __init__(self, channels: int, expand: int, act: type[nn.Module]):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), act())
        self.se_pool = nn.AdaptiveAvgPool2d(1)
        self.se_reduce, self.se_relu = nn.Conv2d(hidden, 4, 1), nn.ReLU()
        self.se_expand, self.se_gate = nn.Conv2d(4, hidden, 1), nn.Hardsigmoid()
        self.se_mul = nnq.FloatFunctional()
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.residual = nnq.FloatFunctional()
        self.act = nn.Hardswish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(self.expand(x))
        gate = self.se_gate(self.se_expand(self.se_relu(self.se_reduce(self.se_pool(y)))))
        y = self.project(self.se_mul.mul(y, gate))
        return self.act(self.residual.add(x, y))


class MobileNetLike(nn.Module):
    """``act``: ReLU6 (MobileNetV2's), or ReLU where torch's own ReLU6 is wrong: qnnpack's
    quantized relu6 misreads the channels-last tensors its convolutions return (torch 2.x,
    values of other positions), which tract does not reproduce."""

    def __init__(self, act: type[nn.Module] = nn.ReLU6) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(InvertedResidual(8, 3, act), InvertedResidual(8, 2, act))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2)
        self.head_pool = nn.AvgPool2d(2)
        self.classifier = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(self.quant(x)))
        y = self.head_pool(self.up(self.pool(y)))
        return self.dequant(self.classifier(torch.flatten(y, 1)))


def _fuse_mobilenet(model: MobileNetLike) -> None:
    groups = [["stem.0", "stem.1", "stem.2"]]
    for i in range(2):
        groups += [[f"blocks.{i}.{seq}.0", f"blocks.{i}.{seq}.1"] for seq in ("expand", "depthwise", "project")]
        groups += [[f"blocks.{i}.se_reduce", f"blocks.{i}.se_relu"]]
    tq.fuse_modules(model, groups, inplace=True)


def _static_quantized(model: nn.Module, make: Callable[[], tuple], engine: str,
                      fuse: Callable[[nn.Module], None] = lambda m: None) -> nn.Module:
    torch.manual_seed(0)
    model.eval()
    model.qconfig = tq.get_default_qconfig(engine)
    fuse(model)
    tq.prepare(model, inplace=True)
    with torch.no_grad():
        for _ in range(8):
            model(*make())
    return tq.convert(model, inplace=True)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_mobilenet_like(engine: str, fused: bool, tmp_path: Path) -> None:
    """Fused: conv-bn(-relu) folded by fuse_modules; unfused: quantized::batch_norm2d."""
    make = lambda: (torch.randn(2, 3, 16, 16),)  # noqa: E731
    torch.manual_seed(0)
    act = nn.ReLU if engine == PER_TENSOR else nn.ReLU6
    model = _static_quantized(MobileNetLike(act), make, engine, _fuse_mobilenet if fused else lambda m: None)
    kinds = _traced_kinds(model, make())
    assert {"quantized::conv2d", "quantized::hardswish", "aten::hardsigmoid", "quantized::add", "quantized::mul",
            "aten::adaptive_avg_pool2d", "aten::max_pool2d", "aten::upsample_nearest2d", "aten::avg_pool2d",
            "quantized::linear"} <= kinds
    assert ("quantized::relu6" if act is nn.ReLU6 else "aten::relu") in kinds
    assert ("quantized::conv2d_relu" if fused else "quantized::batch_norm2d") in kinds
    export_and_compare(model, make(), tmp_path, dynamic=True, run_inputs=(torch.randn(3, 3, 16, 16),))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.fc1, self.act1 = nn.Linear(12, 32), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(32, 32), nn.Hardswish()
        self.fc3, self.act3 = nn.Linear(32, 16), nn.LeakyReLU(0.1)
        self.fc4, self.act4 = nn.Linear(16, 4), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act2(self.fc2(self.act1(self.fc1(self.quant(x)))))
        return self.dequant(self.act4(self.fc4(self.act3(self.fc3(y)))))


def test_mlp(engine: str, tmp_path: Path) -> None:
    make = lambda: (torch.randn(5, 12),)  # noqa: E731
    model = _static_quantized(MLP(), make, engine, lambda m: tq.fuse_modules(m, [["fc1", "act1"]], inplace=True))
    assert {"quantized::linear_relu", "quantized::hardswish", "quantized::leaky_relu", "aten::tanh"} <= _traced_kinds(
        model, make())
    export_and_compare(model, make(), tmp_path, dynamic=True, run_inputs=(torch.randn(9, 12),))
