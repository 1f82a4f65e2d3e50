"""In-place writes exported with torch's semantics (torch_graph/ir/functionalize.py): each case runs
in tract and matches torch; writes a graph of values cannot express are refused."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.ir import Const, ListValue, build_ir
from fastnnef.torch_graph.ir.functionalize import permutation
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def mask(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) > 0.5


def fill_column(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()  # the real-model failure: refused, and dropped by the reference
    y[:, 0] = 1.0
    return y


def add_into_slice(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1:3] += x[:, :2]  # add_ on the view, then copy_ of the sum into it again
    return y


def two_stacked_views(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1:3][:, 0] = 7.0
    y[1:][0][2:] *= -1.0
    return y


def view_before_write(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 1
    col = y[:, 1]  # taken before the writes, read after: torch's view sees them
    y[0, :] = 5.0
    y.mul_(2.0)
    return col + 1.0, y


def masked_fill_view(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, :2].masked_fill_(m, 0.0)
    return y


def through_transpose(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.t()[0].zero_()
    y.permute(1, 0)[2:, 1:] += 10.0
    y.transpose(0, 1).unsqueeze(0)[0, 1, 2] = -3.0
    return y


def moved_axes(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.swapaxes(1, 2)[0, 1:3] *= -1.0
    y.transpose(-1, -2)[..., -1].add_(5.0)
    return y


def index_put_view(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[1:, i] = v
    return y


def copy_broadcast(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 2:4].copy_(z)  # z [1, 2] broadcast over the rows
    y[0].copy_(torch.arange(5))  # int source cast to the tensor's dtype
    return y


def chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[0] = 1.0
    y[:, -1] = 2.0
    y[1:3, 1:3] *= 3.0
    y[2].clamp_(min=0.0)
    return y


def loop(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for i in range(x.shape[1]):  # unrolled by the trace: one write per column
        out[:, i] = x[:, i] * i + out[:, i - 1]
    return out


def negative_and_stepped(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, -1] = 0.0
    y[-2:] += 3.0
    y[:, ::2] = -1.0
    y[1::2, 1:5:3] *= 4.0
    y[:, -4:-1:2] += 0.5
    return y


def plain_rebinding(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.add_(1.0)
    y.mul_(y)
    y.sigmoid_()
    return y + 1.0


def through_reshape(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.view(-1)[3] = 9.0
    y.view(2, 10)[1] *= 2.0
    y.reshape(4, 5, 1)[:, 2] = 0.5
    y.flatten()[-1] = -9.0
    return y


def copies_are_not_views(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = x * 1
    c = y.t().contiguous()  # a copy: writing into it leaves y as it is
    c[0] = 1.0
    r = y.t().reshape(-1)  # a copy too (no strides give that shape)
    r[0] = 5.0
    d = y.detach()  # the same tensor: y sees the write
    d[1] = -1.0
    return y, c, r


def split_unbind(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    a, b = y.split([2, 3], dim=1)
    a.mul_(2.0)
    b[0] = 1.0
    rows = y.unbind(0)
    rows[3].fill_(3.0)
    y.chunk(2, dim=0)[1][:, 1] = -2.0
    return y


def narrow_write(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.narrow(1, -3, 2).fill_(1.0)
    y.narrow(0, 1, 2).neg_()
    return y


def inplace_reshape(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.unsqueeze_(0)  # y is now a [1, 4, 5] view of itself
    y[0, 1] = 4.0
    y.squeeze_(0)
    y.t_()
    y[0] += 1.0
    return y


def or_into_view(m: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    y = m.clone()
    y[:, 0] |= c
    return y


def int_writes(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1] = 7
    y[0] += 3
    return y


def dynamic_writes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.clone()
    tail = y[:, 1:]  # a view along the dynamic axis, read after the writes
    y[:, 0] = 1.0
    y[:, -1] = 2.0
    y[:, 1:3] += 5.0
    return y, tail * 2.0


def write_into_input(x: torch.Tensor) -> torch.Tensor:
    x[:, 0] = 0.0
    x.add_(1.0)
    return x * 2.0


def cloned_literal_write(x: torch.Tensor) -> torch.Tensor:
    t = torch.tensor([1.0, 2.0, 3.0]).clone()  # the workaround for writes into torch.tensor([...])
    t.add_(x.sum())
    t[0] = 0.0
    return t * x


def same_dtype_to_is_the_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 1
    col = y[:, 0]
    z = y.to(torch.float32)  # returns y itself: writes into z are writes into y
    z[1] = 4.0
    return col * 2.0, y


def folded_constant_write(x: torch.Tensor) -> torch.Tensor:
    m = torch.zeros(5)
    m[1] = 1.0
    m[3:] = 2.0
    return x + m


def through_diagonal(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.diagonal().fill_(0.0)
    return y


def through_diagonal_of_a_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[1:].diagonal(1, -1, -2).mul_(-2.0)  # a diagonal of a slice, its dims given backwards
    y.diagonal(0, 1, 2)[:, 1:] = 9.0
    return y


# (id, fn, inputs factory, dynamic axes {input index: {dim: symbol}} or None)
CASES = [
    ("fill_column", fill_column, lambda: (randn(3, 4),), None),
    ("add_into_slice", add_into_slice, lambda: (randn(3, 4),), None),
    ("two_stacked_views", two_stacked_views, lambda: (randn(4, 5),), None),
    ("view_before_write", view_before_write, lambda: (randn(3, 4),), None),
    ("masked_fill_view", masked_fill_view, lambda: (randn(3, 4), mask(3, 2)), None),
    ("through_transpose", through_transpose, lambda: (randn(4, 5),), None),
    ("moved_axes", moved_axes, lambda: (randn(2, 3, 4),), None),
    ("index_put_view", index_put_view, lambda: (randn(4, 5), torch.tensor([4, -5]), randn(3, 2)), None),
    ("copy_broadcast", copy_broadcast, lambda: (randn(3, 5), randn(1, 2)), None),
    ("chain", chain, lambda: (randn(4, 5),), None),
    ("loop", loop, lambda: (randn(3, 4),), None),
    ("negative_and_stepped", negative_and_stepped, lambda: (randn(5, 7),), None),
    ("plain_rebinding", plain_rebinding, lambda: (randn(3, 4),), None),
    ("through_reshape", through_reshape, lambda: (randn(4, 5),), None),
    ("copies_are_not_views", copies_are_not_views, lambda: (randn(3, 4),), None),
    ("split_unbind", split_unbind, lambda: (randn(4, 5),), None),
    ("narrow_write", narrow_write, lambda: (randn(4, 5),), None),
    ("inplace_reshape", inplace_reshape, lambda: (randn(4, 5),), None),
    ("or_into_view", or_into_view, lambda: (mask(3, 4), mask(3)), None),
    ("int_writes", int_writes, lambda: (torch.randint(-5, 5, (3, 4)),), None),
    ("f16", fill_column, lambda: (randn(3, 4).half(),), None),
    ("f16_chain", chain, lambda: (randn(4, 5).half(),), None),
    ("dynamic_writes", dynamic_writes, lambda: (randn(2, 6),), {0: {1: "S"}}),
    ("dynamic_batch_chain", chain, lambda: (randn(4, 5),), {0: {0: "B"}}),
    ("folded_constant_write", folded_constant_write, lambda: (randn(2, 5),), None),
    ("cloned_literal_write", cloned_literal_write, lambda: (randn(3),), None),
    ("same_dtype_to_is_the_tensor", same_dtype_to_is_the_tensor, lambda: (randn(3, 4),), None),
    ("through_diagonal", through_diagonal, lambda: (randn(4, 4),), None),
    ("through_diagonal_of_a_view_dyn", through_diagonal_of_a_view, lambda: (randn(3, 4, 4),), {0: {0: "B"}}),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_inplace(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                 tmp_path: Path) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


def test_bf16_writes(tmp_path: Path) -> None:
    """bf16 is computed in f32 by tract: the writes land, within bf16's precision."""
    target = TractNNEF.latest().with_check_io_tolerance("very")
    export_and_check(Fn(chain), (randn(4, 5).bfloat16(),), tmp_path, target=target, atol=5e-2, rtol=2e-2)


