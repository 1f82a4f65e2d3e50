"""Cumulative ops: cumsum (for tract before 0.23.9), cumprod, cummax/cummin (values and
indices), logcumsumexp, and the trapezoid rule (trapz, trapezoid, cumulative_trapezoid).

A running reduction is one ``tract_core_scan`` along the axis, one slice per step, with the
running value as scan state; the step is an NNEF fragment. The axis may be dynamic.
``tract_core_cumsum`` (tract 0.23.9) replaces the scan for sums where the target has it
(aten::cumsum itself: op/aten/indexing.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from fastnnef.exceptions import T2NErrorStrictNNEFSpec
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import plus, unknown
from fastnnef.nnef.writer import value_kind
from fastnnef.op.aten import _math as m
from fastnnef.op.aten._common import Operand
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

# Step bodies: ``x`` is the slice read at this step, ``acc`` the running value; ``y`` the new
# running value, written out at every step.
_STEPS = {
    "sum": ["y = add(acc, x);"],
    "prod": ["y = mul(acc, x);"],
    # log(exp(acc) + exp(x)); equal operands (both -inf included) give x + log 2.
    "logsumexp": [
        "spread = abs(sub(acc, x));",
        "y = select(eq(acc, x), add(x, 0.6931471805599453), "
        "add(max(acc, x), log(add(exp(neg(spread)), 1.0))));",
    ],
}
# cummax/cummin: ties move the index forward, and a NaN is taken and then kept, as torch does.
_EXTREMUM = {"max": "ge", "min": "le"}


def _fragment(ctx: OpContext, kind: str, params: Sequence[tuple[str, str]], results: Sequence[tuple[str, str]],
              body: Sequence[str]) -> str:
    """Declare a step fragment; its name carries a hash of its text (equal steps share one)."""
    sig = ", ".join(f"{n}: tensor<{t}>" for n, t in params)
    res = ", ".join(f"{n}: tensor<{t}>" for n, t in results)
    rest = f"({sig}) -> ({res})\n{{\n" + "\n".join("  " + line for line in body) + "\n}"
    name = f"fastnnef_cum{kind}_{hashlib.sha1(rest.encode()).hexdigest()[:10]}"
    return ctx.fragment(name, f"fragment {name}{rest}")


def _check_target(ctx: OpContext) -> None:
    """Strict NNEF has no scan: say so by name (the first tract op emitted is a cast)."""
    if ctx.strict:
        raise T2NErrorStrictNNEFSpec(
            f"{ctx.where()}: a running reduction is a tract_core_scan, which strict NNEF "
            "(KhronosNNEF) does not have: export with TractNNEF instead"
        )


def _first(ctx: OpContext, x: NTensor, axis: int) -> NTensor:
    """The first slice of ``x`` along ``axis`` (the shape of one scan step)."""
    return ctx.tmp("slice", [x], {"axes": [axis], "begin": [0], "end": [1]}, suffix="first")


def _filled(ctx: OpContext, like: NTensor, value: float, dtype: str) -> NTensor:
    """``value`` in every element of a tensor shaped like ``like`` (any dims, dynamic ones
    too): ``like < like`` is false everywhere, NaN included."""
    zeros = ctx.tmp("tract_core_cast", [ctx.tmp("lt", [like, like], suffix="false")], {"to": dtype}, suffix="zeros")
    return zeros if value == 0 else ctx.tmp("add", [zeros, value], suffix="init")


def scan_running(ctx: OpContext, x: NTensor, axis: int, step: str) -> NTensor:
    """The running ``step`` (a key of ``_STEPS``) of ``x`` along ``axis``, as an intermediate."""
    _check_target(ctx)
    kind = value_kind(x.dtype)
    body = _fragment(ctx, step, [("x", kind), ("acc", kind)], [("y", kind)], _STEPS[step])
    init = {"sum": 0.0, "prod": 1.0, "logsumexp": float("-inf")}[step]
    acc = _filled(ctx, _first(ctx, x, axis), init, x.dtype)
    (y,) = ctx.tmp_multi("tract_core_scan", [], {
        "body": body, "scan": [Tuple(("x", x, axis, 1))], "full": [],
        "state": [Tuple(("acc", acc, "y"))], "output": [Tuple(("y", "full", axis, 1))],
    }, [(step, x.dtype, x.shape)])
    return y


def running_sum(ctx: OpContext, x: NTensor, axis: int) -> NTensor:
    """Cumulative sum along ``axis``: tract's own op where the target has it, else a scan."""
    if ctx.caps.supports("native_cumsum"):
        return ctx.tmp("tract_core_cumsum", [x], {"axis": axis, "exclusive": False, "reverse": False}, suffix="cumsum")
    return scan_running(ctx, x, axis, "sum")


def _compute(ctx: OpContext) -> str:
    """Floats run in f32 at least (torch accumulates f16 in f32); other types as traced."""
    out = ctx.out_dtype()
    return m.float_compute(ctx) if out in FLOAT_DTYPES else out


@handler("aten::cumsum", args="t i n?")
def cumsum(ctx: OpContext, x: NTensor, dim: int, _dtype: int | None) -> NTensor:
    """aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor  (a scan: tract before 0.23.9)"""
    c = m.Calc(ctx, _compute(ctx))
    return c.result(scan_running(ctx, ctx.cast(x, c.dtype), ctx.axis(dim, x.rank), "sum"))


