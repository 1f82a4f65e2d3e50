"""Linear algebra: linear, matmul/mm/bmm, addmm/baddbmm, einsum."""

from __future__ import annotations

from typing import Optional

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import operands
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _matmul(ctx: OpContext, a: NTensor, b: NTensor, transpose_b: bool = False, final: bool = True) -> NTensor:
    """torch.matmul semantics (1-D promotion, leading batch broadcast) on NNEF matmul."""
    dtype = ctx.out_dtype()
    a, b = ctx.cast(a, dtype), ctx.cast(b, dtype)
    squeeze: list[int] = []
    if a.rank == 1:
        a = ctx.tmp("unsqueeze", [a], {"axes": [0]}, dtype=dtype, shape=(1,) + a.shape, suffix="a2d")
        squeeze.append(-2)
    if b.rank == 1:
        b = ctx.tmp("unsqueeze", [b], {"axes": [1]}, dtype=dtype, shape=b.shape + (1,), suffix="b2d")
        squeeze.append(-1)
    rank = max(a.rank, b.rank)
    a, b = ctx.to_rank(a, rank), ctx.to_rank(b, rank)
    attrs = {"transposeA": False, "transposeB": transpose_b}
    if not squeeze and final:
        return ctx.emit("matmul", [a, b], attrs)
    n = b.shape[-2] if transpose_b else b.shape[-1]
    full = tuple(ctx.out_shape())
    if squeeze:
        full = (a.shape[:-1] if a.rank else ()) + (n,)
    out = ctx.tmp("matmul", [a, b], attrs, dtype=dtype, shape=full, suffix="mm")
    if not squeeze:
        return out
    axes = sorted(ax % rank for ax in squeeze)
    return ctx.emit("squeeze", [out], {"axes": axes})


@handler("aten::matmul", "aten::mm", "aten::bmm", args="t t")
def matmul(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::matmul(Tensor self, Tensor other) -> Tensor"""
    return _matmul(ctx, a, b)


@handler("aten::linear", args="t t t?")
def linear(ctx: OpContext, x: NTensor, weight: NTensor, bias: Optional[NTensor]) -> NTensor:
    """aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if bias is None:
        return _matmul(ctx, x, weight, transpose_b=True)
    y = _matmul(ctx, x, weight, transpose_b=True, final=False)
    (b,) = operands(ctx, [bias], ctx.out_dtype(), y.rank)
    return ctx.emit("add", [y, b])


@handler("aten::addmm", "aten::baddbmm", "aten::addbmm", args="t t t f? f?")
def addmm(ctx: OpContext, bias: NTensor, a: NTensor, b: NTensor, beta: Optional[float], alpha: Optional[float]) -> NTensor:
    """aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if ctx.node.kind == "aten::addbmm":
        raise ctx.unsupported("addbmm (a sum over the batch) is not supported", "use bmm(...).sum(0) + bias")
    dtype = ctx.out_dtype()
    y = _matmul(ctx, a, b, final=False)
    if alpha not in (None, 1.0):
        y = ctx.tmp("mul", [y, float(alpha)], dtype=dtype, shape=y.shape, suffix="alpha")
    (bias,) = operands(ctx, [bias], dtype, y.rank)
    if beta not in (None, 1.0):
        bias = ctx.tmp("mul", [bias, float(beta)], dtype=dtype, shape=bias.shape, suffix="beta")
    return ctx.emit("add", [y, bias])


@handler("aten::einsum", args="s L I?")
def einsum(ctx: OpContext, equation: str, tensors: list[NTensor], _path: Optional[list[int]]) -> NTensor:
    """aten::einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    if "..." in equation:
        raise ctx.unsupported("einsum with '...'", "spell the batch axes out in the equation")
    dtype = ctx.out_dtype()
    expr = equation.replace(" ", "")
    if "->" not in expr:  # implicit output: letters seen once, in alphabetical order
        letters = expr.replace(",", "")
        expr += "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    inputs = [ctx.cast(t, dtype) for t in tensors]
    return ctx.emit("tract_core_einsum", [inputs], {"expr": expr, "acc": dtype})
