"""Tensor creation and casts: arange, zeros/ones/full/empty (+ _like, new_), scalar_tensor,
tensor, to/type_as.

A filled tensor is a literal broadcast to the shape (``tract_core_broadcast``), so no
constant tensor is written and dynamic shapes work; the dtype comes from the trace.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from fastnnef.nnef.graph import Dim, NTensor, Sym
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.aten._dims import emit_shaped, plus, unknown
from fastnnef.op.context import FLOAT_DTYPES, OpContext, parse_args
from fastnnef.op.convert import float_encoding
from fastnnef.op.registry import handler
from fastnnef.torch_graph.ir import Const, SymInt

Number = Union[int, float, bool]


def _fill(ctx: OpContext, value: Union[Number, Sym], shape: Sequence[Dim], x: Optional[NTensor] = None) -> NTensor:
    """``value`` broadcast to ``shape`` as the node output, in the traced dtype. With ``x``
    given and dims of unknown expression, the shape is taken from ``x`` at run time."""
    scalar = typed_scalar(ctx, value, ctx.out_dtype())
    if any(unknown(d) for d in shape):
        if x is None:
            raise ctx.unsupported(
                "creating a tensor whose size depends on a dynamic axis in an unknown way",
                "build the size from x.size(i) directly, or use torch.*_like",
            )
        ref = ctx.tmp("tract_core_shape_of", [x], dtype="tdim", shape=(x.rank,), suffix="shape")
        return emit_shaped(ctx, "tract_core_broadcast", [scalar], {"shape": ref}, shape)
    return emit_shaped(ctx, "tract_core_broadcast", [scalar], {"shape": list(shape)}, shape)


def _number(ctx: OpContext, value: object) -> Union[Number, Sym]:
    if isinstance(value, (int, float, bool)):
        return value
    raise ctx.unsupported(f"fill value {value!r}", "use a Python number")


def _sizes(ctx: OpContext, index: int) -> list[Dim]:
    """A size argument (ints, or symbols for dynamic axes)."""
    return parse_args(ctx, ["D"], [ctx.node.inputs[index]])[0]


@handler("aten::zeros", "aten::ones", "aten::empty", args="D *")
def zeros(ctx: OpContext, size: list[Dim]) -> NTensor:
    """aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (ones, empty)"""
    return _fill(ctx, 1 if ctx.node.kind == "aten::ones" else 0, size)


@handler("aten::full", args="D n *")
def full(ctx: OpContext, size: list[Dim], value: object) -> NTensor:
    """aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _fill(ctx, _number(ctx, value), size)


@handler("aten::new_zeros", "aten::new_ones", "aten::new_empty", args="t D *")
def new_zeros(ctx: OpContext, _x: NTensor, size: list[Dim]) -> NTensor:
    """aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _fill(ctx, 1 if ctx.node.kind == "aten::new_ones" else 0, size)


@handler("aten::new_full", args="t D n *")
def new_full(ctx: OpContext, _x: NTensor, size: list[Dim], value: object) -> NTensor:
    """aten::new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _fill(ctx, _number(ctx, value), size)


