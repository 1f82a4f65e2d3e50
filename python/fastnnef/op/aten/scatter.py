"""Scatters into a copy of ``self``: scatter_add, scatter_reduce (and the legacy
``scatter(..., reduce=)``), index_add, index_copy, index_reduce, select_scatter, slice_scatter.

Reductions (sum, prod, mean, amax, amin, with or without ``self``) use tract's
``tract_core_scatter_elements`` reductions from tract 0.23.0 (the ``scatter_reductions``
gate). Older tract versions and strict NNEF get the same result from a one-hot mask of the
index along a new axis, reduced over the index axis (memory grows with index x axis size).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fastnnef.dim import Size
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import is_static, plus, unknown
from fastnnef.op.aten._common import torch_dtype, typed_scalar
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

# torch reduce name -> (tract scatter reduction, NNEF reduction over the one-hot axis).
_REDUCTIONS = {
    "sum": ("add", "sum_reduce"),
    "prod": ("mul", "tract_core_product_reduce"),
    "mean": ("add", "sum_reduce"),
    "amax": ("max", "max_reduce"),
    "amin": ("min", "min_reduce"),
}


def _identity(reduce: str, dtype: str) -> int | float:
    """The value a reduction starts from (what an untouched cell contributes)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype in FLOAT_DTYPES:
        return -math.inf if reduce == "amax" else math.inf
    info = torch.iinfo(torch_dtype(dtype))
    return info.min if reduce == "amax" else info.max


def _reduction(ctx: OpContext, reduce: str) -> str:
    if reduce not in _REDUCTIONS:
        raise ctx.unsupported(f"scatter reduction {reduce!r}", f"use one of {sorted(_REDUCTIONS)}")
    return reduce


def _like(ctx: OpContext, value: NTensor | int | float, like: NTensor, dtype: str, suffix: str) -> NTensor:
    """``value`` broadcast to ``like``'s shape (read at run time where it is dynamic)."""
    v = value if isinstance(value, NTensor) else typed_scalar(ctx, value, dtype)
    if isinstance(v, NTensor) and tuple(v.shape) == tuple(like.shape):
        return v
    shape: Any = list(like.shape)
    if any(unknown(d) for d in like.shape):
        shape = ctx.tmp("tract_core_shape_of", [like], suffix=f"{suffix}_shape")
    return ctx.tmp("tract_core_broadcast", [v], {"shape": shape}, dtype=dtype, shape=like.shape, suffix=suffix)


