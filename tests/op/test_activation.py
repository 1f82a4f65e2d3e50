"""Activation handlers: each exported module runs in tract and matches torch.

Inputs span both signs and large magnitudes so every branch (softplus threshold, ELU's
negative side, clamps) is exercised; f32 tolerance 1e-4, f16 1e-2.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from tests.helpers import Fn, export_and_check


class ClampTensor(nn.Module):
    """torch.clamp with tensor bounds (aten::clamp.Tensor), broadcast from the last axis."""

    def __init__(self, lo: bool, hi: bool):
        super().__init__()
        self.register_buffer("lo", torch.linspace(-1.0, 0.0, 6) if lo else None)
        self.register_buffer("hi", torch.linspace(0.2, 1.5, 6) if hi else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, self.lo, self.hi)


def prelu(channels: int) -> nn.Module:
    m = nn.PReLU(channels)
    with torch.no_grad():  # distinct per-channel slopes, so a wrong broadcast axis shows
        m.weight.copy_(torch.linspace(-0.5, 0.9, channels))
    return m


# (id, module factory, input shape, input scale)
CASES = [
    ("relu", nn.ReLU, (2, 4, 6), 3.0),
    ("relu_inplace", lambda: Fn(lambda x: F.relu(x * 1.0, inplace=True)), (2, 4, 6), 3.0),
    ("relu6", nn.ReLU6, (2, 4, 6), 8.0),
    ("relu6_functional", lambda: Fn(F.relu6), (2, 4, 6), 8.0),
    ("leaky_relu", lambda: nn.LeakyReLU(0.2), (2, 4, 6), 3.0),
    ("leaky_relu_default", nn.LeakyReLU, (2, 4, 6), 3.0),
    ("prelu_single", lambda: prelu(1), (2, 4, 6), 3.0),
    ("prelu_channels", lambda: prelu(4), (2, 4, 6), 3.0),
    ("prelu_channels_4d", lambda: prelu(3), (2, 3, 4, 5), 3.0),
    ("prelu_channels_2d", lambda: prelu(5), (3, 5), 3.0),
    ("hardtanh", lambda: nn.Hardtanh(-2.0, 3.0), (2, 4, 6), 4.0),
    ("gelu", nn.GELU, (2, 4, 6), 4.0),
    ("gelu_tanh", lambda: nn.GELU(approximate="tanh"), (2, 4, 6), 4.0),
    ("silu", nn.SiLU, (2, 4, 6), 6.0),
    ("mish", nn.Mish, (2, 4, 6), 10.0),
    ("hardswish", nn.Hardswish, (2, 4, 6), 5.0),
    ("hardsigmoid", nn.Hardsigmoid, (2, 4, 6), 5.0),
    ("softplus", nn.Softplus, (2, 4, 6), 30.0),
    ("softplus_beta_threshold", lambda: nn.Softplus(beta=2.0, threshold=3.0), (2, 4, 6), 4.0),
    ("elu", lambda: nn.ELU(alpha=0.5), (2, 4, 6), 4.0),
    ("elu_big", nn.ELU, (2, 4, 6), 200.0),
    ("selu", nn.SELU, (2, 4, 6), 4.0),
    ("celu", lambda: nn.CELU(alpha=0.7), (2, 4, 6), 4.0),
    ("softsign", nn.Softsign, (2, 4, 6), 4.0),
    ("logsigmoid", nn.LogSigmoid, (2, 4, 6), 40.0),
    ("tanhshrink", nn.Tanhshrink, (2, 4, 6), 3.0),
    ("hardshrink", lambda: nn.Hardshrink(0.7), (2, 4, 6), 2.0),
    ("softshrink", lambda: nn.Softshrink(0.7), (2, 4, 6), 2.0),
    ("threshold", lambda: nn.Threshold(0.1, 2.0), (2, 4, 6), 1.0),
    ("sigmoid", nn.Sigmoid, (2, 4, 6), 5.0),
    ("tanh", nn.Tanh, (2, 4, 6), 3.0),
    ("clamp_both", lambda: Fn(lambda x: x.clamp(-1, 1)), (2, 4, 6), 3.0),
    ("clamp_min_only", lambda: Fn(lambda x: torch.clamp(x, min=0.1)), (2, 4, 6), 3.0),
    ("clip_max_only", lambda: Fn(lambda x: x.clip(max=0.3)), (2, 4, 6), 3.0),
    ("clamp_lo_above_hi", lambda: Fn(lambda x: x.clamp(1.0, -1.0)), (2, 4, 6), 3.0),
    ("clamp_min_fn", lambda: Fn(lambda x: x.clamp_min(0.1)), (2, 4, 6), 3.0),
    ("clamp_max_fn", lambda: Fn(lambda x: x.clamp_max(-0.1)), (2, 4, 6), 3.0),
    ("clamp_tensor_both", lambda: ClampTensor(True, True), (2, 4, 6), 3.0),
    ("clamp_tensor_min", lambda: ClampTensor(True, False), (2, 4, 6), 3.0),
    ("glu_dim1", lambda: nn.GLU(dim=1), (2, 4, 6), 3.0),
    ("glu_last", nn.GLU, (2, 4, 6), 3.0),
    ("softmax_last", lambda: nn.Softmax(dim=-1), (2, 4, 6), 5.0),
    ("softmax_dim1", lambda: nn.Softmax(dim=1), (2, 4, 6), 5.0),
    ("softmax_private", lambda: Fn(lambda x: torch._softmax(x, 1, False)), (2, 4, 6), 5.0),
    ("softmax_dtype_f64", lambda: Fn(lambda x: F.softmax(x, -1, dtype=torch.float64)), (2, 4, 6), 5.0),
    ("log_softmax_last", lambda: nn.LogSoftmax(dim=-1), (2, 4, 6), 5.0),
    ("log_softmax_dim0", lambda: nn.LogSoftmax(dim=0), (2, 4, 6), 5.0),
    ("log_softmax_private", lambda: Fn(lambda x: torch._log_softmax(x, -2, False)), (2, 4, 6), 5.0),
    ("log_softmax_big", lambda: nn.LogSoftmax(dim=-1), (2, 4, 6), 300.0),
]


@pytest.mark.parametrize("factory,shape,scale", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_activation_f32(factory, shape, scale, tmp_path):
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.randn(*shape) * scale
    export_and_check(model, (x,), tmp_path, atol=1e-4, rtol=1e-4, input_names=["x"], output_names=["y"])


# A dynamic batch (and sequence) axis must survive every formula.
DYNAMIC = [
    ("prelu_channels", lambda: prelu(4)),
    ("gelu", nn.GELU),
    ("softplus_beta_threshold", lambda: nn.Softplus(beta=2.0, threshold=3.0)),
    ("threshold", lambda: nn.Threshold(0.1, 2.0)),
    ("glu_dim1", lambda: nn.GLU(dim=1)),
    ("softmax_last", lambda: nn.Softmax(dim=-1)),
    ("log_softmax_last", lambda: nn.LogSoftmax(dim=-1)),
]


@pytest.mark.parametrize("factory", [c[1] for c in DYNAMIC], ids=[c[0] for c in DYNAMIC])
def test_activation_dynamic_axes(factory, tmp_path):
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.randn(2, 4, 6) * 3
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B", 2: "S"}})
    export_and_check(model, (x,), tmp_path, target=target, input_names=["x"], output_names=["y"],
                     run_inputs=[torch.randn(3, 4, 5) * 3])


def test_log_softmax_before_native_op(tmp_path):
    """Targets older than 0.21.14 lack tract_core_log_softmax: the explicit formula."""
    from fastnnef.op.families import load_handlers
    from fastnnef.utils import SemanticVersion

    old = load_handlers().lookup("aten::log_softmax", SemanticVersion.from_str("0.21.13"))
    new = load_handlers().lookup("aten::log_softmax", SemanticVersion.from_str("0.21.14"))
    assert old is not None and new is not None and old.fn is not new.fn
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6) * 50
    # Exported for 0.21.13, but checked (and run) in the linked tract 0.23.9.
    path = export_and_check(nn.LogSoftmax(dim=-1), (x,), tmp_path, target=TractNNEF("0.21.13"),
                            compression_level=None, input_names=["x"], output_names=["y"])
    text = (path / "graph.nnef").read_text()
    assert "tract_core_log_softmax" not in text and "max_reduce" in text


F16_CASES = [
    ("relu", nn.ReLU),
    ("gelu", nn.GELU),
    ("gelu_tanh", lambda: nn.GELU(approximate="tanh")),
    ("silu", nn.SiLU),
    ("hardswish", nn.Hardswish),
    ("leaky_relu", lambda: nn.LeakyReLU(0.2)),
    ("prelu_channels", lambda: prelu(4)),
    ("elu", nn.ELU),
    ("threshold", lambda: nn.Threshold(0.1, 2.0)),
    ("hardshrink", lambda: nn.Hardshrink(0.7)),
    ("mish", nn.Mish),
    ("logsigmoid", nn.LogSigmoid),
    ("softplus", lambda: nn.Softplus(beta=2.0, threshold=3.0)),
    ("softmax", lambda: nn.Softmax(dim=-1)),
    ("log_softmax", lambda: nn.LogSoftmax(dim=-1)),
    ("softmax_to_f32", lambda: Fn(lambda x: F.softmax(x, -1, dtype=torch.float32))),
    ("clamp", lambda: Fn(lambda x: x.clamp(-1, 1))),
]


@pytest.mark.parametrize("factory", [c[1] for c in F16_CASES], ids=[c[0] for c in F16_CASES])
def test_activation_f16(factory, tmp_path):
    torch.manual_seed(0)
    model = factory().eval().half()
    x = (torch.randn(2, 4, 6) * 3).half()
    target = TractNNEF.latest().with_check_io_tolerance(TractCheckTolerance.VERY)
    export_and_check(model, (x,), tmp_path, target=target, atol=1e-2, rtol=1e-2,
                     input_names=["x"], output_names=["y"])


def test_f16_softmax_computed_in_f32(tmp_path):
    """An f16 softmax (gpt-oss's attention) runs in f32 between two casts, as torch's CPU
    kernel computes it: closer to torch than tract's f16 softmax, and faster on CPUs
    without f16 arithmetic."""
    torch.manual_seed(0)
    x = (torch.randn(2, 8, 16, 17) * 4).half()
    target = TractNNEF.latest().with_check_io_tolerance(TractCheckTolerance.VERY)
    path = export_and_check(nn.Softmax(dim=-1), (x,), tmp_path, target=target, compression_level=None,
                            atol=2e-3, rtol=2e-3, input_names=["x"], output_names=["y"])
    text = (path / "graph.nnef").read_text()
    assert re.search(r"(\w+) = tract_core_cast\(x, to = 'f32'\);\n\s*(\w+) = softmax\(\1, axes = \[3\]\);\n"
                     r"\s*y = tract_core_cast\(\2, to = 'f16'\);", text), text


def test_integer_clamp(tmp_path):
    """clamp keeps an integer tensor integer (int literals, exact comparison)."""
    x = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4)
    export_and_check(Fn(lambda t: t.clamp(-2, 3)), (x,), tmp_path, input_names=["x"], output_names=["y"])