@handler("aten::zeros_like", "aten::ones_like", "aten::empty_like", args="t *")
def zeros_like(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _fill(ctx, 1 if ctx.node.kind == "aten::ones_like" else 0, x.shape, x)


@handler("aten::full_like", args="t n *")
def full_like(ctx: OpContext, x: NTensor, value: object) -> NTensor:
    """aten::full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _fill(ctx, _number(ctx, value), x.shape, x)


@handler("aten::scalar_tensor", args="n *")
def scalar_tensor(ctx: OpContext, value: object) -> NTensor:
    """aten::scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _fill(ctx, _number(ctx, value), ())


@handler("aten::tensor", args="_ *")
def tensor(ctx: OpContext) -> NTensor:
    """aten::tensor(t[] data, *, ScalarType? dtype=None, Device? device=None, bool requires_grad=False) -> Tensor"""
    data = ctx.node.inputs[0]
    if isinstance(data, SymInt):  # torch.tensor(x.size(1)): the size as a 0-d tensor
        if data.expr == "?":
            raise ctx.unsupported("torch.tensor() of a size whose dynamic expression is unknown")
        return _fill(ctx, Sym(data.expr), ())
    if isinstance(data, Const) and isinstance(data.value, (int, float, bool)):
        return _fill(ctx, data.value, ())
    raise ctx.unsupported("torch.tensor() of a list built in forward", "create the tensor in __init__ as a buffer")


# --- arange -----------------------------------------------------------------------------
def _arange_bounds(ctx: OpContext) -> list[Union[Number, Sym]]:
    """(start, end, step) from arange(end, ...), arange(start, end, ...) or arange(start, end, step, ...)."""
    n_bounds = {5: 1, 6: 2, 7: 3}.get(len(ctx.node.inputs))
    if n_bounds is None:
        raise ctx.unsupported(f"aten::arange with {len(ctx.node.inputs)} inputs (an out= overload?)")
    values: list[Union[Number, Sym]] = []
    for v in ctx.node.inputs[:n_bounds]:
        if isinstance(v, SymInt):
            if v.expr == "?":
                raise ctx.unsupported("arange bound that depends on a dynamic axis in an unknown way")
            values.append(Sym(v.expr))
        elif isinstance(v, Const) and isinstance(v.value, (int, float)):
            values.append(v.value)
        else:
            raise ctx.unsupported("arange with a tensor bound", "use Python numbers or x.size(i)")
    start, end, step = ([0] + values + [1])[:3] if n_bounds == 1 else (values + [1])[:3]
    return [start, end, step]


@handler("aten::arange", args="*")
def arange(ctx: OpContext) -> NTensor:
    """aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    start, end, step = _arange_bounds(ctx)
    dtype = ctx.out_dtype()
    value = ctx.out_value()
    dynamic = any(isinstance(v, Sym) for v in (start, end, step))
    if not dynamic and (dtype in FLOAT_DTYPES or any(isinstance(v, float) for v in (start, end, step))):
        # Static float range: torch's exact values, stored as a constant.
        data = torch.arange(start, end, step, dtype=value.dtype)  # type: ignore[arg-type]
        encoding, bf16 = float_encoding(data.dtype)
        name = ctx.g.fresh_name(ctx.converter.name_for(ctx.node, None))
        return ctx.g.add_variable(name, name, data, dtype, tuple(data.shape), encoding, bf16)
    if any(isinstance(v, float) for v in (start, end, step)):
        raise ctx.unsupported("arange with float bounds and a dynamic end", "use integer bounds and scale the result")
    if isinstance(step, Sym) or step == 0:
        raise ctx.unsupported("arange with a dynamic or zero step")
    if not dynamic:
        length: Dim = len(range(int(start), int(end), int(step)))
    elif step == 1 and not isinstance(start, Sym):
        length = plus(end, -int(start))  # type: ignore[arg-type]
    else:
        length = Sym("?")
    r = ctx.tmp("tract_core_range", [start, end, step], dtype="i64", shape=(length,), suffix="range")
    return emit_shaped(ctx, "tract_core_cast" if dtype != "i64" else "copy", [r],
                       {"to": dtype} if dtype != "i64" else None, (length,))


# --- casts ------------------------------------------------------------------------------
@handler("aten::to", "aten::type_as", "aten::_to_copy", "aten::to_dtype", args="t *")
def to(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)  (every overload: the traced dtype decides)"""
    dtype = ctx.out_dtype()
    if x.dtype == dtype:
        return emit_shaped(ctx, "copy", [x], None, x.shape)
    if dtype == "bool" and x.dtype != "bool":  # torch: nonzero -> True
        zero = 0.0 if x.dtype in FLOAT_DTYPES else 0
        return emit_shaped(ctx, "ne", [x, zero], None, x.shape)
    return emit_shaped(ctx, "tract_core_cast", [x], {"to": dtype}, x.shape)