def _floor_div(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """``a / b`` with torch's scatter mean rounding (floor for integers)."""
    if a.dtype in FLOAT_DTYPES:
        return ctx.tmp("div", [a, b], suffix="mean")
    q = ctx.tmp("div", [ctx.cast(a, "f32"), ctx.cast(b, "f32")], suffix="q")
    return ctx.tmp("tract_core_cast", [ctx.tmp("floor", [q], suffix="floor")], {"to": a.dtype}, suffix="mean")


def _native(ctx: OpContext, x: NTensor, axis: int, idx: NTensor, src: NTensor, reduce: str,
            include_self: bool) -> NTensor:
    """tract_core_scatter_elements with reductions (tract >= 0.23.0); ``idx`` has ``src``'s shape."""
    dtype = x.dtype
    op, _ = _REDUCTIONS[reduce]
    attrs = {"axis": axis}
    base = x
    if not include_self:  # the touched cells start from the reduction's identity
        base = ctx.tmp("tract_core_scatter_elements", [x, idx, _like(ctx, _identity(reduce, dtype), idx, dtype, "id")],
                       attrs, suffix="reset")
    out = ctx.tmp("tract_core_scatter_elements", [base, idx, src], {**attrs, "reduction": op}, suffix="red")
    if reduce != "mean":
        return out
    # mean = sum / count, the count starting at 1 where self takes part (or is untouched).
    ones = _like(ctx, 1, x, dtype, "ones")
    counts = ones
    if not include_self:
        counts = ctx.tmp("tract_core_scatter_elements", [ones, idx, _like(ctx, 0, idx, dtype, "zeros")], attrs,
                         suffix="cnt0")
    counts = ctx.tmp("tract_core_scatter_elements", [counts, idx, _like(ctx, 1, idx, dtype, "hits")],
                     {**attrs, "reduction": "add"}, suffix="cnt")
    return _floor_div(ctx, out, counts)


def _by_mask(ctx: OpContext, x: NTensor, axis: int, idx: NTensor, src: NTensor, reduce: str,
             include_self: bool) -> NTensor:
    """The same scatter as a one-hot mask of ``idx`` along a new axis after ``axis``,
    reduced over ``axis`` (any tract version; ``idx`` broadcasts to ``src``)."""
    for d in range(x.rank):
        if d != axis and src.shape[d] != x.shape[d]:
            raise ctx.unsupported(
                "a scatter reduction whose index is smaller than self along another axis",
                f"export for tract >= {VERSION_GATES['scatter_reductions'].first.to_str()} (native scatter reductions)",
            )
    n = x.shape[axis]
    dtype = x.dtype
    view = [1] * (x.rank + 1)
    view[axis + 1] = -1
    if is_static(n):
        positions = ctx.constant(torch.arange(int(n)).view(view), label=f"positions_{n}_{axis + 1}_{x.rank + 1}")
    else:
        rng = ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="pos")
        positions = ctx.tmp("unsqueeze", [rng], {"axes": [a for a in range(x.rank + 1) if a != axis + 1]},
                            suffix="posv")
    hits = ctx.tmp("eq", [ctx.tmp("unsqueeze", [ctx.cast(idx, "i64")], {"axes": [axis + 1]}, suffix="idxv"), positions],
                   suffix="hits")  # [..., k, n, ...]
    _, nnef_reduce = _REDUCTIONS[reduce]
    values = ctx.tmp("unsqueeze", [src], {"axes": [axis + 1]}, suffix="srcv")
    picked = ctx.tmp("select", [hits, values, typed_scalar(ctx, _identity(reduce, dtype), dtype)], suffix="picked")
    red = ctx.tmp("squeeze", [ctx.tmp(nnef_reduce, [picked], {"axes": [axis]}, suffix="red")], {"axes": [axis]},
                  suffix="reduced")
    if reduce == "mean" or not include_self:
        touched = ctx.tmp("squeeze", [ctx.tmp("any_reduce", [hits], {"axes": [axis]}, suffix="any")], {"axes": [axis]},
                          suffix="touched")
    if reduce == "mean":
        ones = ctx.tmp("select", [hits, typed_scalar(ctx, 1, dtype), typed_scalar(ctx, 0, dtype)], dtype=dtype,
                       shape=hits.shape, suffix="one")
        count = ctx.tmp("squeeze", [ctx.tmp("sum_reduce", [ones], {"axes": [axis]}, suffix="cnt")], {"axes": [axis]},
                        suffix="count")
        if include_self:
            total = ctx.tmp("add", [x, red], suffix="total")
            return _floor_div(ctx, total, ctx.tmp("add", [count, typed_scalar(ctx, 1, dtype)], suffix="count1"))
        safe = ctx.tmp("select", [touched, count, typed_scalar(ctx, 1, dtype)], suffix="safe")
        return ctx.tmp("select", [touched, _floor_div(ctx, red, safe), x], suffix="merged")
    if not include_self:
        return ctx.tmp("select", [touched, red, x], suffix="merged")
    combine = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[reduce]
    return ctx.tmp(combine, [x, red], suffix="merged")


def _scatter(ctx: OpContext, x: NTensor, axis: int, idx: NTensor, src: NTensor, reduce: str, include_self: bool,
             native: bool) -> NTensor:
    """The node output: ``x`` with ``src`` reduced into it at ``idx`` along ``axis``."""
    dtype = ctx.out_dtype()
    x, src = ctx.cast(x, dtype), ctx.cast(src, dtype)
    if native:
        if tuple(idx.shape) != tuple(src.shape):
            idx = _like(ctx, idx, src, idx.dtype, "index")
        out = _native(ctx, x, axis, idx, src, reduce, include_self)
    else:
        out = _by_mask(ctx, x, axis, idx, src, reduce, include_self)
    return ctx.emit("copy", [out], shape=x.shape)


def _src_as_index(ctx: OpContext, src: NTensor, index: NTensor) -> NTensor:
    """scatter_* read only the first index.shape cells of src."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    ctx.static(src, what="a scatter whose src is larger than its index")
    return ctx.tmp("slice", [src], {"axes": list(range(src.rank)), "begin": [0] * src.rank,
                                    "end": list(index.shape)}, suffix="src")


def _along(ctx: OpContext, index: NTensor, axis: int, rank: int) -> NTensor:
    """index_* ops' 1-D index as a rank-``rank`` tensor along ``axis`` (broadcastable)."""
    if index.rank == 0:
        index = ctx.tmp("unsqueeze", [index], {"axes": [0]}, suffix="idx1")
    axes = [a for a in range(rank) if a != axis]
    return ctx.tmp("unsqueeze", [index], {"axes": axes}, suffix="idxv") if axes else index


