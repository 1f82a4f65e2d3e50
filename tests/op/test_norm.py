"""Normalization handlers: each exported module runs in tract and matches torch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from fastnnef.op.families import load_handlers
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
    return pytest.param(*c.values[1:], marks=c.marks, id=c.values[0]) if hasattr(c, "marks") else pytest.param(*c[1:],
                                                                                                               id=c[0])


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
    assert ("to = 'f32'" in text) == force_f32
    assert ("to = 'f16'" in text) == force_f32


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


# --- weight norm; native_layer_norm / native_group_norm (with their mean and rstd) ---------
def weight_normed(make: Callable[[], nn.Module], dim: int | None, legacy: bool) -> nn.Module:
    """``make()`` with a weight-norm reparametrization whose g and v are both randomized
    (at creation g = ||v||, which would hide a wrong norm)."""
    from torch.nn.utils import parametrizations, weight_norm

    module = weight_norm(make(), dim=dim) if legacy else parametrizations.weight_norm(make(), dim=dim)
    return randomized(module)


WEIGHT_NORM_CASES = [
    pytest.param(make, shape, dim, legacy, id=f"{what}-dim{dim}-{'legacy' if legacy else 'param'}")
    for what, make, shape, dims in [
        ("conv1d", lambda: nn.Conv1d(4, 6, 3, padding=1, groups=2), (2, 4, 9), (0, 1, 2, None)),
        ("conv2d", lambda: nn.Conv2d(3, 5, 3), (1, 3, 6, 5), (0, -2, None)),
        ("linear", lambda: nn.Linear(4, 6), (2, 3, 4), (0, 1, None)),
    ]
    for dim in dims for legacy in (False, True)
]


# The legacy form is deprecated by torch itself (a FutureWarning when it is applied): the
# test applies it on purpose, as models saved with it do.
@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
@pytest.mark.parametrize("make, shape, dim, legacy", WEIGHT_NORM_CASES)
def test_weight_norm(make: Callable[[], nn.Module], shape: tuple, dim: int | None, legacy: bool, tmp_path) -> None:
    torch.manual_seed(0)
    export_and_check(weight_normed(make, dim, legacy), (torch.randn(*shape),), tmp_path, atol=1e-4)


def test_weight_norm_wav2vec2_positional_conv(tmp_path) -> None:
    """wav2vec2's positional convolution: a grouped conv weight-normed over dim 2, on a
    dynamic time axis."""
    model = weight_normed(lambda: nn.Conv1d(8, 8, 5, padding=2, groups=4), 2, False)
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    export_and_check(model, (torch.randn(1, 8, 9),), tmp_path, target=target, input_names=["x"],
                     run_inputs=[torch.randn(1, 8, 13)], atol=1e-4)


def test_weight_norm_f16(tmp_path) -> None:
    model = weight_normed(lambda: nn.Conv1d(4, 6, 3), 0, False).half()
    export_and_check(model, (torch.randn(1, 4, 7).half(),), tmp_path, atol=1e-2, rtol=1e-2)


NATIVE_NORM_CASES = [
    ("layer_norm", lambda x, w, b: torch.native_layer_norm(x, [6], w, b, 1e-5), (2, 4, 6), [6]),
    ("layer_norm_2d_shape", lambda x, w, b: torch.native_layer_norm(x, [4, 6], w, b, 1e-3), (2, 4, 6), [4, 6]),
    ("layer_norm_no_affine", lambda x, w, b: torch.native_layer_norm(x, [6], None, None, 1e-5), (3, 6), None),
    ("group_norm", lambda x, w, b: torch.native_group_norm(x, w, b, x.shape[0], 6, x.shape[2], 3, 1e-5),
     (2, 6, 5), [6]),
    ("group_norm_4d_no_affine",
     lambda x, w, b: torch.native_group_norm(x, None, None, x.shape[0], 4, x.shape[2] * x.shape[3], 2, 1e-5),
     (2, 4, 3, 5), None),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("fn, shape, param_shape", [pytest.param(*c[1:], id=c[0]) for c in NATIVE_NORM_CASES])
def test_native_norm_outputs(fn: Callable, shape: tuple, param_shape: list | None, dtype: torch.dtype,
                             tmp_path) -> None:
    """All three outputs (normalized, mean, rstd) match torch's, with the batch dynamic."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(param_shape, generator=gen).to(dtype) if param_shape else None
    b = torch.randn(param_shape, generator=gen).to(dtype) if param_shape else None
    x = (torch.randn(*shape, generator=gen) * 3 + 1).to(dtype)
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B"}})
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    export_and_check(Fn(lambda x: fn(x, w, b)), (x,), tmp_path, target=target, input_names=["x"], atol=tol, rtol=tol,
                     run_inputs=[(torch.randn(5, *shape[1:], generator=gen) * 3 + 1).to(dtype)])


class _ResidualBlock(nn.Module):
    """ResNet's basic block: conv, batch_norm, an in-place residual add (``out += x``). The
    write makes torch.export functionalize the graph, which turns each eval batch_norm into
    ``_native_batch_norm_legit_no_training``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn(self.conv(x))
        out += x
        return torch.relu(out)


def test_batch_norm_in_a_graph_that_writes_in_place(tmp_path) -> None:
    torch.manual_seed(0)
    model = _ResidualBlock().eval()
    with torch.no_grad():  # running statistics other than the defaults
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.bn.weight.uniform_(0.5, 2)
        model.bn.bias.uniform_(-1, 1)
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B", 2: "H"}})
    export_and_check(model, (torch.randn(2, 4, 8, 8),), tmp_path, target=target, atol=1e-4, rtol=1e-4,
                     input_names=["x"], run_inputs=[torch.randn(3, 4, 5, 8)])
