"""Helpers shared by handler families: dtype promotion, elementwise emission."""

from __future__ import annotations

from typing import Sequence, Union

import torch

from fastnnef.nnef.graph import NTensor, Sym
from fastnnef.op.context import DTYPES, FLOAT_DTYPES, OpContext

Operand = Union[NTensor, int, float, bool]
_TORCH_OF = {tag: dtype for dtype, tag in DTYPES.items() if dtype != torch.bfloat16}


def torch_dtype(tag: str) -> torch.dtype:
    return _TORCH_OF[tag]


def promote(operands: Sequence[Operand]) -> str:
    """torch's result dtype for an elementwise op: tensors decide, a Python float turns
    an integer computation into float (f32), as ``torch.result_type`` does."""
    tensors = [o.dtype for o in operands if isinstance(o, NTensor)]
    if not tensors:
        return "f32"
    result = _TORCH_OF[tensors[0]]
    for tag in tensors[1:]:
        result = torch.promote_types(result, _TORCH_OF[tag])
    tag = DTYPES[result]
    if tag not in FLOAT_DTYPES and any(isinstance(o, float) for o in operands):
        return "f32"
    return tag


def literal(value: Union[int, float, bool], dtype: str) -> Union[int, float, bool]:
    """A Python scalar as a literal of the computation dtype (no f64 constant tensors)."""
    if dtype == "bool":
        return bool(value)
    if dtype in FLOAT_DTYPES:
        return float(value)
    return int(value)


def operands(ctx: OpContext, values: Sequence[Operand], dtype: str, rank: int) -> list[Operand]:
    """Cast tensors to ``dtype`` and align ranks (tract broadcasts trailing, torch leading);
    scalars become literals of ``dtype`` (typed explicitly where tract would read a TDim)."""
    out: list[Operand] = []
    for v in values:
        if isinstance(v, NTensor):
            out.append(ctx.to_rank(ctx.cast(v, dtype), rank))
        else:
            out.append(typed_scalar(ctx, v, dtype) if dtype not in FLOAT_DTYPES else literal(v, dtype))
    return out


def elementwise(ctx: OpContext, kind: str, values: Sequence[Operand], compute: str = "") -> NTensor:
    """``kind(values...)`` computed in ``compute`` (default: the output dtype)."""
    compute = compute or ctx.out_dtype()
    return ctx.emit(kind, operands(ctx, values, compute, len(ctx.out_shape())))


def typed_scalar(ctx: OpContext, value: Union[int, float, bool, Sym], dtype: str) -> Union[int, float, bool, NTensor]:
    """``value`` as a 0-d operand of ``dtype`` for ops that don't unify their operand types
    (select, broadcast, scatter): tract reads a bare float as f32, a bool as bool and an
    int or a symbol as a TDim, so other dtypes get an explicit cast of the literal."""
    if isinstance(value, Sym):
        scalar: Union[int, float, bool, Sym] = value
        natural = "tdim"
    else:
        scalar = literal(value, dtype)
        natural = "bool" if isinstance(scalar, bool) else "f32" if isinstance(scalar, float) else "tdim"
    if natural == dtype:
        return scalar  # type: ignore[return-value]
    return ctx.tmp("tract_core_cast", [scalar], {"to": dtype}, dtype=dtype, shape=(), suffix="value")
