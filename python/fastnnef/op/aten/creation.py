"""Tensor creation and casts: arange, zeros/ones/full/empty (+ _like, new_), scalar_tensor,
tensor, to/type_as; eye, linspace/logspace, tril/triu_indices, meshgrid, cartesian_prod,
combinations, one_hot, fill/zero.

A filled tensor is a literal broadcast to the shape (``tract_core_broadcast``), so no
constant tensor is written and dynamic shapes work; the dtype comes from the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import unknown, volume
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

Number = int | float | bool


def _fill(ctx: OpContext, value: Number | DimExpr, shape: Sequence[Size], x: NTensor | None = None) -> NTensor:
    """``value`` broadcast to ``shape`` as the node output, in the traced dtype. With ``x``
    given and dims of unknown expression, the shape is taken from ``x`` at run time.
    Strict NNEF (no broadcast op): a one-element constant tiled to the static shape."""
    if ctx.strict and not isinstance(value, DimExpr) and all(isinstance(d, int) for d in shape):
        one = ctx.constant(torch.full((1,) * len(shape), value, dtype=ctx.out_torch_dtype()),
                           f"fill_{ctx.out_dtype()}_{value}_rank{len(shape)}")
        return ctx.emit("tile", [one], {"repeats": list(shape)}) if shape else ctx.emit("copy", [one])
    scalar = typed_scalar(ctx, value, ctx.out_dtype())
    if any(unknown(d) for d in shape):
        if x is None:
            raise ctx.unsupported(
                "creating a tensor whose size depends on a dynamic axis in an unknown way",
                "build the size from x.size(i) directly, or use torch.*_like",
            )
        ref = ctx.tmp("tract_core_shape_of", [x], dtype="tdim", shape=(x.rank,), suffix="shape")
        return ctx.emit("tract_core_broadcast", [scalar], {"shape": ref}, shape=shape)
    return ctx.emit("tract_core_broadcast", [scalar], {"shape": list(shape)}, shape=shape)


def _number(ctx: OpContext, value: object) -> Number | DimExpr:
    if isinstance(value, (int, float, bool)):
        return value
    raise ctx.unsupported(f"fill value {value!r}", "use a Python number")


@handler("aten::zeros", "aten::ones", "aten::empty", args="D *")
def zeros(ctx: OpContext, size: list[Size]) -> NTensor:
    """aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (ones, empty)"""  # noqa: E501
    return _fill(ctx, 1 if ctx.kind == "aten::ones" else 0, size)


@handler("aten::full", args="D n *")
def full(ctx: OpContext, size: list[Size], value: object) -> NTensor:
    """aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _fill(ctx, _number(ctx, value), size)


@handler("aten::new_zeros", "aten::new_ones", "aten::new_empty", args="t D *")
def new_zeros(ctx: OpContext, _x: NTensor, size: list[Size]) -> NTensor:
    """aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _fill(ctx, 1 if ctx.kind == "aten::new_ones" else 0, size)


@handler("aten::new_full", args="t D n *")
def new_full(ctx: OpContext, _x: NTensor, size: list[Size], value: object) -> NTensor:
    """aten::new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _fill(ctx, _number(ctx, value), size)


