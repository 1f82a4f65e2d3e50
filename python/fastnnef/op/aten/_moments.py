"""Mean and variance statistics shared by norm.py and transformer.py (its fused layer
norms): stdlib reductions that keep the reduced axes as size 1."""

from __future__ import annotations

from fastnnef.nnef.graph import NTensor
from fastnnef.op.context import OpContext


def statistics(ctx: OpContext, x: NTensor, axes: list[int], eps: float) -> tuple[NTensor, NTensor, NTensor]:
    """``(mean, x - mean, 1 / sqrt(var + eps))``: biased variance over ``axes`` (kept as
    size-1 axes), two passes."""
    mean = ctx.tmp("mean_reduce", [x], {"axes": axes}, suffix="mean")
    centered = ctx.tmp("sub", [x, mean], suffix="centered")
    var = ctx.tmp("mean_reduce", [ctx.tmp("sqr", [centered], suffix="sq")], {"axes": axes}, suffix="var")
    inv = ctx.tmp("rsqrt", [ctx.tmp("add", [var, float(eps)], suffix="var_eps")], suffix="inv_std")
    return mean, centered, inv


def normalize(ctx: OpContext, x: NTensor, axes: list[int], eps: float) -> tuple[NTensor, NTensor]:
    """``(x - mean, 1 / sqrt(var + eps))`` over ``axes``."""
    return statistics(ctx, x, axes, eps)[1:]
