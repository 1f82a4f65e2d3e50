"""Reductions: sum/mean/prod, max/min (values and indices), amax/amin, argmax/argmin,
all/any, var/std (+ _mean forms), vector norms, logsumexp.

NNEF reductions keep the reduced axes as size 1; ``keepdim=False`` adds a squeeze.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastnnef.dim import DimExpr
from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import elementwise
from fastnnef.op.aten.arithmetic import bool_logic
from fastnnef.op.aten.quantized import torch_quantized
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

DimArg = None | int | Sequence[int]


def _axes(ctx: OpContext, x: NTensor, dims: DimArg) -> list[int]:
    """Sorted non-negative axes; None or [] means every axis (torch's convention)."""
    if dims is None:
        return list(range(x.rank))
    wanted = [dims] if isinstance(dims, int) else list(dims)
    if not wanted:
        return list(range(x.rank))
    return sorted({ctx.axis(d, x.rank) for d in wanted})


def reduce_to_output(ctx: OpContext, kind: str, x: NTensor, axes: list[int], keepdim: bool, dtype: str,
            attrs: dict | None = None, out: int = 0) -> NTensor:
    """``kind(x, axes)`` as node output ``out``, squeezed unless ``keepdim``."""
    attrs = {"axes": axes, **(attrs or {})}
    if not axes:  # a 0-d input: reducing nothing
        return ctx.emit("copy", [x], out=out, shape=x.shape)
    if keepdim:
        return ctx.emit(kind, [x], attrs, out=out)
    r = ctx.tmp(kind, [x], attrs, suffix="red")
    return ctx.emit("squeeze", [r], {"axes": axes}, out=out)


def _finish_tensor(ctx: OpContext, r: NTensor, axes: list[int], keepdim: bool, x: NTensor) -> NTensor:
    """Emit ``r`` (a kept-dims reduction already computed) as the node output."""
    if keepdim or not axes:
        return ctx.emit("copy", [r])
    return ctx.emit("squeeze", [r], {"axes": axes})


def dim_form(ctx: OpContext) -> bool:
    """True for the overloads taking (self, dim, keepdim, ...), False for (self, dtype)."""
    return ctx.n_inputs > 2


def _reduce(ctx: OpContext, kind: str, x: NTensor, dims: DimArg, keepdim: bool | None) -> NTensor:
    """A reduction computed in the output dtype; the (self, dtype) overloads reduce all axes."""
    dtype = ctx.out_dtype()
    if not dim_form(ctx):
        dims, keepdim = None, False
    return reduce_to_output(ctx, kind, ctx.cast(x, dtype), _axes(ctx, x, dims), bool(keepdim), dtype)


@handler("aten::sum", args="t I? b? n?")
def sum_(ctx: OpContext, x: NTensor, dims: DimArg, keepdim: bool | None, _dtype) -> NTensor:
    """aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (also sum(self, dtype))"""  # noqa: E501
    return _reduce(ctx, "sum_reduce", x, dims, keepdim)


@handler("aten::mean", args="t I? b? n?")
@torch_quantized("dequantize")
def mean(ctx: OpContext, x: NTensor, dims: DimArg, keepdim: bool | None, _dtype) -> NTensor:
    """aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (also mean(self, dtype))"""  # noqa: E501
    return _reduce(ctx, "mean_reduce", x, dims, keepdim)


@handler("aten::prod", args="t I? b? n?")
def prod(ctx: OpContext, x: NTensor, dim: DimArg, keepdim: bool | None, _dtype) -> NTensor:
    """aten::prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (also prod(self, dtype))"""  # noqa: E501
    return _reduce(ctx, "tract_core_product_reduce", x, dim, keepdim)


# tract orders numbers only: on bools, the largest is any and the smallest all.
_BOOL_EXTREMES = {"max_reduce": "any_reduce", "min_reduce": "all_reduce"}


def _ordered(ctx: OpContext, kind: str, x: NTensor) -> tuple[str, NTensor]:
    """An order reduction and its operand: on bools, max/min as any/all and the indices
    (max.dim's) over the bools as u8 (false < true, as in torch)."""
    if x.dtype != "bool":
        return kind, x
    if kind in _BOOL_EXTREMES:
        return _BOOL_EXTREMES[kind], x
    return kind, ctx.cast(x, "u8")


def _extreme(ctx: OpContext, kind: str, x: NTensor, axes: list[int], keepdim: bool, dtype: str,
             out: int = 0) -> NTensor:
    kind, x = _ordered(ctx, kind, x)
    return reduce_to_output(ctx, kind, x, axes, keepdim, dtype, out=out)


@handler("aten::amax", "aten::amin", args="t I? b?")
def amax(ctx: OpContext, x: NTensor, dims: list[int] | None, keepdim: bool | None) -> NTensor:
    """aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor  (and aten::amin)"""
    kind = "max_reduce" if ctx.kind == "aten::amax" else "min_reduce"
    return _extreme(ctx, kind, x, _axes(ctx, x, dims), bool(keepdim), x.dtype)


@handler("aten::max", "aten::min", args="t x? b?")
def max_(ctx: OpContext, x: NTensor, dim: None | int | NTensor, keepdim: bool | None) -> NTensor | list[NTensor]:
    """aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)  (also max(self), max.other)"""  # noqa: E501
    is_max = ctx.kind == "aten::max"
    if isinstance(dim, NTensor):  # max.other: elementwise
        if ctx.out_dtype() == "bool":
            return bool_logic(ctx, "max" if is_max else "min", x, dim)
        return elementwise(ctx, "max" if is_max else "min", [x, dim])
    if dim is None:
        return _extreme(ctx, "max_reduce" if is_max else "min_reduce", x, _axes(ctx, x, None), False, x.dtype)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ctx.unsupported(f"max/min with dim {dim!r}")
    if x.rank == 0:
        raise ctx.unsupported("max/min with dim on a 0-d tensor", "call it without dim")
    axes = [ctx.axis(dim, x.rank)]
    values = _extreme(ctx, "max_reduce" if is_max else "min_reduce", x, axes, bool(keepdim), x.dtype, out=0)
    indices = _extreme(ctx, "argmax_reduce" if is_max else "argmin_reduce", x, axes, bool(keepdim), "i64", out=1)
    return [values, indices]


@handler("aten::argmax", "aten::argmin", args="t i? b?")
def argmax(ctx: OpContext, x: NTensor, dim: int | None, keepdim: bool | None) -> NTensor:
    """aten::argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor  (and aten::argmin)"""
    kind = "argmax_reduce" if ctx.kind == "aten::argmax" else "argmin_reduce"
    if dim is not None and x.rank:
        return reduce_to_output(ctx, kind, x, [ctx.axis(dim, x.rank)], bool(keepdim), "i64")
    # Over the flattened tensor: reshape to 1-D, reduce, then reshape to the output rank.
    flat = ctx.tmp("reshape", [x], {"shape": [-1]}, dtype=x.dtype, shape=(DimExpr("?"),), suffix="flat")
    r = ctx.tmp(kind, [flat], {"axes": [0]}, suffix="red")
    rank = len(ctx.out_shape())
    if rank == 0:
        return ctx.emit("squeeze", [r], {"axes": [0]})
    return ctx.emit("reshape", [r], {"shape": [1] * rank}, shape=(1,) * rank)


@handler("aten::all", "aten::any", args="t I? b?")
def all_(ctx: OpContext, x: NTensor, dims: DimArg, keepdim: bool | None) -> NTensor:
    """aten::all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor  (also all(self), all.dims, any)"""
    kind = "all_reduce" if ctx.kind == "aten::all" else "any_reduce"
    if x.dtype != "bool":
        zero = 0.0 if x.dtype in FLOAT_DTYPES else 0
        x = ctx.tmp("ne", [x, zero], suffix="nz")
    if ctx.out_dtype() != "bool":
        raise ctx.unsupported(f"{kind} with a {ctx.out_dtype()} result", "reduce a bool tensor")
    return reduce_to_output(ctx, kind, x, _axes(ctx, x, dims), bool(keepdim), "bool")


# --- moments ----------------------------------------------------------------------------
def _correction(ctx: OpContext, raw: object) -> float:
    """var(unbiased: bool) and var.correction(correction: Scalar?) share an input slot."""
    if raw is None:
        return 1.0
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (int, float)):
        return float(raw)
    raise ctx.unsupported(f"variance correction {raw!r}")


