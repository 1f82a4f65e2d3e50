"""Normalization handlers: each exported module runs in tract and matches torch."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from fastnnef.op.registry import load_handlers
from tests.helpers import Fn, export_and_check


def randomized(module: nn.Module) -> nn.Module:
    """Non-trivial affine parameters and running statistics (defaults are 1/0)."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            if "var" in name:
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=gen))
    return module.eval()


class HandRMSNorm(nn.Module):
    """RMSNorm written with primitive ops (pow, mean, rsqrt), as many LLM codebases do."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight




def needs(*kinds: str) -> list[pytest.MarkDecorator]:
    """Cases that also go through other families' handlers: expected to fail (strictly)
    exactly while one of those handlers is not registered yet."""
    missing = [k for k in kinds if load_handlers().lookup(k, TractNNEF.latest_version()) is None]
    return [pytest.mark.xfail(bool(missing), strict=True, reason=f"no handler yet for {missing}")]


# (id, module factory, input shape, dynamic axes of "x")
CASES = [
    ("batch_norm_1d", lambda: randomized(nn.BatchNorm1d(4)), (2, 4, 6), {0: "B", 2: "S"}),
    ("batch_norm_1d_2d_input", lambda: randomized(nn.BatchNorm1d(4)), (3, 4), {0: "B"}),
    ("batch_norm_2d", lambda: randomized(nn.BatchNorm2d(3)), (2, 3, 4, 5), {0: "B"}),
    ("batch_norm_no_affine", lambda: randomized(nn.BatchNorm2d(3, affine=False)), (2, 3, 4, 5), None),
    ("batch_norm_batch_stats", lambda: randomized(nn.BatchNorm1d(4, track_running_stats=False)), (3, 4, 6), None),
    ("instance_norm", lambda: nn.InstanceNorm1d(4), (2, 4, 6), {0: "B", 2: "S"}),
    ("instance_norm_affine", lambda: randomized(nn.InstanceNorm2d(3, affine=True)), (2, 3, 4, 5), None),
    ("instance_norm_running_stats", lambda: randomized(nn.InstanceNorm1d(4, affine=True, track_running_stats=True)),
     (2, 4, 6), None),
    ("group_norm", lambda: randomized(nn.GroupNorm(2, 4)), (2, 4, 6), {0: "B", 2: "S"}),
    ("group_norm_4d", lambda: randomized(nn.GroupNorm(3, 6)), (2, 6, 3, 4), {0: "B", 3: "W"}),
    ("group_norm_no_affine", lambda: nn.GroupNorm(2, 6, affine=False), (2, 6, 5), None),
    ("group_norm_per_channel", lambda: randomized(nn.GroupNorm(4, 4)), (2, 4, 5), None),
    ("layer_norm", lambda: randomized(nn.LayerNorm(6)), (2, 4, 6), {0: "B", 1: "S"}),
    ("layer_norm_2d_shape", lambda: randomized(nn.LayerNorm([4, 6], eps=1e-3)), (2, 4, 6), {0: "B"}),
    ("layer_norm_no_affine", lambda: nn.LayerNorm(6, elementwise_affine=False), (2, 4, 6), None),
    ("layer_norm_no_bias", lambda: randomized(nn.LayerNorm(6, bias=False)), (2, 4, 6), None),
    ("layer_norm_functional", lambda: Fn(lambda x: F.layer_norm(x, (6,), eps=1e-2)), (3, 6), None),
    ("rms_norm", lambda: randomized(nn.RMSNorm(6)), (2, 4, 6), {0: "B", 1: "S"}),
    ("rms_norm_2d_shape_eps", lambda: randomized(nn.RMSNorm([4, 6], eps=1e-3)), (2, 4, 6), None),
    ("rms_norm_no_affine", lambda: nn.RMSNorm(6, elementwise_affine=False), (2, 4, 6), None),
    pytest.param("rms_norm_hand_written", lambda: HandRMSNorm(6), (2, 4, 6), {0: "B", 1: "S"},
                 marks=needs("aten::mean")),
    pytest.param("normalize", lambda: Fn(lambda x: F.normalize(x, dim=-1)), (2, 4, 6), None,
                 marks=needs("aten::linalg_vector_norm")),
]


def _case(c):
    return pytest.param(*c.values[1:], marks=c.marks, id=c.values[0]) if hasattr(c, "marks") else pytest.param(*c[1:], id=c[0])


@pytest.mark.parametrize("factory,shape,dyn", [_case(c) for c in CASES])
def test_norm_f32(factory, shape, dyn, tmp_path):
    torch.manual_seed(0)
    model = factory()
    x = torch.randn(*shape) * 3 + 1
    target = TractNNEF.latest().with_dynamic_axes({"x": dyn} if dyn else None)
    run = None
    if dyn:  # run again with other sizes on the dynamic axes
        other = [s + 1 if i in dyn else s for i, s in enumerate(shape)]
        run = [torch.randn(*other) * 3 + 1]
    export_and_check(model, (x,), tmp_path, target=target, atol=1e-4, rtol=1e-4,
                     input_names=["x"], output_names=["y"], run_inputs=run)


F16_CASES = [
    ("layer_norm", lambda: randomized(nn.LayerNorm(6))),
    ("group_norm", lambda: randomized(nn.GroupNorm(2, 4))),
    ("batch_norm", lambda: randomized(nn.BatchNorm1d(4))),
    ("instance_norm", lambda: nn.InstanceNorm1d(4)),
    ("rms_norm", lambda: randomized(nn.RMSNorm(6))),
]


@pytest.mark.parametrize("force_f32", [False, True], ids=["f16", "forced_f32"])
@pytest.mark.parametrize("factory", [c[1] for c in F16_CASES], ids=[c[0] for c in F16_CASES])
def test_norm_f16(factory, force_f32, tmp_path):
    torch.manual_seed(0)
    model = factory().half()
    x = (torch.randn(2, 4, 6) * 3 + 1).half()
    target = TractNNEF(TractNNEF.latest_version(), force_norm_in_f32=force_f32,
                       check_io_tolerance=TractCheckTolerance.VERY)
    path = export_and_check(model, (x,), tmp_path, target=target, atol=1e-2, rtol=1e-2,
                            compression_level=None, input_names=["x"], output_names=["y"])
    text = (path / "graph.nnef").read_text()
    # Forced: the input goes to f32 and the result comes back to f16; otherwise no cast.
    assert ("to = 'f32'" in text or 'to = "f32"' in text) == force_f32
    assert ("to = 'f16'" in text or 'to = "f16"' in text) == force_f32


class Block(nn.Module):
    """A small f16 transformer-ish block: the acts and norms together, one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc(self.norm(x)))
        return torch.softmax(torch.relu(h) + x, dim=-1)


@pytest.mark.parametrize("force_f32", [False, True], ids=["f16", "forced_f32"])
def test_f16_block(force_f32, tmp_path):
    torch.manual_seed(0)
    model = randomized(Block()).half()
    x = torch.randn(2, 3, 8).half()
    target = TractNNEF(TractNNEF.latest_version(), force_norm_in_f32=force_f32,
                       check_io_tolerance=TractCheckTolerance.VERY, dynamic_axes={"x": {1: "S"}})
    export_and_check(model, (x,), tmp_path, target=target, atol=1e-2, rtol=1e-2,
                     input_names=["x"], output_names=["y"], run_inputs=[torch.randn(2, 5, 8).half()])