def _scatter_reduce(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor, reduce: str,
                    include_self: bool | None, native: bool) -> NTensor:
    axis = ctx.axis(dim, x.rank)
    return _scatter(ctx, x, axis, index, _src_as_index(ctx, src, index), _reduction(ctx, reduce),
                    True if include_self is None else include_self, native)


# The legacy reductions of aten::scatter(..., reduce=) -> their scatter_reduce names.
_LEGACY = {"add": "sum", "multiply": "prod"}


def legacy_scatter(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor | int | float | bool,
                   reduce: str) -> NTensor:
    """aten::scatter.reduce / .value_reduce: ``src`` (or the number) accumulated into self
    at ``index``, as scatter_reduce with include_self (the native reductions where the
    target has them, else the one-hot form)."""
    if reduce not in _LEGACY:
        raise ctx.unsupported(f"scatter with reduce={reduce!r}", f"torch takes one of {sorted(_LEGACY)}")
    if not isinstance(src, NTensor):
        src = _like(ctx, src, index, ctx.out_dtype(), "src")
    return _scatter_reduce(ctx, x, dim, index, src, _LEGACY[reduce], True, ctx.caps.supports("scatter_reductions"))


def _index_reduce(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor, reduce: str,
                  include_self: bool, native: bool) -> NTensor:
    if x.rank == 0:
        raise ctx.unsupported("index_add/index_reduce into a 0-d tensor")
    axis = ctx.axis(dim, x.rank)
    return _scatter(ctx, x, axis, _along(ctx, index, axis, x.rank), ctx.to_rank(source, x.rank),
                    _reduction(ctx, reduce), include_self, native)


def _scaled(ctx: OpContext, source: NTensor, alpha: int | float) -> NTensor:
    if alpha == 1:
        return source
    dtype = ctx.out_dtype()
    return ctx.tmp("mul", [ctx.cast(source, dtype), typed_scalar(ctx, alpha, dtype)], suffix="alpha")


# Each reduction has a native handler (tract >= 0.23.0) and a masked one for older targets;
# the registry picks the newest one the target allows.
@handler("aten::scatter_add", args="t i t t", since="scatter_reductions")
def scatter_add(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor) -> NTensor:
    """aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter_reduce(ctx, x, dim, index, src, "sum", True, True)


@handler("aten::scatter_add", args="t i t t")
def scatter_add_masked(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor) -> NTensor:
    """aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor  (one-hot form, tract < 0.23.0)"""
    return _scatter_reduce(ctx, x, dim, index, src, "sum", True, False)


@handler("aten::scatter_reduce", args="t i t t s b", since="scatter_reductions")
def scatter_reduce(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor, reduce: str,
                   include_self: bool) -> NTensor:
    """aten::scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""  # noqa: E501
    return _scatter_reduce(ctx, x, dim, index, src, reduce, include_self, True)


@handler("aten::scatter_reduce", args="t i t t s b")
def scatter_reduce_masked(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: NTensor, reduce: str,
                          include_self: bool) -> NTensor:
    """aten::scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor  (one-hot form, tract < 0.23.0)"""  # noqa: E501
    return _scatter_reduce(ctx, x, dim, index, src, reduce, include_self, False)


@handler("aten::index_add", args="t i t t x", since="scatter_reductions")
def index_add(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor, alpha: int | float) -> NTensor:
    """aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"""
    return _index_reduce(ctx, x, dim, index, _scaled(ctx, source, alpha), "sum", True, True)


@handler("aten::index_add", args="t i t t x")
def index_add_masked(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor,
                     alpha: int | float) -> NTensor:
    """aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor  (one-hot form, tract < 0.23.0)"""  # noqa: E501
    return _index_reduce(ctx, x, dim, index, _scaled(ctx, source, alpha), "sum", True, False)


@handler("aten::index_reduce", args="t i t t s b", since="scatter_reductions")
def index_reduce(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor, reduce: str,
                 include_self: bool) -> NTensor:
    """aten::index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor"""  # noqa: E501
    return _index_reduce(ctx, x, dim, index, source, reduce, include_self, True)


@handler("aten::index_reduce", args="t i t t s b")
def index_reduce_masked(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor, reduce: str,
                        include_self: bool) -> NTensor:
    """aten::index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor  (one-hot form, tract < 0.23.0)"""  # noqa: E501
    return _index_reduce(ctx, x, dim, index, source, reduce, include_self, False)


