"""The write handlers (op/aten/inplace.py) exported through in-place ops and run in tract,
compared with torch: the value copy_/fill_/zero_ leave, and where slice_scatter and
select_scatter put a written view back (bounds, steps, dynamic axes, dtypes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def written(*writes: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> a copy of x after each write(y) in turn."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        for write in writes:
            write(y)
        return y
    return fn


def copy_from(write: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[[torch.Tensor, torch.Tensor],
                                                                              torch.Tensor]:
    def fn(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = x * 1
        write(y, z)
        return y
    return fn


def setitem(index: Any, value: Any) -> Callable[[torch.Tensor], None]:
    def write(y: torch.Tensor) -> None:
        y[index] = value
    return write


def flattened_fill(x: torch.Tensor) -> torch.Tensor:
    z = x.reshape(-1) * 1  # the merged dynamic axis has no size expression: filled at run time's shape
    z.fill_(2.0)
    return z


# (id, fn, inputs factory, dynamic axes {input index: {dim: symbol}} or None)
CASES = [
    # copy_ / fill_ / zero_: broadcast and cast into the written tensor
    ("fill_scalar", written(lambda y: y[1].fill_(3.5)), lambda: (randn(3, 4),), None),
    ("fill_0d_tensor", written(lambda y: y[:, 2].fill_(torch.tensor(-1.0))), lambda: (randn(3, 4),), None),
    ("zero", written(lambda y: y[1:].zero_()), lambda: (randn(3, 4),), None),
    ("copy_broadcast_rows", copy_from(lambda y, z: y[:, 1:3].copy_(z)), lambda: (randn(3, 4), randn(1, 2)), None),
    ("copy_cast_int_to_float", copy_from(lambda y, z: y[:, 0].copy_(z)),
     lambda: (randn(3, 4), torch.randint(-3, 3, (3,))), None),
    ("copy_cast_float_to_int", copy_from(lambda y, z: y[1].copy_(z)),
     lambda: (torch.randint(-3, 3, (3, 4)), randn(4) * 4), None),
    ("fill_int", written(setitem((slice(None), 1), 7), lambda y: y[0].add_(3)),
     lambda: (torch.randint(-5, 5, (3, 4)),), None),
    ("fill_bool", written(setitem((0, slice(1, 3)), True)), lambda: (torch.rand(3, 4) > 0.5,), None),
    ("fill_f16", written(setitem((slice(None), 0), 1.5), lambda y: y[1:3].mul_(2.0)),
     lambda: (randn(3, 4).half(),), None),
    ("fill_unknown_dynamic_dims", flattened_fill, lambda: (randn(2, 5),), {0: {1: "S"}}),
    ("copy_unknown_dynamic_dims", copy_from(lambda y, z: y[:, -2:].copy_(z)), lambda: (randn(2, 6), randn(2, 1)),
     {0: {1: "S"}}),
    # slice_scatter: where the written slice goes back
    ("slice_head", written(setitem((slice(None), slice(0, 2)), 0.0)), lambda: (randn(3, 5),), None),
    ("slice_middle", written(lambda y: y[:, 1:4].mul_(-1.0)), lambda: (randn(3, 5),), None),
    ("slice_tail_negative", written(setitem(slice(-2, None), 9.0)), lambda: (randn(4, 3),), None),
    ("slice_negative_end", written(lambda y: y[:, 1:-1].add_(1.0)), lambda: (randn(2, 5),), None),
    ("slice_past_end", written(lambda y: y[:, 3:100].add_(1.0)), lambda: (randn(2, 5),), None),
    ("slice_empty", written(lambda y: y[:, 3:1].add_(1.0)), lambda: (randn(2, 5),), None),
    ("slice_whole_axis", written(setitem(slice(None), 2.0)), lambda: (randn(2, 5),), None),
    ("slice_step_axis0", written(setitem(slice(None, None, 2), -1.0)), lambda: (randn(5, 3),), None),
    ("slice_step_axis1", written(lambda y: y[:, 1:6:3].mul_(10.0)), lambda: (randn(2, 7),), None),
    ("slice_step_3d", written(lambda y: y[:, :, ::2].neg_()), lambda: (randn(2, 3, 5),), None),
    ("slice_dynamic_tail", written(lambda y: y[:, 2:].add_(1.0)), lambda: (randn(2, 6),), {0: {1: "S"}}),
    ("slice_dynamic_negative", written(setitem((slice(None), slice(-2, None)), 0.0)),
     lambda: (randn(2, 6),), {0: {1: "S"}}),
    ("slice_dynamic_static_region", written(lambda y: y[:, 1:3].mul_(3.0)), lambda: (randn(2, 6),), {0: {1: "S"}}),
    ("slice_step_static_axis_of_dynamic_tensor", written(lambda y: y[::2].mul_(3.0)),
     lambda: (randn(4, 6),), {0: {1: "S"}}),
    # select_scatter: one position back
    ("select_first", written(setitem((slice(None), 0), 1.0)), lambda: (randn(3, 4),), None),
    ("select_last_negative", written(setitem((slice(None), -1), 1.0)), lambda: (randn(3, 4),), None),
    ("select_middle_3d", written(lambda y: y[:, 1].mul_(0.5)), lambda: (randn(2, 3, 4),), None),
    ("select_dynamic_negative", written(setitem((slice(None), -1), 0.0)), lambda: (randn(2, 5),), {0: {1: "S"}}),
    ("select_dynamic_first", written(setitem((slice(None), 0), 0.0)), lambda: (randn(2, 5),), {0: {1: "S"}}),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_inplace_handlers(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                          tmp_path: Path) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


def test_stepped_write_to_the_end_of_a_dynamic_axis_is_refused(tmp_path: Path) -> None:
    """Its positions depend on the axis' length: tract's scatter needs them as constants."""
    target = TractNNEF.latest().with_dynamic_axes({"in0": {1: "S"}})
    with pytest.raises(T2NErrorNotImplemented, match="fastnnef::slice_scatter in <root module> .*: a write through "
                       "a slice with step 2 whose bounds depend on a dynamic axis. write through a slice"):
        export_and_check(Fn(written(lambda y: y[:, 1::2].zero_())), (randn(2, 6),), tmp_path, target=target,
                         input_names=["in0"])


def test_strict_nnef_writes(tmp_path: Path) -> None:
    """Strict Khronos graphs: the fill is a standard select and the scatter a concat."""
    fn = written(setitem((slice(None), 0), 1.0), lambda y: y[1:3].mul_(2.0))
    path = export_and_check(Fn(fn), (randn(4, 5),), tmp_path, target=KhronosNNEF.latest(), compression_level=None)
    assert "tract_" not in (path / "graph.nnef").read_text()


def _size_tensor_add(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] + torch.zeros((), dtype=torch.int64)
    n += 1
    return x * n


def _size_tensor_mul(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] * torch.ones(())
    n.mul_(2)
    return x + n


def _size_tensor_sub(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] // 2 + torch.zeros((), dtype=torch.int64)
    n.sub_(x.size(0))
    return x * n


@pytest.mark.parametrize("fn", [_size_tensor_add, _size_tensor_mul, _size_tensor_sub], ids=["add", "mul", "sub"])
def test_write_into_a_tensor_of_a_size(fn: Callable[[torch.Tensor], torch.Tensor], tmp_path: Path) -> None:
    """A 0-d tensor made from a static size, written in place (EnCodec's and HTDemucs'
    padding amounts): the tracer's graph folds it to a number, which the write copies as a
    tensor again."""
    export_and_check(Fn(fn), (torch.randn(2, 5),), tmp_path)
