"""Diagonals: diagonal (and linalg_diagonal, diagonal_copy), trace, diag, diag_embed,
diagflat, diagonal_scatter.

A diagonal is read as a strided slice of the two axes flattened into one (step m+1 over
an [n, m] plane), and written with a select against a constant [n, m] mask, so the plane
must be static while any other axis may be dynamic.
"""

from __future__ import annotations

import torch

from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _length(n: int, m: int, offset: int) -> int:
    """Length of the ``offset`` diagonal of an [n, m] plane."""
    return max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))


def _to_end(ctx: OpContext, x: NTensor, a: int, b: int) -> tuple[NTensor, list[int]]:
    """``x`` with axes ``a``, ``b`` moved last (the other axes keep their order)."""
    perm = [d for d in range(x.rank) if d not in (a, b)] + [a, b]
    if perm == list(range(x.rank)):
        return x, perm
    return ctx.tmp("transpose", [x], {"axes": perm}, suffix="plane"), perm


def _plane(ctx: OpContext, x: NTensor, dim1: int, dim2: int, what: str) -> tuple[int, int, int, int]:
    """The two axes of the diagonal's plane and their (static) sizes."""
    a, b = ctx.axis(dim1, x.rank), ctx.axis(dim2, x.rank)
    if a == b:
        raise ctx.unsupported(f"{what} over the same dim twice ({dim1}, {dim2})", "torch needs two distinct dims")
    ctx.static(x, [a, b], what)
    return a, b, int(x.shape[a]), int(x.shape[b])


def _diagonal(ctx: OpContext, x: NTensor, offset: int, dim1: int, dim2: int, final: bool) -> NTensor:
    """The diagonal over dims ``dim1``, ``dim2``, as the last axis of the result: the plane
    flattened from the first diagonal cell on, cut (or zero-padded) to L rows of m+1
    cells, whose first column is the diagonal. (A strided slice would be shorter, but
    tract 0.23.9's declutter fails pulling it over the reshape: "Invalid axis".)"""
    if x.rank < 2:
        raise ctx.unsupported(f"a diagonal of a rank-{x.rank} tensor", "torch needs at least 2 dims")
    a, b, n, m = _plane(ctx, x, dim1, dim2, "diagonal")
    length = _length(n, m, offset)
    if not length:
        raise ctx.unsupported(f"the diagonal at offset {offset} of a {n}x{m} plane, which is empty")
    xt, _ = _to_end(ctx, x, a, b)
    lead, axis = xt.shape[:-2], x.rank - 2
    flat = ctx.tmp("reshape", [xt], {"shape": [n * m], "axis_start": axis, "axis_count": 2},
                   dtype=x.dtype, shape=lead + (n * m,), suffix="flat")
    start = offset if offset >= 0 else -offset * m
    stop = start + length * (m + 1)
    cut = ctx.tmp("slice", [flat], {"axes": [axis], "begin": [start], "end": [min(stop, n * m)]}, suffix="cut")
    if stop > n * m:
        cut = ctx.tmp("pad", [cut], {"padding": [Tuple((0, 0))] * axis + [Tuple((0, stop - n * m))],
                                     "border": "constant", "value": 0.0},
                      dtype=x.dtype, shape=lead + (length * (m + 1),), suffix="fill")
    rows = ctx.tmp("reshape", [cut], {"shape": [length, m + 1], "axis_start": axis, "axis_count": 1},
                   dtype=x.dtype, shape=lead + (length, m + 1), suffix="rows")
    first = ctx.tmp("slice", [rows], {"axes": [axis + 1], "begin": [0], "end": [1]}, suffix="first")
    if final:
        return ctx.emit("squeeze", [first], {"axes": [axis + 1]})
    return ctx.tmp("squeeze", [first], {"axes": [axis + 1]}, suffix="diag")


@handler("aten::diagonal", "aten::diagonal_copy", args="t i i i")
def diagonal(ctx: OpContext, x: NTensor, offset: int, dim1: int, dim2: int) -> NTensor:
    """aten::diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)  (and diagonal_copy)"""
    return _diagonal(ctx, x, offset, dim1, dim2, True)


@handler("aten::linalg_diagonal", args="t i i i")
def linalg_diagonal(ctx: OpContext, x: NTensor, offset: int, dim1: int, dim2: int) -> NTensor:
    """aten::linalg_diagonal(Tensor(a) A, *, int offset=0, int dim1=-2, int dim2=-1) -> Tensor(a)"""
    return _diagonal(ctx, x, offset, dim1, dim2, True)


