"""Sorting: topk, sort, argsort, all as tract's ``tract_core_topk`` (values and indices,
sorted along one axis; ``largest`` picks the order).

A full sort is a top-k with k = the axis length, so it needs a static axis (tract's
top-k cannot take a symbolic k). Mixture-of-experts routers pick each token's experts
with ``topk`` over the (static) experts axis, for any number of tokens.

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
    if isinstance(k, DimExpr):
        # tract 0.23.9's TopK keeps a symbolic k unevaluated at run time ("undetermined
        # symbol in expression"), even when read from the input's shape.
        raise ctx.unsupported(
            f"k = {k} depends on a dynamic axis (a sort along a dynamic axis is a top-k of its length); "
            "tract's top-k needs a constant k",
            "sort along a static axis, or export with that axis static",
        )
    shape = list(x.shape)
    shape[axis] = k
    attrs = {"k": k, "axis": axis, "largest": largest}
    if outputs == (0, 1):
        return list(ctx.emit_multi("tract_core_topk", [x], attrs, outs=[0, 1], shapes=[shape, shape]))
    pair = ctx.tmp_multi("tract_core_topk", [x], attrs, [("values", x.dtype, shape), ("indices", "i64", shape)])
    return [ctx.emit("copy", [pair[o]], out=i, shape=shape) for i, o in enumerate(outputs)]


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
