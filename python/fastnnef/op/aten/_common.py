"""Helpers shared by handler families: dtype promotion, elementwise emission."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import unknown
from fastnnef.op.context import DTYPES, FLOAT_DTYPES, OpContext

Operand = NTensor | int | float | bool
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


def literal(value: int | float | bool, dtype: str) -> int | float | bool:
    """A Python scalar as a literal of the computation dtype (no f64 constant tensors)."""
    if dtype == "bool":
        return bool(value)
    if dtype in FLOAT_DTYPES:
        return float(value)
    return int(value)


@overload
def operands(ctx: OpContext, values: Sequence[NTensor], dtype: str, rank: int) -> list[NTensor]: ...
@overload
def operands(ctx: OpContext, values: Sequence[Operand], dtype: str, rank: int) -> list[Operand]: ...
def operands(ctx: OpContext, values: Sequence[Operand], dtype: str, rank: int) -> list[Any]:
    """Cast tensors to ``dtype`` and align ranks (tract broadcasts trailing, torch leading);
    scalars become literals of ``dtype`` (typed explicitly where tract would read a TDim).
    Tensors in, tensors out (the overloads say so to the type check)."""
    out: list[Operand] = []
    for v in values:
        if isinstance(v, NTensor):
            out.append(ctx.to_rank(ctx.cast(v, dtype), rank))
        elif isinstance(v, DimExpr) or dtype not in FLOAT_DTYPES:  # a size of a dynamic axis is a TDim
            out.append(typed_scalar(ctx, v, dtype))
        else:
            out.append(literal(v, dtype))
    return out


def elementwise(ctx: OpContext, kind: str, values: Sequence[Operand], compute: str = "") -> NTensor:
    """``kind(values...)`` computed in ``compute`` (default: the output dtype)."""
    compute = compute or ctx.out_dtype()
    args = operands(ctx, values, compute, len(ctx.out_shape()))
    square = kind == "sqr" or kind == "mul" and len(args) == 2 and args[0] is args[1]
    if square and isinstance(args[0], NTensor) and compute not in FLOAT_DTYPES and compute != "bool":
        # tract has no integer square kernel (and turns x * x into one): square in f64,
        # exact below 2**53, and cast back.
        wide = ctx.cast(args[0], "f64")
        return ctx.emit("tract_core_cast", [ctx.tmp("mul", [wide, wide], suffix="sq")], {"to": compute})
    return ctx.emit(kind, args)


def typed_scalar(ctx: OpContext, value: int | float | bool | DimExpr, dtype: str) -> int | float | bool | NTensor:
    """``value`` as a 0-d operand of ``dtype`` for ops that don't unify their operand types
    (select, broadcast, scatter): tract reads a bare float as f32, a bool as bool and an
    int or a symbol as a TDim, so other dtypes get an explicit cast of the literal (strict
    NNEF, which has no cast: a 0-d constant of that dtype)."""
    if isinstance(value, DimExpr):
        scalar: int | float | bool | DimExpr = value
        natural = "tdim"
    else:
        scalar = literal(value, dtype)
        natural = "bool" if isinstance(scalar, bool) else "f32" if isinstance(scalar, float) else "tdim"
    if natural == dtype:
        return scalar  # type: ignore[return-value]
    if ctx.strict and not isinstance(scalar, DimExpr):
        return ctx.constant(torch.tensor(scalar, dtype=torch_dtype(dtype)), f"scalar_{dtype}_{scalar}")
    return ctx.tmp("tract_core_cast", [scalar], {"to": dtype}, suffix="value")


def finish(
    ctx: OpContext, kind: str, args: Sequence[Any], like: NTensor | str, attrs: dict[str, Any] | None = None,
) -> NTensor:
    """The node's output op; when ``like`` (a tensor, or a dtype) is computed in another
    dtype than the traced output (f32 norms of an f16 model), the op is an intermediate and
    a cast follows."""
    out = ctx.out_dtype()
    compute = like if isinstance(like, str) else like.dtype
    if compute == out:
        return ctx.emit(kind, args, attrs)
    inner = ctx.tmp(kind, args, attrs, dtype=compute, shape=ctx.out_shape(), suffix=compute)
    return ctx.emit("tract_core_cast", [inner], {"to": out})


def accumulation_dtype(ctx: OpContext, dtype: str) -> str:
    """The dtype that products of ``dtype`` operands (matmul, linear, conv) accumulate in:
    f32 for f16 under the target's ``force_linear_accumulation_in_f32``, else ``dtype``."""
    return "f32" if dtype == "f16" and ctx.caps.force_linear_accumulation_in_f32 else dtype


def channel_param(ctx: OpContext, p: NTensor, rank: int) -> NTensor:
    """A per-channel ``[C]`` tensor as ``[1, C, 1, ...]`` to broadcast along dim 1."""
    axes = [0] + list(range(2, rank))
    return ctx.tmp("unsqueeze", [p], {"axes": axes}, suffix="chan")


def wrap_negative(ctx: OpContext, idx: NTensor, size: Size, tag: str = "") -> NTensor:
    """i64 indices with torch's negative ones (counted from the end of an axis of ``size``)
    made non-negative, as tract's gathers and scatters need."""
    if unknown(size):
        raise ctx.unsupported("negative indices into a dynamic axis whose size expression is unknown")
    neg = ctx.tmp("lt", [idx, typed_scalar(ctx, 0, "i64")], suffix=f"neg{tag}")
    wrapped = ctx.tmp("add", [idx, typed_scalar(ctx, size, "i64")], suffix=f"wrap{tag}")
    return ctx.tmp("select", [neg, wrapped, idx], suffix=f"norm{tag}")


# Abramowitz & Stegun 7.1.26: |erf(x) - approximation| < 1.5e-7 on the whole real line.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(ctx: OpContext, x: NTensor, suffix: str = "erf") -> NTensor:
    """erf(x) as an intermediate: tract's op, or, for strict NNEF (which has no erf), the
    A&S 7.1.26 rational approximation sign(x) * (1 - poly(t) * exp(-x^2)), t = 1/(1 + p|x|)."""
    if not ctx.strict:
        return ctx.tmp("tract_core_erf", [x], suffix=suffix)
    ax = ctx.tmp("abs", [x], suffix=f"{suffix}_abs")
    den = ctx.tmp("add", [ctx.tmp("mul", [ax, _ERF_P], suffix=f"{suffix}_px"), 1.0], suffix=f"{suffix}_den")
    t = ctx.tmp("div", [1.0, den], suffix=f"{suffix}_t")
    poly = ctx.tmp("mul", [t, _ERF_A[-1]], suffix=f"{suffix}_p4")
    for k, a in enumerate(reversed(_ERF_A[:-1])):  # Horner: ((a5 t + a4) t + ...) t
        poly = ctx.tmp("mul", [ctx.tmp("add", [poly, a], suffix=f"{suffix}_c{k}"), t], suffix=f"{suffix}_h{k}")
    gauss = ctx.tmp("exp", [ctx.tmp("neg", [ctx.tmp("sqr", [x], suffix=f"{suffix}_sq")], suffix=f"{suffix}_nsq")],
                    suffix=f"{suffix}_gauss")
    magnitude = ctx.tmp("sub", [1.0, ctx.tmp("mul", [poly, gauss], suffix=f"{suffix}_tail")], suffix=f"{suffix}_mag")
    return ctx.tmp("mul", [ctx.tmp("sign", [x], suffix=f"{suffix}_sign"), magnitude], suffix=suffix)