def _moments(ctx: OpContext, x: NTensor, dims: DimArg, correction: float) -> tuple[NTensor, NTensor, list[int]]:
    """(variance, mean), both with kept dims, computed in the output dtype."""
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dims)
    m = ctx.tmp("mean_reduce", [x], {"axes": axes}, suffix="mean")
    d = ctx.tmp("sub", [x, m], suffix="dev")
    sq = ctx.tmp("sqr", [d], suffix="sq")
    var = ctx.tmp("mean_reduce", [sq], {"axes": axes}, suffix="var")
    if correction:
        ctx.static(x, axes, "var/std with a correction")
        count = math.prod(int(x.shape[a]) for a in axes)
        scale = count / (count - correction) if count > correction else math.inf
        var = ctx.tmp("mul", [var, scale], suffix="unbiased")
    return var, m, axes


def _var_args(ctx: OpContext, third: object) -> tuple[list[int] | None, float, bool]:
    """(dims, correction, keepdim) for every var/std overload."""
    if ctx.n_inputs == 2:  # var(self, bool unbiased)
        return None, _correction(ctx, ctx.arg(1, "n")), False
    dims = ctx.arg(1, "I?")
    keep = ctx.arg(3, "n") if ctx.n_inputs > 3 else False
    return dims, _correction(ctx, third), bool(keep)


