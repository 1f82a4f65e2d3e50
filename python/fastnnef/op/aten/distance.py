"""Distances and similarities: dist, cdist, pdist, pairwise_distance, cosine_similarity.

Distances are p-norms of differences (op/aten/_math.py ``norm``), computed directly rather
than through the ``|a|^2 + |b|^2 - 2ab`` matmul torch may use for large p=2 cdists: that form
loses the small distances to cancellation.
"""

from __future__ import annotations

import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten import _math as m
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def pairwise(c: m.Calc, a: NTensor, b: NTensor, p: float, eps: float) -> NTensor:
    """torch.pairwise_distance: ``||a - b + eps||_p`` over the last axis (kept as size 1)."""
    rank = max(a.rank, b.rank)
    a, b = c.inputs(a, b, rank=rank)
    diff = c("sub", a, b)
    if eps:
        diff = c("add", diff, eps)
    return m.norm(c, diff, p, [rank - 1])


def cosine(c: m.Calc, a: NTensor, b: NTensor, axis: int, eps: float) -> NTensor:
    """torch.cosine_similarity along ``axis`` (kept as size 1): each operand divided by its
    2-norm clamped to ``eps``, then the products summed."""
    rank = max(a.rank, b.rank)
    a, b = c.inputs(a, b, rank=rank)
    axis = c.ctx.axis(axis, rank)

    def unit(t: NTensor) -> NTensor:
        return c("div", t, c("max", m.norm(c, t, 2, [axis]), eps))

    return c("sum_reduce", c("mul", unit(a), unit(b)), axes=[axis])


@handler("aten::pairwise_distance", args="t t f f b")
def pairwise_distance(ctx: OpContext, a: NTensor, b: NTensor, p: float, eps: float, keepdim: bool) -> NTensor:
    """aten::pairwise_distance(Tensor x1, Tensor x2, float p=2, float eps=1e-06, bool keepdim=False) -> Tensor"""
    c = m.Calc(ctx, m.float_compute(ctx))
    r = pairwise(c, a, b, p, eps)
    if keepdim:
        return c.result(r)
    return c.out("squeeze", r, axes=[r.rank - 1])


@handler("aten::cosine_similarity", args="t t i f")
def cosine_similarity(ctx: OpContext, a: NTensor, b: NTensor, dim: int, eps: float) -> NTensor:
    """aten::cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor"""
    c = m.Calc(ctx, m.float_compute(ctx))
    r = cosine(c, a, b, dim, eps)
    return c.out("squeeze", r, axes=[ctx.axis(dim, r.rank)])


@handler("aten::dist", args="t t f")
def dist(ctx: OpContext, a: NTensor, b: NTensor, p: float) -> NTensor:
    """aten::dist(Tensor self, Tensor other, Scalar p=2) -> Tensor  (the p-norm of a - b, all axes)"""
    c = m.Calc(ctx, m.float_compute(ctx))
    rank = max(a.rank, b.rank)
    a, b = c.inputs(a, b, rank=rank)
    r = m.norm(c, c("sub", a, b), p, list(range(rank)))
    return c.out("squeeze", r, axes=list(range(rank))) if rank else c.result(r)


@handler("aten::cdist", args="t t f i?")
def cdist(ctx: OpContext, x1: NTensor, x2: NTensor, p: float, _compute_mode: int | None) -> NTensor:
    """aten::cdist(Tensor x1, Tensor x2, float p=2, int? compute_mode=None) -> Tensor  ([*, P, M] x [*, R, M] -> [*, P, R])"""  # noqa: E501
    c = m.Calc(ctx, m.float_compute(ctx))
    rank = max(x1.rank, x2.rank)
    x1, x2 = c.inputs(x1, x2, rank=rank)
    rows = c("unsqueeze", x1, axes=[rank - 1])  # [*, P, 1, M]
    cols = c("unsqueeze", x2, axes=[rank - 2])  # [*, 1, R, M]
    r = m.norm(c, c("sub", rows, cols), p, [rank])
    return c.out("squeeze", r, axes=[rank])


@handler("aten::pdist", args="t f")
def pdist(ctx: OpContext, x: NTensor, p: float) -> NTensor:
    """aten::pdist(Tensor self, float p=2) -> Tensor  (the distances of rows i < j of an [N, M]
    input, in row-major order; N must be static: the pairs are listed at export time)"""
    ctx.static(x, [0], "pdist")
    if int(x.shape[0]) < 2:
        raise ctx.unsupported("pdist of fewer than two rows", "the result would be empty")
    c = m.Calc(ctx, m.float_compute(ctx))
    x = ctx.cast(x, c.dtype)
    first, second = torch.triu_indices(int(x.shape[0]), int(x.shape[0]), offset=1)
    rows = [c("tract_core_gather", x, ctx.constant(idx), axis=0) for idx in (first, second)]
    r = m.norm(c, c("sub", *rows), p, [1])
    return c.out("squeeze", r, axes=[1])