@handler("aten::trace", args="t")
def trace(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::trace(Tensor self) -> Tensor"""
    if x.rank != 2:
        raise ctx.unsupported(f"trace of a rank-{x.rank} tensor", "torch takes a matrix")
    d = _diagonal(ctx, ctx.cast(x, ctx.out_dtype()), 0, 0, 1, False)
    total = ctx.tmp("sum_reduce", [d], {"axes": [0]}, suffix="sum")
    return ctx.emit("squeeze", [total], {"axes": [0]})


def _embed(ctx: OpContext, v: NTensor, n: int, m: int, offset: int, base: NTensor | None, final: bool) -> NTensor:
    """An [..., n, m] plane holding ``v`` ([..., L]) on its ``offset`` diagonal and ``base``
    (zeros when None) elsewhere: ``v`` is laid along the rows (offset >= 0) or the columns,
    and a constant mask picks the diagonal."""
    along = n if offset >= 0 else m
    length = int(v.shape[-1])
    if length < along:  # the padded cells are never picked
        pads = [Tuple((0, 0))] * (v.rank - 1) + [Tuple((0, along - length))]
        v = ctx.tmp("pad", [v], {"padding": pads, "border": "constant", "value": 0.0},
                    dtype=v.dtype, shape=v.shape[:-1] + (along,), suffix="pad")
    v = ctx.tmp("unsqueeze", [v], {"axes": [v.rank if offset >= 0 else v.rank - 1]}, suffix="line")
    mask = torch.zeros(n, m, dtype=torch.bool)
    mask.diagonal(offset).fill_(True)
    picked = ctx.to_rank(ctx.constant(mask, label=f"diagonal_mask_{n}x{m}_{offset}".replace("-", "m")), v.rank)
    other = base if base is not None else typed_scalar(ctx, 0, v.dtype)
    if final:
        return ctx.emit("select", [picked, v, other])
    return ctx.tmp("select", [picked, v, other], suffix="embed")


def _diag_embed(ctx: OpContext, v: NTensor, offset: int, dim1: int, dim2: int) -> NTensor:
    """torch.diag_embed: the last axis of ``v`` becomes the diagonal of a new plane put at
    output dims ``dim1``, ``dim2``."""
    ctx.static(v, [v.rank - 1], "diag_embed")
    v = ctx.cast(v, ctx.out_dtype())
    size = int(v.shape[-1]) + abs(offset)
    rank = v.rank + 1
    a, b = ctx.axis(dim1, rank), ctx.axis(dim2, rank)
    if a == b:
        raise ctx.unsupported(f"diag_embed over the same dim twice ({dim1}, {dim2})")
    perm: list[int | None] = [None] * rank
    perm[a], perm[b] = rank - 2, rank - 1
    lead = iter(range(rank - 2))
    axes = [p if p is not None else next(lead) for p in perm]
    if axes == list(range(rank)):
        return _embed(ctx, v, size, size, offset, None, True)
    plane = _embed(ctx, v, size, size, offset, None, False)
    return ctx.emit("transpose", [plane], {"axes": axes})


@handler("aten::diag_embed", args="t i i i")
def diag_embed(ctx: OpContext, x: NTensor, offset: int, dim1: int, dim2: int) -> NTensor:
    """aten::diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor"""
    if x.rank < 1:
        raise ctx.unsupported("diag_embed of a 0-d tensor")
    return _diag_embed(ctx, x, offset, dim1, dim2)


@handler("aten::diag", args="t i")
def diag(ctx: OpContext, x: NTensor, offset: int) -> NTensor:
    """aten::diag(Tensor self, int diagonal=0) -> Tensor"""
    if x.rank == 1:
        return _diag_embed(ctx, x, offset, 0, 1)
    if x.rank == 2:
        return _diagonal(ctx, x, offset, 0, 1, True)
    raise ctx.unsupported(f"diag of a rank-{x.rank} tensor", "torch takes a vector or a matrix")


@handler("aten::diagflat", args="t i")
def diagflat(ctx: OpContext, x: NTensor, offset: int) -> NTensor:
    """aten::diagflat(Tensor self, int offset=0) -> Tensor"""
    ctx.static(x, what="diagflat")
    if x.rank != 1:
        size = 1
        for d in x.shape:
            size *= int(d)
        x = ctx.tmp("reshape", [x], {"shape": [size]}, dtype=x.dtype, shape=(size,), suffix="flat")
    return _diag_embed(ctx, x, offset, 0, 1)


@handler("aten::diagonal_scatter", args="t t i i i")
def diagonal_scatter(ctx: OpContext, x: NTensor, src: NTensor, offset: int, dim1: int, dim2: int) -> NTensor:
    """aten::diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    a, b, n, m = _plane(ctx, x, dim1, dim2, "diagonal_scatter")
    if _length(n, m, offset) == 0:
        return ctx.emit("copy", [x])
    xt, perm = _to_end(ctx, x, a, b)
    v = ctx.cast(src, x.dtype)
    if xt is x:
        return _embed(ctx, v, n, m, offset, xt, True)
    plane = _embed(ctx, v, n, m, offset, xt, False)
    return ctx.emit("transpose", [plane], {"axes": [perm.index(d) for d in range(x.rank)]})