@handler("aten::var", "aten::std", args="t _ n? *")
def var(ctx: OpContext, x: NTensor, third: object) -> NTensor:
    """aten::var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor  (also var.dim, std)"""  # noqa: E501
    dims, corr, keep = _var_args(ctx, third)
    v, _, axes = _moments(ctx, x, dims, corr)
    if ctx.kind == "aten::std":
        v = ctx.tmp("sqrt", [v], suffix="std")
    return _finish_tensor(ctx, v, axes, keep, x)


@handler("aten::var_mean", "aten::std_mean", args="t _ n? *")
def var_mean(ctx: OpContext, x: NTensor, third: object) -> list[NTensor]:
    """aten::var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""  # noqa: E501
    dims, corr, keep = _var_args(ctx, third)
    v, m, axes = _moments(ctx, x, dims, corr)
    if ctx.kind == "aten::std_mean":
        v = ctx.tmp("sqrt", [v], suffix="std")
    out = []
    for k, r in enumerate((v, m)):
        if keep or not axes:
            out.append(ctx.emit("copy", [r], out=k))
        else:
            out.append(ctx.emit("squeeze", [r], {"axes": axes}, out=k))
    return out


# --- norms ------------------------------------------------------------------------------
def _vector_norm(ctx: OpContext, x: NTensor, p: float, dims: DimArg, keepdim: bool) -> NTensor:
    out = ctx.out_dtype()
    # Under force_norm_in_f32 an f16 norm is computed in f32 and cast back (as the
    # reference does, for every order but 1: a sum of |x| squares nothing).
    dtype = "f32" if out == "f16" and p != 1 and ctx.caps.force_norm_in_f32 else out
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dims)
    if p not in (2, 0):
        a = ctx.tmp("abs", [x], suffix="abs")
    if p == 2:
        s = ctx.tmp("sum_reduce", [ctx.tmp("sqr", [x], suffix="sq")], {"axes": axes}, suffix="sum")
        r = ctx.tmp("sqrt", [s], suffix="norm")
    elif p == 1:
        r = ctx.tmp("sum_reduce", [a], {"axes": axes}, suffix="norm")
    elif p == math.inf:
        r = ctx.tmp("max_reduce", [a], {"axes": axes}, suffix="norm")
    elif p == -math.inf:
        r = ctx.tmp("min_reduce", [a], {"axes": axes}, suffix="norm")
    elif p == 0:
        nz = ctx.tmp("ne", [x, 0.0], suffix="nz")
        r = ctx.tmp("sum_reduce", [ctx.tmp("tract_core_cast", [nz], {"to": dtype}, suffix="cnt")], {"axes": axes},
                    suffix="norm")
    else:
        powed = ctx.tmp("pow", [a, float(p)], suffix="pow")
        s = ctx.tmp("sum_reduce", [powed], {"axes": axes}, suffix="sum")
        r = ctx.tmp("pow", [s, 1.0 / float(p)], suffix="norm")
    return _finish_tensor(ctx, ctx.cast(r, out), axes, keepdim, x)


@handler("aten::linalg_vector_norm", args="t f I? b n?")
def linalg_vector_norm(ctx: OpContext, x: NTensor, p: float, dims: list[int] | None, keepdim: bool, _dtype) -> NTensor:
    """aten::linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""  # noqa: E501
    if ctx.out_dtype() not in FLOAT_DTYPES:
        raise ctx.unsupported("vector norm of a non-float tensor")
    return _vector_norm(ctx, x, p, dims, keepdim)


