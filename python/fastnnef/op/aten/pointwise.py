"""Elementwise math beyond op/aten/arithmetic.py: fused multiply-adds (addcmul, addcdiv,
lerp), atan2, hypot, copysign, fmod, trunc/frac, frexp/ldexp, exp2, log10, logaddexp(2),
float_power, heaviside, sgn/positive, angle conversions, and float classification (isnan,
isinf, isposinf, isneginf, isfinite, signbit, isclose, nan_to_num).

Classification is written with plain NNEF comparisons against ``inf`` where it can be
(``|x| == inf``, ``|x| < inf``), so strict NNEF exports it too; only the NaN test needs
``tract_core_is_nan`` (``x != x`` in strict NNEF).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten import _math as m
from fastnnef.op.aten._common import Operand, literal, promote, torch_dtype
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler


def _float(ctx: OpContext, *values: Operand) -> tuple[m.Calc, list[Any]]:
    """A float ``Calc`` for the node and its inputs cast to its compute dtype."""
    c = m.Calc(ctx, m.float_compute(ctx))
    return c, c.inputs(*values)


def _compute(ctx: OpContext) -> m.Calc:
    """A ``Calc`` in the output dtype (floats: f16 widened), for ops that keep integers."""
    out = ctx.out_dtype()
    return m.Calc(ctx, m.float_compute(ctx) if out in FLOAT_DTYPES else out)


def _abs(c: m.Calc, v: Operand) -> Operand:
    return c("abs", v) if isinstance(v, NTensor) else abs(v)


# --- fused arithmetic ---------------------------------------------------------------------
@handler("aten::addcmul", "aten::addcdiv", args="t t t f?")
def addcmul(ctx: OpContext, x: NTensor, t1: NTensor, t2: NTensor, value: float | None) -> NTensor:
    """aten::addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor  (and addcdiv)"""
    c = _compute(ctx)
    x, a, b = c.inputs(x, t1, t2)
    term = c("mul" if ctx.kind == "aten::addcmul" else "div", a, b)
    if value is not None and value != 1:
        term = c("mul", term, literal(value, c.dtype))
    return c.out("add", x, term)


@handler("aten::lerp", args="t t x")
def lerp(ctx: OpContext, start: NTensor, end: NTensor, weight: Operand) -> NTensor:
    """aten::lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor  (also .Tensor)

    torch's two-sided form: ``start + w (end - start)`` for ``|w| < 0.5``, else
    ``end - (end - start)(1 - w)``, exact at both ends."""
    c, (a, b, w) = _float(ctx, start, end, weight)
    diff = c("sub", b, a)
    if not isinstance(w, NTensor):
        if abs(w) < 0.5:
            return c.out("add", a, c("mul", diff, w))
        return c.out("sub", b, c("mul", diff, 1.0 - w))
    low = c("add", a, c("mul", diff, w))
    high = c("sub", b, c("mul", diff, c("sub", 1.0, w)))
    return c.out("select", c("lt", c("abs", w), 0.5), low, high)


# --- trigonometry and magnitudes ----------------------------------------------------------
@handler("aten::atan2", "aten::arctan2", args="t t")
def atan2(ctx: OpContext, y: NTensor, x: NTensor) -> NTensor:
    """aten::atan2(Tensor self, Tensor other) -> Tensor  (atan(y/x), shifted by +-pi where
    x's sign bit is set; atan2(+-0, +-0) as torch gives it)"""
    c, (y, x) = _float(ctx, y, x)
    both_zero = c("and", c("eq", x, 0.0), c("eq", y, 0.0))
    base = c.select(both_zero, 0.0, c("atan", c("div", y, x)))
    turn = c.select(m.signbit(c, y), -math.pi, math.pi)
    return c.out("add", base, c.select(m.signbit(c, x), turn, 0.0))


@handler("aten::hypot", args="t t")
def hypot(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::hypot(Tensor self, Tensor other) -> Tensor  (max * sqrt(1 + (min/max)^2): no
    overflow of the squares)"""
    c, (a, b) = _float(ctx, a, b)
    a, b = c("abs", a), c("abs", b)
    big, small = c("max", a, b), c("min", a, b)
    tiny = float(torch.finfo(torch_dtype(c.dtype)).tiny)
    ratio = c("div", small, c("max", big, tiny))
    value = c("mul", big, c("sqrt", c("add", c("sqr", ratio), 1.0)))
    return c.out("select", c("eq", big, math.inf), c.lit(math.inf), value)


@handler("aten::copysign", args="t x")
def copysign(ctx: OpContext, a: NTensor, b: Operand) -> NTensor:
    """aten::copysign.Tensor(Tensor self, Tensor other) -> Tensor  (also .Scalar; -0.0 counts
    as negative)"""
    c, (a, b) = _float(ctx, a, b)
    mag = c("abs", a)
    if not isinstance(b, NTensor):
        return c.out("neg", mag) if math.copysign(1.0, b) < 0 else c.out("copy", mag)
    return c.out("select", m.signbit(c, b), c("neg", mag), mag)


@handler("aten::deg2rad", "aten::rad2deg", args="t")
def deg2rad(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::deg2rad(Tensor self) -> Tensor  (and rad2deg)"""
    c, (x,) = _float(ctx, x)
    factor = math.pi / 180 if ctx.kind == "aten::deg2rad" else 180 / math.pi
    return c.out("mul", x, factor)


@handler("aten::sgn", args="t")
def sgn(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::sgn(Tensor self) -> Tensor  (sign, for real tensors)"""
    return ctx.emit("sign", [ctx.cast(x, ctx.out_dtype())])


@handler("aten::positive", args="t")
def positive(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::positive(Tensor(a) self) -> Tensor(a)"""
    return ctx.emit("copy", [x])


# --- rounding and remainders ------------------------------------------------------------------
@handler("aten::trunc", "aten::fix", args="t")
def trunc(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::trunc(Tensor self) -> Tensor  (and fix)"""
    if x.dtype not in FLOAT_DTYPES:
        return ctx.emit("copy", [x])
    c = m.Calc(ctx, x.dtype)
    return c.out("select", c("lt", x, 0.0), c("ceil", x), c("floor", x))


@handler("aten::frac", args="t")
def frac(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::frac(Tensor self) -> Tensor  (x - trunc(x))"""
    c = m.Calc(ctx, x.dtype)
    return c.out("sub", x, m.trunc(c, x))


@handler("aten::fmod", args="t x")
def fmod(ctx: OpContext, a: NTensor, b: Operand) -> NTensor:
    """aten::fmod.Tensor(Tensor self, Tensor other) -> Tensor  (also .Scalar; C's fmod: the
    remainder has the sign of the dividend)

    f32 is computed in f64: ``trunc(a / b)`` is then the true quotient's and ``q * b``
    exact, as C's exact fmod needs (in f32, ``1.0 / 0.1`` rounds up to 10)."""
    out = ctx.out_dtype()
    c = m.Calc(ctx, {"f16": "f32", "f32": "f64"}.get(out, out))
    a, b = c.inputs(a, b)
    if c.dtype not in FLOAT_DTYPES:  # tract's integer division truncates, as C does
        return c.out("sub", a, c("mul", c("div", a, b), b))
    r = c("sub", a, c("mul", m.trunc(c, c("div", a, b)), b))
    # Should a/b still round up to the next integer, the remainder has the wrong sign.
    wrong = c("lt", c("mul", r, a), 0.0)
    return c.out("select", wrong, c("add", r, c("mul", c("sign", a), _abs(c, b))), r)


# --- exponents and logarithms -------------------------------------------------------------------
@handler("aten::exp2", "aten::special_exp2", args="t")
def exp2(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::exp2(Tensor self) -> Tensor"""
    c, (x,) = _float(ctx, x)
    return c.out("pow", 2.0, x)


@handler("aten::log10", args="t")
def log10(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::log10(Tensor self) -> Tensor"""
    c, (x,) = _float(ctx, x)
    return c.out("div", c("log", x), math.log(10.0))


@handler("aten::logaddexp", "aten::logaddexp2", args="t t")
def logaddexp(ctx: OpContext, a: NTensor, b: NTensor) -> NTensor:
    """aten::logaddexp(Tensor self, Tensor other) -> Tensor  (and logaddexp2, in base 2)"""
    c, (a, b) = _float(ctx, a, b)
    if ctx.kind == "aten::logaddexp":
        return c.result(m.log_add_exp(c, a, b))
    d = c.select(c("eq", a, b), 0.0, c("abs", c("sub", a, b)))
    tail = c("div", c("log", c("add", c("pow", 2.0, c("neg", d)), 1.0)), math.log(2.0))
    return c.out("add", c("max", a, b), tail)


@handler("aten::float_power", args="x x")
def float_power(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::float_power.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor  (computed in f64; also the Scalar overloads)"""  # noqa: E501
    c = m.Calc(ctx, ctx.out_dtype())
    return c.out("pow", *c.inputs(a, b))


@handler("aten::ldexp", args="t t")
def ldexp(ctx: OpContext, x: NTensor, e: NTensor) -> NTensor:
    """aten::ldexp.Tensor(Tensor self, Tensor other) -> Tensor  (x * 2^e)"""
    c, (x, e) = _float(ctx, x, e)
    return c.out("mul", x, c("pow", 2.0, e))


def _pow2_scale(c: m.Calc, x: NTensor, k: NTensor) -> NTensor:
    """``x * 2^k`` in two factors, so that ``2^k`` overflowing (subnormal ``x``) does not."""
    half = c("floor", c("mul", k, 0.5))
    return c("mul", c("mul", x, c("pow", 2.0, half)), c("pow", 2.0, c("sub", k, half)))


@handler("aten::frexp", args="t")
def frexp(ctx: OpContext, x: NTensor) -> list[NTensor]:
    """aten::frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)  (x = m 2^e,
    0.5 <= |m| < 1; m = x and e = 0 for zeros, infinities and NaN)"""
    c = m.Calc(ctx, "f32" if x.dtype == "f16" else x.dtype)
    x = ctx.cast(x, c.dtype)
    a = c("abs", x)
    regular = c("and", c("lt", a, math.inf), c("ne", a, 0.0))  # NaN fails both tests
    e = c.select(regular, c("add", c("floor", c("div", c("log", a), math.log(2.0))), 1.0), 0.0)
    mant = _pow2_scale(c, x, c("neg", e))
    # log(a)/log(2) can round across an integer at exact powers of two: one correction.
    am = c("abs", mant)
    up = c("and", c("ge", am, 1.0), regular)
    down = c("and", c("lt", am, 0.5), regular)
    e = c("select", up, c("add", e, 1.0), c("select", down, c("sub", e, 1.0), e))
    mant = c("select", up, c("mul", mant, 0.5), c("select", down, c("mul", mant, 2.0), mant))
    return [c.result(mant, out=0), c.result(e, out=1)]


# --- comparisons with a number -----------------------------------------------------------------
@handler("aten::heaviside", args="t t")
def heaviside(ctx: OpContext, x: NTensor, values: NTensor) -> NTensor:
    """aten::heaviside(Tensor self, Tensor values) -> Tensor  (values where x == 0, else x > 0)"""
    c = m.Calc(ctx, ctx.out_dtype())
    x, values = c.inputs(x, values)
    zero = literal(0, c.dtype)
    step = c("tract_core_cast", c("gt", x, zero), to=c.dtype)
    return c.out("select", c("eq", x, zero), values, step)


def _all(ctx: OpContext, x: NTensor, value: bool) -> NTensor:
    """An all-``value`` bool output shaped like ``x`` (integers hold no NaN or infinity)."""
    if x.dtype == "bool":
        return ctx.emit("or" if value else "and", [x, ctx.tmp("not", [x], suffix="not")])
    return ctx.emit("eq" if value else "ne", [x, x])


@handler("aten::isnan", args="t")
def isnan(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::isnan(Tensor self) -> Tensor"""
    if x.dtype not in FLOAT_DTYPES:
        return _all(ctx, x, False)
    return ctx.emit("ne", [x, x]) if ctx.strict else ctx.emit("tract_core_is_nan", [x])


@handler("aten::isinf", "aten::isposinf", "aten::isneginf", "aten::isfinite", args="t")
def isinf(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::isinf(Tensor self) -> Tensor  (also isposinf, isneginf, isfinite)"""
    kind = ctx.kind
    if x.dtype not in FLOAT_DTYPES:
        return _all(ctx, x, kind == "aten::isfinite")
    if kind == "aten::isposinf":
        return ctx.emit("eq", [x, math.inf])
    if kind == "aten::isneginf":
        return ctx.emit("eq", [x, -math.inf])
    a = ctx.tmp("abs", [x], suffix="abs")
    # |x| < inf is false for NaN too: exactly isfinite.
    return ctx.emit("lt" if kind == "aten::isfinite" else "eq", [a, math.inf])


@handler("aten::signbit", args="t")
def signbit(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::signbit(Tensor self) -> Tensor  (negative, or -0.0)"""
    if x.dtype == "bool":
        return _all(ctx, x, False)
    c = m.Calc(ctx, x.dtype)
    return c.result(m.signbit(c, x))


@handler("aten::isclose", args="t t f f b")
def isclose(ctx: OpContext, a: NTensor, b: NTensor, rtol: float, atol: float, equal_nan: bool) -> NTensor:
    """aten::isclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> Tensor

    torch's rule: ``a == b``, or ``|a - b|`` finite and ``<= atol + |rtol * b|``; NaNs equal
    with ``equal_nan``."""
    dtype = promote([a, b])
    c = m.Calc(ctx, dtype if dtype in FLOAT_DTYPES else "f32")
    a, b = c.inputs(a, b)
    close = c("eq", a, b)
    if equal_nan and dtype in FLOAT_DTYPES:
        close = c("or", close, c("and", m.is_nan(c, a), m.is_nan(c, b)))
    if rtol == 0 and atol == 0:
        return c.result(close)
    error = c("abs", c("sub", a, b))
    allowed = c("add", c("abs", c("mul", b, rtol)), atol)
    within = c("and", c("lt", error, math.inf), c("le", error, allowed))
    return c.out("or", close, within)


@handler("aten::nan_to_num", args="t f? f? f?")
def nan_to_num(ctx: OpContext, x: NTensor, nan: float | None, posinf: float | None, neginf: float | None) -> NTensor:
    """aten::nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor

    NaN -> ``nan`` (0), +inf -> ``posinf``, -inf -> ``neginf`` (the dtype's largest finite
    values by default)."""
    if x.dtype not in FLOAT_DTYPES:
        return ctx.emit("copy", [x])
    info = torch.finfo(torch_dtype(x.dtype))
    c = m.Calc(ctx, x.dtype)
    y = c.select(c("eq", x, math.inf), float(info.max) if posinf is None else posinf, x)
    y = c.select(c("eq", x, -math.inf), float(info.min) if neginf is None else neginf, y)
    return c.out("select", m.is_nan(c, x), c.lit(0.0 if nan is None else nan), y)