@handler("aten::index_copy", args="t i t t")
def index_copy(ctx: OpContext, x: NTensor, dim: int, index: NTensor, source: NTensor) -> NTensor:
    """aten::index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor"""
    if x.rank == 0:
        raise ctx.unsupported("index_copy into a 0-d tensor")
    axis = ctx.axis(dim, x.rank)
    dtype = ctx.out_dtype()
    source = ctx.cast(ctx.to_rank(source, x.rank), dtype)
    idx = _like(ctx, _along(ctx, index, axis, x.rank), source, index.dtype, "index")
    return ctx.emit("tract_core_scatter_elements", [ctx.cast(x, dtype), idx, source], {"axis": axis})


# --- writes of a slice ------------------------------------------------------------------
def _part(ctx: OpContext, x: NTensor, axis: int, begin: Size, end: Size, suffix: str) -> NTensor | None:
    """``x[begin:end]`` along ``axis``, or None when empty."""
    if begin == end:
        return None
    if begin == 0 and end == x.shape[axis]:
        return x
    return ctx.tmp("slice", [x], {"axes": [axis], "begin": [begin], "end": [end]}, suffix=suffix)


def _splice(ctx: OpContext, x: NTensor, axis: int, begin: Size, end: Size, middle: NTensor) -> NTensor:
    """``x`` with ``[begin:end)`` along ``axis`` replaced by ``middle`` (one concat)."""
    parts = [p for p in (_part(ctx, x, axis, 0, begin, "head"), middle,
                         _part(ctx, x, axis, end, x.shape[axis], "tail")) if p is not None]
    if len(parts) == 1:
        return ctx.emit("copy", parts, shape=x.shape)
    return ctx.emit("concat", [parts], {"axis": axis}, shape=x.shape)


def _position(ctx: OpContext, v: Size | None, n: Size, default: Size, what: str) -> Size:
    """A begin/end/index made non-negative and clamped as torch does."""
    if v is None or (is_static(v) and int(v) >= 2**62):
        return default
    if not is_static(v):
        return v
    v = int(v)
    if is_static(n):
        return min(max(v + int(n) if v < 0 else v, 0), int(n))
    if v >= 0:
        return v
    if unknown(n):
        raise ctx.unsupported(f"a negative {what} on a dynamic axis of unknown size")
    return plus(n, v)


@handler("aten::select_scatter", args="t t i D")
def select_scatter(ctx: OpContext, x: NTensor, src: NTensor, dim: int, index: list[Size]) -> NTensor:
    """aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    n = x.shape[axis]
    i = index[0]
    if is_static(i) and is_static(n) and not -int(n) <= int(i) < int(n):
        raise ctx.unsupported(f"select_scatter index {i} out of range for size {n}")
    begin = _position(ctx, i, n, 0, "index")
    row = ctx.tmp("unsqueeze", [ctx.cast(src, x.dtype)], {"axes": [axis]}, suffix="row")
    return _splice(ctx, x, axis, begin, plus(begin, 1), row)


@handler("aten::slice_scatter", args="t t i D? D? i")
def slice_scatter(ctx: OpContext, x: NTensor, src: NTensor, dim: int, start: list[Size] | None,
                  end: list[Size] | None, step: int) -> NTensor:
    """aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""  # noqa: E501
    axis = ctx.axis(dim, x.rank)
    n = x.shape[axis]
    b = _position(ctx, start[0] if start else None, n, 0, "start")
    e = _position(ctx, end[0] if end else None, n, n, "end")
    if is_static(b) and is_static(e) and int(e) < int(b):
        e = b  # an empty slice (x[:, 3:1]) writes nothing: the tail starts where the head ends
    src = ctx.to_rank(ctx.cast(src, x.dtype), x.rank)
    if step == 1:
        return _splice(ctx, x, axis, b, e, src)
    if step < 1:
        raise ctx.unsupported(f"slice_scatter step {step}", "torch only allows positive steps")
    ctx.static(x, [axis], "slice_scatter with a step")
    if not (is_static(b) and is_static(e)):
        raise ctx.unsupported("slice_scatter with a step and bounds that depend on a dynamic axis")
    # Every cell p of the axis reads src[(p - b) // step] where the slice writes it.
    cells = torch.arange(int(n))
    written = (cells >= int(b)) & (cells < int(e)) & ((cells - int(b)) % step == 0)
    count = max(1, int(src.shape[axis]))
    where = torch.clamp((cells - int(b)) // step, 0, count - 1)
    view = [1] * x.rank
    view[axis] = -1
    spread = ctx.tmp("tract_core_gather", [src, ctx.constant(where)], {"axis": axis}, suffix="spread")
    return ctx.emit("select", [ctx.constant(written.view(view)), spread, x])