@handler("aten::norm", args="t f? I? b? n?")
def norm(ctx: OpContext, x: NTensor, p: float | None, dims: list[int] | None, keepdim: bool | None, _dtype) -> NTensor:
    """aten::norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor  (also norm.Scalar)"""
    return _vector_norm(ctx, x, 2.0 if p is None else p, dims, bool(keepdim))


@handler("aten::logsumexp", args="t I b")
def logsumexp(ctx: OpContext, x: NTensor, dims: list[int], keepdim: bool) -> NTensor:
    """aten::logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dims)
    m = ctx.tmp("max_reduce", [x], {"axes": axes}, suffix="max")
    e = ctx.tmp("exp", [ctx.tmp("sub", [x, m], suffix="shift")], suffix="exp")
    s = ctx.tmp("sum_reduce", [e], {"axes": axes}, suffix="sum")
    r = ctx.tmp("add", [ctx.tmp("log", [s], suffix="log"), m], suffix="lse")
    return _finish_tensor(ctx, r, axes, keepdim, x)


# --- min and max together, counts, NaN-ignoring reductions --------------------------------
@handler("aten::aminmax", args="t i? b")
def aminmax(ctx: OpContext, x: NTensor, dim: int | None, keepdim: bool) -> list[NTensor]:
    """aten::aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)"""
    axes = _axes(ctx, x, dim)
    return [_extreme(ctx, kind, x, axes, keepdim, x.dtype, out=k)
            for k, kind in enumerate(("min_reduce", "max_reduce"))]


@handler("aten::count_nonzero", args="t I?")
def count_nonzero(ctx: OpContext, x: NTensor, dims: list[int] | None) -> NTensor:
    """aten::count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor  (also count_nonzero(self, int? dim))"""
    nonzero = x if x.dtype == "bool" else ctx.tmp("ne", [x, 0.0 if x.dtype in FLOAT_DTYPES else 0], suffix="nz")
    ones = ctx.tmp("tract_core_cast", [nonzero], {"to": "i64"}, suffix="count")
    return reduce_to_output(ctx, "sum_reduce", ones, _axes(ctx, x, dims), False, "i64")


def _not_nan(ctx: OpContext, x: NTensor) -> NTensor:
    return ctx.tmp("not", [ctx.tmp("ne", [x, x], suffix="nan") if ctx.strict else
                           ctx.tmp("tract_core_is_nan", [x], suffix="nan")], suffix="valid")


@handler("aten::nansum", "aten::nanmean", args="t I? b n?")
def nansum(ctx: OpContext, x: NTensor, dims: DimArg, keepdim: bool, _dtype: object) -> NTensor:
    """aten::nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor  (and nanmean: NaNs count as absent)"""  # noqa: E501
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    axes = _axes(ctx, x, dims)
    if dtype not in FLOAT_DTYPES:  # integers hold no NaN
        return reduce_to_output(ctx, "sum_reduce", x, axes, keepdim, dtype)
    valid = _not_nan(ctx, x)
    zero = ctx.tmp("tract_core_cast", [0.0], {"to": dtype}, suffix="zero") if dtype != "f32" else 0.0
    total = ctx.tmp("sum_reduce", [ctx.tmp("select", [valid, x, zero], suffix="clean")], {"axes": axes}, suffix="sum")
    if ctx.kind == "aten::nanmean":
        count = ctx.tmp("tract_core_cast", [valid], {"to": dtype}, suffix="ones")
        total = ctx.tmp("div", [total, ctx.tmp("sum_reduce", [count], {"axes": axes}, suffix="count")], suffix="mean")
    return _finish_tensor(ctx, total, axes, keepdim, x)