@handler("aten::cumprod", args="t i n?")
def cumprod(ctx: OpContext, x: NTensor, dim: int, _dtype: int | None) -> NTensor:
    """aten::cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    c = m.Calc(ctx, _compute(ctx))
    return c.result(scan_running(ctx, ctx.cast(x, c.dtype), ctx.axis(dim, x.rank), "prod"))


@handler("aten::logcumsumexp", args="t i")
def logcumsumexp(ctx: OpContext, x: NTensor, dim: int) -> NTensor:
    """aten::logcumsumexp(Tensor self, int dim) -> Tensor  (a running log-add-exp: exact for
    any spread of values, where shifting by the overall max would underflow)"""
    c = m.Calc(ctx, _compute(ctx))
    return c.result(scan_running(ctx, ctx.cast(x, c.dtype), ctx.axis(dim, x.rank), "logsumexp"))


@handler("aten::cummax", "aten::cummin", args="t i")
def cummax(ctx: OpContext, x: NTensor, dim: int) -> list[NTensor]:
    """aten::cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)  (and cummin)"""
    _check_target(ctx)
    c = m.Calc(ctx, "i64" if x.dtype == "bool" else x.dtype)
    x = ctx.cast(x, c.dtype)
    axis = ctx.axis(dim, x.rank)
    kind = value_kind(x.dtype)
    take = f"{_EXTREMUM[ctx.kind[-3:]]}(x, acc)"
    if x.dtype in FLOAT_DTYPES:
        take = f"or({take}, ne(x, x))"
    body = _fragment(ctx, ctx.kind[-3:], [("x", kind), ("i", "integer"), ("acc", kind), ("acc_i", "integer")],
                     [("y", kind), ("y_i", "integer")],
                     [f"take = {take};", "y = select(take, x, acc);", "y_i = select(take, i, acc_i);"])
    n = x.shape[axis]
    positions = ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="positions")
    others = [a for a in range(x.rank) if a != axis]
    if others:
        positions = ctx.tmp("unsqueeze", [positions], {"axes": others}, suffix="positions")
    first = _first(ctx, x, axis)
    values, indices = ctx.tmp_multi("tract_core_scan", [], {
        "body": body, "scan": [Tuple(("x", x, axis, 1)), Tuple(("i", positions, axis, 1))], "full": [],
        "state": [Tuple(("acc", first, "y")), Tuple(("acc_i", _filled(ctx, first, 0, "i64"), "y_i"))],
        "output": [Tuple(("y", "full", axis, 1)), Tuple(("y_i", "full", axis, 1))],
    }, [("values", x.dtype, x.shape), ("indices", "i64", x.shape)])
    return [c.result(values, out=0), c.result(indices, out=1)]


# --- trapezoid rule -----------------------------------------------------------------------
def _trapezoids(ctx: OpContext, y: NTensor, spacing: Operand, dim: int) -> tuple[m.Calc, NTensor, int]:
    """(calc, areas of the n-1 trapezoids along ``dim``, axis): ``(y[i+1] + y[i]) / 2 * dx``
    with ``dx`` a number or the differences of the sample points ``spacing``."""
    c = m.Calc(ctx, m.float_compute(ctx))
    y = ctx.cast(y, c.dtype)
    axis = ctx.axis(dim, y.rank)
    n = y.shape[axis]
    if unknown(n):
        raise ctx.unsupported("the trapezoid rule along a dynamic axis whose size expression is unknown")

    def pair(t: NTensor, ax: int, tag: str) -> tuple[NTensor, NTensor]:
        size = t.shape[ax]
        hi = ctx.tmp("slice", [t], {"axes": [ax], "begin": [1], "end": [size]}, suffix=f"{tag}_hi")
        lo = ctx.tmp("slice", [t], {"axes": [ax], "begin": [0], "end": [plus(size, -1)]}, suffix=f"{tag}_lo")
        return hi, lo

    hi, lo = pair(y, axis, "y")
    mean = c("mul", c("add", hi, lo), 0.5)
    if not isinstance(spacing, NTensor):
        return c, c("mul", mean, float(spacing)), axis
    x = ctx.cast(spacing, c.dtype)
    if x.rank == 1 and y.rank > 1:  # the sample points of the integration axis only
        x = ctx.tmp("unsqueeze", [x], {"axes": [a for a in range(y.rank) if a != axis]}, suffix="x")
    x_hi, x_lo = pair(ctx.to_rank(x, y.rank), axis, "x")
    return c, c("mul", mean, c("sub", x_hi, x_lo)), axis


@handler("aten::trapezoid", "aten::trapz", args="t x i")
def trapezoid(ctx: OpContext, y: NTensor, spacing: Operand, dim: int) -> NTensor:
    """aten::trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor  (also .dx, and trapz)"""
    c, areas, axis = _trapezoids(ctx, y, spacing, dim)
    return c.out("squeeze", c("sum_reduce", areas, axes=[axis]), axes=[axis])


@handler("aten::cumulative_trapezoid", args="t x i")
def cumulative_trapezoid(ctx: OpContext, y: NTensor, spacing: Operand, dim: int) -> NTensor:
    """aten::cumulative_trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor  (also .dx)"""
    c, areas, axis = _trapezoids(ctx, y, spacing, dim)
    return c.result(running_sum(ctx, areas, axis))
