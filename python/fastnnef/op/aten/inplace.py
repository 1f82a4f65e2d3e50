"""Writes, for the IR's in-place ops (torch_graph/ir/functionalize.py): ``copy_``/``fill_``/``zero_``
compute the value they leave in their tensor (the IR passes that tensor's current value
and binds the result as its next one); ``fastnnef::slice_scatter`` and
``fastnnef::select_scatter`` put a written view back into the tensor it was taken from, at
exactly the positions ``aten::slice``/``aten::select`` read (the same bound rules)."""

from __future__ import annotations

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import unknown
from fastnnef.op.aten._common import Operand, typed_scalar
from fastnnef.op.aten._slices import index_bounds, single, slice_bound
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _broadcast_like(ctx: OpContext, value: Operand, dst: NTensor) -> NTensor:
    """``value`` (a tensor of ``dst``'s rank, or a scalar) broadcast to ``dst``'s shape as
    the node output. tract_core_broadcast needs the shape as dims; where ``dst`` has a
    dynamic dim of unknown expression (or for strict NNEF), ``select(mask, v, v)`` takes
    the shape from ``dst`` itself at run time (any mask of its shape: both branches agree)."""
    if not any(unknown(d) for d in dst.shape) and not ctx.strict:
        return ctx.emit("tract_core_broadcast", [value], {"shape": list(dst.shape)})
    mask = dst
    if dst.dtype != "bool":
        mask = ctx.tmp("ne", [dst, typed_scalar(ctx, 0, dst.dtype)], suffix="shape")
    return ctx.emit("select", [mask, value, value])


def _assign(ctx: OpContext, dst: NTensor, src: Operand) -> NTensor:
    """``src`` broadcast (torch: leading axes) to ``dst``'s shape, in ``dst``'s dtype."""
    dtype = ctx.out_dtype()
    if not isinstance(src, NTensor):
        return _broadcast_like(ctx, typed_scalar(ctx, src, dtype), dst)
    value = ctx.to_rank(ctx.cast(src, dtype), dst.rank)
    if tuple(value.shape) == tuple(dst.shape):
        return ctx.emit("copy", [value])
    return _broadcast_like(ctx, value, dst)


@handler("aten::copy_", "aten::fill_", args="t x *")
def copy_(ctx: OpContext, dst: NTensor, src: Operand) -> NTensor:
    """aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)  (and fill_.Scalar/.Tensor): the value left in self"""  # noqa: E501
    return _assign(ctx, dst, src)


@handler("aten::zero_", args="t")
def zero_(ctx: OpContext, dst: NTensor) -> NTensor:
    """aten::zero_(Tensor(a!) self) -> Tensor(a!): the value left in self"""
    return _assign(ctx, dst, 0)


def _splice(ctx: OpContext, x: NTensor, src: NTensor, axis: int, b: Size, e: Size) -> NTensor:
    """``x`` with ``[b, e)`` along ``axis`` replaced by ``src``: what is kept around it,
    concatenated (static or symbolic bounds)."""
    n = x.shape[axis]
    parts = []
    if b != 0:
        parts.append(ctx.tmp("slice", [x], {"axes": [axis], "begin": [0], "end": [b]}, suffix="head"))
    parts.append(src)
    if e != n:
        parts.append(ctx.tmp("slice", [x], {"axes": [axis], "begin": [e], "end": [n]}, suffix="tail"))
    if len(parts) == 1:
        return ctx.emit("copy", parts)
    return ctx.emit("concat", [parts], {"axis": axis})


@handler("fastnnef::slice_scatter", args="t t i D? D? i")
def slice_scatter(
    ctx: OpContext, x: NTensor, src: NTensor, dim: int, start: list[Size] | None, end: list[Size] | None, step: int,
) -> NTensor:
    """fastnnef::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""  # noqa: E501
    axis = ctx.axis(dim, x.rank)
    n = x.shape[axis]
    traced = ctx.traced_shape(0)[axis]
    b = slice_bound(ctx, single(start), n, traced, 0, "start")
    e = slice_bound(ctx, single(end), n, traced, n, "end")
    if isinstance(b, int) and isinstance(e, int):
        e = max(e, b)
    src = ctx.cast(src, ctx.out_dtype())
    if step == 1:
        return _splice(ctx, x, src, axis, b, e)
    if not (isinstance(b, int) and isinstance(e, int)):
        raise ctx.unsupported(
            f"a write through a slice with step {step} whose bounds depend on a dynamic axis",
            "write through a slice with static bounds, or with step 1",
        )
    # Every step-th position: tract's scatter_nd writes rows of the leading axis.
    positions = ctx.constant(torch.arange(b, e, step, dtype=torch.int64).unsqueeze(1))
    if axis == 0:
        return ctx.emit("tract_core_scatter_nd", [x, positions, src])
    perm = [axis] + [d for d in range(x.rank) if d != axis]
    xp = ctx.tmp("transpose", [x], {"axes": perm}, suffix="xp")
    vp = ctx.tmp("transpose", [src], {"axes": perm}, suffix="vp")
    out = ctx.tmp("tract_core_scatter_nd", [xp, positions, vp], suffix="scatter")
    return ctx.emit("transpose", [out], {"axes": [perm.index(d) for d in range(x.rank)]})


@handler("fastnnef::select_scatter", args="t t i D")
def select_scatter(ctx: OpContext, x: NTensor, src: NTensor, dim: int, index: list[Size]) -> NTensor:
    """fastnnef::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    b, e = index_bounds(ctx, x, axis, index[0])
    row = ctx.tmp("unsqueeze", [ctx.cast(src, ctx.out_dtype())], {"axes": [axis]}, suffix="row")
    return _splice(ctx, x, row, axis, b, e)
