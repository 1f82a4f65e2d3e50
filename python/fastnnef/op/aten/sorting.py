"""Sorting: topk, sort, argsort, all as tract's ``tract_core_topk`` (values and indices,
sorted along one axis; ``largest`` picks the order).

A full sort is a top-k with k = the axis length; along a dynamic axis that k is a size
expression (``S``, ``2*S``), which tract computes at run time (``_topk_of_size``).
Mixture-of-experts routers pick each token's experts with ``topk`` over the (static)
experts axis, for any number of tokens.

Ties: tract's top-k keeps the lower index first among equal values, as torch's stable
sort does, so ``sort``/``argsort`` match torch's ``stable=True``; torch's default
(unstable) sort may order ties either way, so tests compare tie-free inputs.
"""

from __future__ import annotations

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _topk(ctx: OpContext, x: NTensor, k: Size, dim: int, largest: bool, outputs: tuple[int, ...]) -> list[NTensor]:
    """``tract_core_topk`` on ``x``; returns the node outputs listed in ``outputs`` (0:
    values, 1: indices)."""
    if x.rank == 0:
        raise ctx.unsupported("sorting a 0-d tensor", "unsqueeze it to 1-d first")
    axis = ctx.axis(dim, x.rank)
    shape = list(x.shape)
    shape[axis] = k
    if isinstance(k, DimExpr):
        return _topk_of_size(ctx, x, k, axis, largest, outputs, shape)
    attrs = {"k": k, "axis": axis, "largest": largest}
    if outputs == (0, 1):
        return list(ctx.emit_multi("tract_core_topk", [x], attrs, outs=[0, 1], shapes=[shape, shape]))
    pair = ctx.tmp_multi("tract_core_topk", [x], attrs, [("values", x.dtype, shape), ("indices", "i64", shape)])
    return [ctx.emit("copy", [pair[o]], out=i, shape=shape) for i, o in enumerate(outputs)]


def _topk_of_size(ctx: OpContext, x: NTensor, k: DimExpr, axis: int, largest: bool, outputs: tuple[int, ...],
                  shape: list[Size]) -> list[NTensor]:
    """A top-k whose k is a size of a dynamic axis (``S``, ``2*S``). tract 0.23.9's TopK
    reads a constant k without the run's symbol values ("undetermined symbol in
    expression"), so k is cast to an integer at run time (``tract_core_cast`` evaluates a
    size with them). tract then names the top-k's axis with a symbol of its own, unrelated
    to the inputs': each output is sliced to ``[0, k)``, the whole axis, which gives it
    back the size ``k`` for the ops after it (a reshape checks it)."""
    count = ctx.tmp("tract_core_cast", [k], {"to": "i64"}, dtype="i64", shape=(), suffix="k")
    attrs = {"k": count, "axis": axis, "largest": largest}
    pair = ctx.tmp_multi("tract_core_topk", [x], attrs, [("values", x.dtype, shape), ("indices", "i64", shape)])
    return [
        ctx.emit("slice", [pair[o]], {"axes": [axis], "begin": [0], "end": [k]}, out=i, shape=shape)
        for i, o in enumerate(outputs)
    ]


@handler("aten::topk", args="t D i b b")
def topk(ctx: OpContext, x: NTensor, k: list, dim: int, largest: bool, sorted_: bool) -> list[NTensor]:
    """aten::topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""  # noqa: E501
    # sorted=False lets torch return the k elements in any order: sorted is one of them.
    return _topk(ctx, x, k[0], dim, largest, (0, 1))


def _full_length(ctx: OpContext, x: NTensor, dim: int) -> Size:
    return x.shape[ctx.axis(dim, x.rank)] if x.rank else 1


@handler("aten::sort", args="t i b")
def sort(ctx: OpContext, x: NTensor, dim: int, descending: bool) -> list[NTensor]:
    """aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)  (and sort.stable)"""  # noqa: E501
    return _topk(ctx, x, _full_length(ctx, x, dim), dim, descending, (0, 1))


@handler("aten::sort", args="t b? i b", overload="stable")
def sort_stable(ctx: OpContext, x: NTensor, _stable: bool | None, dim: int, descending: bool) -> list[NTensor]:
    """aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""  # noqa: E501
    return sort(ctx, x, dim, descending)


@handler("aten::argsort", args="t i b")
def argsort(ctx: OpContext, x: NTensor, dim: int, descending: bool) -> NTensor:
    """aten::argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor  (and argsort.stable)"""
    (indices,) = _topk(ctx, x, _full_length(ctx, x, dim), dim, descending, (1,))
    return indices


@handler("aten::argsort", args="t b? i b", overload="stable")
def argsort_stable(ctx: OpContext, x: NTensor, _stable: bool | None, dim: int, descending: bool) -> NTensor:
    """aten::argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"""
    return argsort(ctx, x, dim, descending)