@handler("aten::zeros_like", "aten::ones_like", "aten::empty_like", args="t *")
def zeros_like(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _fill(ctx, 1 if ctx.kind == "aten::ones_like" else 0, x.shape, x)


@handler("aten::full_like", args="t n *")
def full_like(ctx: OpContext, x: NTensor, value: object) -> NTensor:
    """aten::full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _fill(ctx, _number(ctx, value), x.shape, x)


@handler("aten::scalar_tensor", args="v *")
def scalar_tensor(ctx: OpContext, value: Any) -> NTensor:
    """aten::scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    # The IR builder also makes this op for a size of a dynamic axis read as a 0-d tensor.
    return _fill(ctx, value if isinstance(value, DimExpr) else _number(ctx, value), ())


@handler("aten::tensor", args="v *")
def tensor(ctx: OpContext, data: Any) -> NTensor:
    """aten::tensor(t[] data, *, ScalarType? dtype=None, Device? device=None, bool requires_grad=False) -> Tensor"""
    if isinstance(data, (DimExpr, int, float, bool)):  # torch.tensor(x.size(1)): the size as a 0-d tensor
        return _fill(ctx, data, ())
    raise ctx.unsupported("torch.tensor() of a list built in forward", "create the tensor in __init__ as a buffer")


# --- arange -----------------------------------------------------------------------------
Bound = Number | DimExpr | NTensor


def _arange_bound(ctx: OpContext, v: Any) -> Bound:
    """A bound of arange: a number, a size of a dynamic axis or a 0-d tensor."""
    if isinstance(v, (DimExpr, int, float)) or (isinstance(v, NTensor) and v.rank == 0):
        return v
    raise ctx.unsupported(f"arange with a bound {v!r}", "use numbers, x.size(i) or 0-d tensors")


def _arange_of_tensors(ctx: OpContext, bounds: list[Number | DimExpr | NTensor], dtype: str) -> NTensor:
    """arange whose bounds are read from tensors: tract computes the length when it runs
    (its range op takes three scalars of one type), so nothing of the traced values stays."""
    if any(isinstance(b, DimExpr) for b in bounds):
        raise ctx.unsupported("arange mixing tensor bounds and sizes of dynamic axes")
    kind = dtype if dtype in FLOAT_DTYPES else "i64"
    scalars = [
        b if not isinstance(b, NTensor) or b.dtype == kind
        else ctx.tmp("tract_core_cast", [b], {"to": kind}, dtype=kind, shape=(), suffix=f"bound{i}")
        for i, b in enumerate(bounds)
    ]
    scalars = [float(b) if kind in FLOAT_DTYPES and isinstance(b, (int, float)) else b for b in scalars]
    r = ctx.tmp("tract_core_range", scalars, dtype=kind, shape=ctx.out_shape(), suffix="range")
    return ctx.emit("copy", [r]) if kind == dtype else ctx.emit("tract_core_cast", [r], {"to": dtype})


@handler("aten::arange", args="v v v _ _ _ _")
def arange(ctx: OpContext, start: Any, end: Any, step: Any) -> NTensor:
    """aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    bounds = [_arange_bound(ctx, v) for v in (start, end, step)]
    dtype = ctx.out_dtype()
    if any(isinstance(b, NTensor) for b in bounds):
        if ctx.strict:
            raise ctx.unsupported("arange with tensor bounds in strict NNEF, which has no range op")
        return _arange_of_tensors(ctx, bounds, dtype)
    start, end, step = bounds
    dynamic = any(isinstance(v, DimExpr) for v in (start, end, step))
    if not dynamic and (ctx.strict or dtype in FLOAT_DTYPES or any(isinstance(v, float) for v in (start, end, step))):
        # Static float range (or any static range in strict NNEF, which has no range op):
        # torch's exact values, stored as a constant.
        return ctx.constant(torch.arange(start, end, step, dtype=ctx.out_torch_dtype()))
    if any(isinstance(v, float) for v in (start, end, step)):
        raise ctx.unsupported("arange with float bounds and a dynamic end", "use integer bounds and scale the result")
    if isinstance(step, DimExpr) or step == 0:
        raise ctx.unsupported("arange with a dynamic or zero step")
    # The IR simplified the length of dynamic ranges (arange(P, P+S) has S entries).
    length: Size = len(range(int(start), int(end), int(step))) if not dynamic else ctx.out_shape()[0]
    r = ctx.tmp("tract_core_range", [start, end, step], dtype="i64", shape=(length,), suffix="range")
    return ctx.emit("tract_core_cast" if dtype != "i64" else "copy", [r], {"to": dtype} if dtype != "i64" else None)


@handler("aten::arange", args="v v _ _ _ _", overload="start")
def arange_start(ctx: OpContext, start: Any, end: Any) -> NTensor:
    """aten::arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return arange(ctx, start, end, 1)


@handler("aten::arange", args="v _ _ _ _", overload="end")
def arange_end(ctx: OpContext, end: Any) -> NTensor:
    """aten::arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return arange(ctx, 0, end, 1)


# --- casts ------------------------------------------------------------------------------
@handler("aten::to", "aten::type_as", "aten::_to_copy", "aten::to_dtype", args="t *")
def to(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)  (every overload: the traced dtype decides)"""  # noqa: E501
    dtype = ctx.out_dtype()
    if x.dtype == dtype:
        return ctx.emit("copy", [x])
    if dtype == "bool" and x.dtype != "bool":  # torch: nonzero -> True
        zero = 0.0 if x.dtype in FLOAT_DTYPES else 0
        return ctx.emit("ne", [x, zero])
    if x.dtype in FLOAT_DTYPES and dtype in _WRAPPING_FROM_FLOAT:
        # torch truncates toward zero into a wide integer, then keeps the low bits
        # (-1.5 -> 65535 as uint16, 200.0 -> -56 as int8); tract's direct cast saturates,
        # its integer-to-integer cast wraps as torch's does.
        x = ctx.tmp("tract_core_cast", [x], {"to": "i64"}, dtype="i64", suffix="i64")
    return ctx.emit("tract_core_cast", [x], {"to": dtype})


# Integer dtypes a float reaches through i64 (torch wraps out-of-range values into them);
# i32/i64 are direct (torch's own conversion for those is the hardware's, as tract's).
_WRAPPING_FROM_FLOAT = frozenset({"u8", "u16", "u32", "u64", "i8", "i16"})


# --- grids, index tables and fills ------------------------------------------------------
# Tables whose values are fixed at export (eye, linspace, tril_indices...) are computed by
# torch itself and stored as variables, so they match torch exactly and stay plain NNEF;
# only an eye over a dynamic size is built in the graph.
def _numbers(ctx: OpContext, count: int, what: str) -> list[Number]:
    values = [ctx.arg(i, "n") for i in range(count)]
    if not all(isinstance(v, (int, float)) for v in values):
        raise ctx.unsupported(f"{what} with tensor bounds", "use Python numbers")
    return values


@handler("aten::eye", args="*")
def eye(ctx: OpContext) -> NTensor:
    """aten::eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (also eye(n))"""  # noqa: E501
    n = ctx.arg(0, "D")[0]
    m = ctx.arg(1, "D")[0] if ctx.n_inputs == 6 else n
    if not isinstance(n, DimExpr) and not isinstance(m, DimExpr):
        return ctx.constant(torch.eye(n, m, dtype=ctx.out_torch_dtype()))
    if unknown(n) or unknown(m):
        raise ctx.unsupported("eye of a size that depends on a dynamic axis in an unknown way")
    rows = ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="rows")
    cols = ctx.tmp("tract_core_range", [0, m, 1], dtype="i64", shape=(m,), suffix="cols")
    rows = ctx.tmp("unsqueeze", [rows], {"axes": [1]}, suffix="rowc")
    cols = ctx.tmp("unsqueeze", [cols], {"axes": [0]}, suffix="colr")
    if ctx.out_dtype() == "bool":
        return ctx.emit("eq", [rows, cols])
    return ctx.emit("tract_core_cast", [ctx.tmp("eq", [rows, cols], suffix="diag")], {"to": ctx.out_dtype()})