def test_write_into_input_leaves_the_users_tensor(tmp_path: Path) -> None:
    """The graph computes with the written input; the user's tensor is never modified."""
    x = randn(3, 4)
    before = x.clone()
    path = export_model_to_nnef(Fn(write_into_input), (x,), tmp_path / "m.nnef", TractNNEF.latest())
    assert torch.equal(x, before)
    (got,) = TractArtefact.load(path).run([x])
    expected = write_into_input(x.clone())
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)


def through_unfold(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.unfold(1, 2, 2).mul_(2.0)
    return y


def through_as_strided(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.as_strided((2, 2), (1, 4)).zero_()
    return y


def literal_written(x: torch.Tensor) -> torch.Tensor:
    t = torch.tensor([1.0, 2.0, 3.0])
    t.add_(x.sum())
    return t * 1.0


def mask_with_values(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, :2][m] = v[: int(m.sum())]
    return y


@pytest.mark.parametrize("fn, inputs, message", [
    pytest.param(through_unfold, (randn(3, 4),), "mul_ in <root module> (.*) writes in place into a view made by "
                 "aten::unfold .*write into .clone", id="unfold"),
    pytest.param(literal_written, (randn(3),), "add_ in <root module> .* writes in place into a tensor constant made "
                 "in forward .*Write into a copy \\(torch.tensor\\(\\[...\\]\\).clone\\(\\)\\)", id="literal"),
    pytest.param(through_as_strided, (randn(3, 4),), "view made by aten::as_strided", id="as_strided"),
    # a data-dependent number of elements: refused by index_put, through the view too
    pytest.param(mask_with_values, (randn(3, 4), torch.tensor([[True, False], [True, True], [False, False]]), randn(6)),
                 "x\\[mask\\] = tensor with elements. assign a scalar, or use torch.where", id="mask_with_values"),
])
def test_inplace_refused(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], message: str,
                         tmp_path: Path) -> None:
    """Writes whose effect a graph of values cannot express fail with the op, line and a fix."""
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), inputs, tmp_path)


class Cached(nn.Module):
    """Writes into its buffer in forward, as a cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.arange(12.0).view(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache[:, :2] = x
        self.cache.mul_(2.0)
        return self.cache + 1.0


def test_buffer_written_in_forward(tmp_path: Path) -> None:
    """The graph writes into the buffer's value; the model's buffer keeps its value."""
    model = Cached()
    before = model.cache.clone()
    x = randn(3, 2)
    path = export_model_to_nnef(model, (x,), tmp_path / "m.nnef", TractNNEF.latest())
    assert torch.equal(model.cache, before)
    (got,) = TractArtefact.load(path).run([x])
    expected = (before.clone().index_copy(1, torch.tensor([0, 1]), x) * 2.0) + 1.0
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6)


class Drifting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w.mul_(2.0)
        return x * self.w


def test_weight_written_in_forward_is_refused(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match=r"writes in place into the weights \['w'\]"):
        export_model_to_nnef(Drifting(), (randn(3),), tmp_path / "m.nnef", TractNNEF.latest())


def test_views_read_again_only_after_a_write() -> None:
    """A view read at the version it was taken costs nothing more; one read after a write
    into its storage is taken again, once."""
    ir = build_ir(trace_model(Fn(view_before_write), (randn(3, 4),), None, None))
    assert [op.kind for op in ir.ops].count("aten::select") == 3  # col, y[0], col again


@pytest.mark.parametrize("kind, args, shape, op", [
    ("aten::transpose", [0, -1], (2, 3, 4), lambda t: t.transpose(0, -1)),
    ("aten::swapdims", [1, 2], (2, 3, 4), lambda t: t.swapdims(1, 2)),
    ("aten::t", [], (3, 4), lambda t: t.t()),
    ("aten::numpy_T", [], (2, 3, 4), lambda t: t.permute(2, 1, 0)),
    ("aten::mT", [], (2, 3, 4), lambda t: t.mT),
    ("aten::permute", [[2, -3, 1]], (2, 3, 4), lambda t: t.permute(2, 0, 1)),
    ("aten::movedim", [0, -1], (2, 3, 4), lambda t: t.movedim(0, -1)),
    ("aten::moveaxis", [[0, 2], [2, 1]], (2, 3, 4, 5), lambda t: t.moveaxis([0, 2], [2, 1])),
])
def test_permutation_of_views(kind: str, args: list[Any], shape: tuple[int, ...],
                              op: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The axis order a permuting view makes, as torch makes it (written back by its inverse)."""
    x = torch.arange(math.prod(shape)).view(shape)
    values = [ListValue("l", [Const("d", a) for a in arg]) if isinstance(arg, list) else Const("d",
                                                                                               arg) for arg in args]
    assert torch.equal(x.permute(permutation(kind, values, x.dim())), op(x))