@handler("aten::linspace", args="*")
def linspace(ctx: OpContext) -> NTensor:
    """aten::linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    start, end = _numbers(ctx, 2, "linspace")
    return ctx.constant(torch.linspace(start, end, ctx.arg(2, "i"), dtype=ctx.out_torch_dtype()))


@handler("aten::logspace", args="*")
def logspace(ctx: OpContext) -> NTensor:
    """aten::logspace(Scalar start, Scalar end, int steps, float base=10., *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    start, end = _numbers(ctx, 2, "logspace")
    return ctx.constant(torch.logspace(start, end, ctx.arg(2, "i"), ctx.arg(3, "f"), dtype=ctx.out_torch_dtype()))


@handler("aten::tril_indices", "aten::triu_indices", args="i i i *")
def tril_indices(ctx: OpContext, row: int, col: int, offset: int) -> NTensor:
    """aten::tril_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (and triu_indices)"""  # noqa: E501
    fn = torch.tril_indices if ctx.kind == "aten::tril_indices" else torch.triu_indices
    return ctx.constant(fn(row, col, offset, dtype=ctx.out_torch_dtype()))


def _grid(ctx: OpContext, tensors: list[NTensor], indexing: str) -> tuple[list[NTensor], list[Size]]:
    """Each 1-D (or 0-d) tensor laid along its own axis of the grid, and the grid's shape."""
    if indexing not in ("ij", "xy"):
        raise ctx.unsupported(f"meshgrid indexing {indexing!r}", "use 'ij' or 'xy'")
    if any(t.rank > 1 for t in tensors):
        raise ctx.unsupported("meshgrid of tensors with more than one dim", "torch takes 0-d or 1-d tensors")
    k = len(tensors)
    place = list(range(k))
    if indexing == "xy" and k > 1:  # the first two inputs swap axes
        place[0], place[1] = 1, 0
    shape: list[Size] = [1] * k
    for t, p in zip(tensors, place):
        shape[p] = t.shape[0] if t.rank else 1
    if any(unknown(d) for d in shape):
        raise ctx.unsupported("meshgrid of a tensor whose dynamic length is unknown")
    lines = []
    for n, (t, p) in enumerate(zip(tensors, place)):
        axes = [a for a in range(k) if a != p] if t.rank else list(range(k - 1))
        lines.append(ctx.tmp("unsqueeze", [t], {"axes": axes}, suffix=f"line{n}") if axes else t)
    return lines, shape


@handler("aten::meshgrid", args="L s?")
def meshgrid(ctx: OpContext, tensors: list[NTensor], indexing: str | None) -> list[NTensor]:
    """aten::meshgrid.indexing(Tensor[] tensors, *, str indexing) -> Tensor[]  (also meshgrid(tensors): 'ij')"""
    lines, shape = _grid(ctx, tensors, indexing or "ij")
    out = []
    for k, line in enumerate(lines[:ctx.n_outputs]):
        if tuple(line.shape) == tuple(shape):
            out.append(ctx.emit("copy", [line], out=k, shape=shape))
        else:
            out.append(ctx.emit("tract_core_broadcast", [line], {"shape": shape}, out=k, shape=shape))
    return out


@handler("aten::cartesian_prod", args="L")
def cartesian_prod(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::cartesian_prod(Tensor[] tensors) -> Tensor"""
    if len(tensors) == 1:
        return ctx.emit("copy", tensors)
    lines, shape = _grid(ctx, tensors, "ij")
    size = volume(shape)
    columns = []
    for n, line in enumerate(lines):
        full = ctx.tmp("tract_core_broadcast", [line], {"shape": shape}, suffix=f"grid{n}")
        columns.append(ctx.tmp("reshape", [full], {"shape": [-1]}, dtype=full.dtype, shape=(size,), suffix=f"flat{n}"))
    return ctx.emit("stack", [columns], {"axis": 1})


@handler("aten::combinations", args="t i b")
def combinations(ctx: OpContext, x: NTensor, r: int, with_replacement: bool) -> NTensor:
    """aten::combinations(Tensor self, int r=2, bool with_replacement=False) -> Tensor"""
    if x.rank != 1:
        raise ctx.unsupported(f"combinations of a rank-{x.rank} tensor", "torch takes a 1-D tensor")
    ctx.static(x, what="combinations (the number of combinations)")
    table = torch.combinations(torch.arange(int(x.shape[0])), r, with_replacement)
    if table.numel() == 0 or table.dim() != 2:
        raise ctx.unsupported(f"combinations of {x.shape[0]} elements taken {r} at a time, which is empty")
    indices = ctx.constant(table, label=f"combinations_{x.shape[0]}_{r}_{with_replacement}")
    return ctx.emit("tract_core_gather", [x, indices], {"axis": 0})


@handler("aten::one_hot", args="t i")
def one_hot(ctx: OpContext, x: NTensor, num_classes: int) -> NTensor:
    """aten::one_hot(Tensor self, int num_classes=-1) -> Tensor"""
    if num_classes < 0:
        raise ctx.unsupported(
            "one_hot without num_classes: the class count is the largest value + 1, so it depends on the data",
            "pass num_classes",
        )
    classes = ctx.to_rank(ctx.constant(torch.arange(num_classes), label=f"classes_{num_classes}"), x.rank + 1)
    column = ctx.tmp("unsqueeze", [ctx.cast(x, "i64")], {"axes": [x.rank]}, suffix="col")
    hot = ctx.tmp("eq", [column, classes], suffix="hot")
    return ctx.emit("tract_core_cast", [hot], {"to": ctx.out_dtype()})


@handler("aten::fill", args="t x")
def fill(ctx: OpContext, x: NTensor, value: NTensor | Number) -> NTensor:
    """aten::fill.Scalar(Tensor self, Scalar value) -> Tensor  (also fill.Tensor, and fill_ through the in-place fallback)"""  # noqa: E501
    if not isinstance(value, NTensor):
        return _fill(ctx, value, x.shape, x)
    if value.rank != 0:
        raise ctx.unsupported("fill with a tensor value that is not 0-d", "torch requires a 0-d value")
    v = ctx.cast(value, ctx.out_dtype())
    if any(unknown(d) for d in x.shape):
        ref = ctx.tmp("tract_core_shape_of", [x], suffix="shape")
        return ctx.emit("tract_core_broadcast", [v], {"shape": ref}, shape=x.shape)
    return ctx.emit("tract_core_broadcast", [v], {"shape": list(x.shape)}, shape=x.shape)


@handler("aten::zero", args="t")
def zero(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::zero(Tensor self) -> Tensor  (and zero_ through the in-place fallback)"""
    return _fill(ctx, 0, x.shape, x)
