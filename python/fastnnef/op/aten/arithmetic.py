"""Elementwise math: binary arithmetic, comparisons, logic, unary functions."""

from __future__ import annotations

import math

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten import _math
from fastnnef.op.aten._common import Operand, elementwise, operands, promote
from fastnnef.op.aten._common import erf as erf_of
from fastnnef.op.aten._math import Calc, float_compute
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

# Integer dtypes tract's pow has no kernel for (it has i32 and i64).
_NARROW_INTS = frozenset({"i8", "i16", "u8"})


def _scaled(ctx: OpContext, value: Operand, alpha: float) -> Operand:
    if alpha == 1:
        return value
    if isinstance(value, NTensor):
        (v,) = operands(ctx, [value], ctx.out_dtype(), value.rank)
        return ctx.tmp("mul", [v, float(alpha) if ctx.out_dtype() in FLOAT_DTYPES else int(alpha)], suffix="alpha")
    return value * alpha


@handler("aten::add", args="x x f?")
def add(ctx: OpContext, a: Operand, b: Operand, alpha: float | None) -> NTensor:
    """aten::add(Tensor self, Tensor other, Scalar alpha=1) -> Tensor  (or on bools)"""
    if ctx.out_dtype() == "bool":  # torch adds bools as a logical or; tract has no bool add
        return ctx.emit("or", _bool_operands(ctx, a, b))
    return elementwise(ctx, "add", [a, _scaled(ctx, b, alpha if alpha is not None else 1)])


@handler("aten::sub", args="x x f?")
def sub(ctx: OpContext, a: Operand, b: Operand, alpha: float | None) -> NTensor:
    """aten::sub(Tensor self, Tensor other, Scalar alpha=1) -> Tensor"""
    return elementwise(ctx, "sub", [a, _scaled(ctx, b, alpha if alpha is not None else 1)])


@handler("aten::rsub", args="x x f?")
def rsub(ctx: OpContext, a: Operand, b: Operand, alpha: float | None) -> NTensor:
    """aten::rsub(Tensor self, Scalar other, Scalar alpha=1) -> Tensor  (other - self*alpha)"""
    return elementwise(ctx, "sub", [b, _scaled(ctx, a, alpha if alpha is not None else 1)])


@handler("aten::mul", "aten::multiply", args="x x")
def mul(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::mul(Tensor self, Tensor other) -> Tensor  (and on bools)"""
    if ctx.out_dtype() == "bool":  # torch multiplies bools as a logical and; tract has no bool mul
        return ctx.emit("and", _bool_operands(ctx, a, b))
    return elementwise(ctx, "mul", [a, b])


@handler("aten::div", "aten::divide", "aten::true_divide", args="x x s?")
def div(ctx: OpContext, a: Operand, b: Operand, rounding_mode: str | None) -> NTensor:
    """aten::div(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor"""
    out = ctx.out_dtype()
    if rounding_mode is None or out in FLOAT_DTYPES and rounding_mode is None:
        return elementwise(ctx, "div", [a, b])
    if out in FLOAT_DTYPES:
        q = ctx.tmp("div", operands(ctx, [a, b], out, len(ctx.out_shape())), suffix="q")
        if rounding_mode == "floor":
            return ctx.emit("floor", [q])
        # trunc: sign(q) * floor(|q|)
        fl = ctx.tmp("floor", [ctx.tmp("abs", [q], suffix="abs")], suffix="floor")
        return ctx.emit("mul", [ctx.tmp("sign", [q], suffix="sign"), fl])
    return _int_div(ctx, a, b, rounding_mode)


def _int_div(ctx: OpContext, a: Operand, b: Operand, mode: str) -> NTensor:
    """Integer division with torch's rounding (tract's integer div truncates)."""
    out = ctx.out_dtype()
    rank = len(ctx.out_shape())
    fa, fb = operands(ctx, [a, b], "f32", rank)
    q = ctx.tmp("div", [fa, fb], suffix="q")
    if mode == "floor":
        r = ctx.tmp("floor", [q], suffix="floor")
    else:
        r = ctx.tmp("mul", [ctx.tmp("sign", [q], suffix="sign"),
                            ctx.tmp("floor", [ctx.tmp("abs", [q], suffix="abs")], suffix="fl")], suffix="trunc")
    return ctx.emit("tract_core_cast", [r], {"to": out})


@handler("aten::floor_divide", args="x x")
def floor_divide(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::floor_divide(Tensor self, Tensor other) -> Tensor"""
    if ctx.out_dtype() in FLOAT_DTYPES:
        rank = len(ctx.out_shape())
        q = ctx.tmp("div", operands(ctx, [a, b], ctx.out_dtype(), rank), suffix="q")
        return ctx.emit("floor", [q])
    return _int_div(ctx, a, b, "floor")


@handler("aten::remainder", args="x x")
def remainder(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::remainder(Tensor self, Tensor other) -> Tensor  (a - floor(a/b)*b, sign of b)"""
    out = ctx.out_dtype()
    rank = len(ctx.out_shape())
    compute = out if out in FLOAT_DTYPES else "f32"
    fa, fb = operands(ctx, [a, b], compute, rank)
    q = ctx.tmp("floor", [ctx.tmp("div", [fa, fb], suffix="q")], suffix="fl")
    r = ctx.tmp("sub", [fa, ctx.tmp("mul", [q, fb], suffix="qb")], suffix="r")
    return ctx.emit("tract_core_cast", [r], {"to": out}) if compute != out else ctx.emit("copy", [r])


@handler("aten::pow", args="x x")
def pow_(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::pow(Tensor self, Tensor exponent) -> Tensor"""
    if isinstance(b, (int, float)) and isinstance(a, NTensor):
        if b == 2:
            return elementwise(ctx, "sqr", [a])
        if b == 0.5:
            return elementwise(ctx, "sqrt", [a])
        if b == 1:
            return elementwise(ctx, "copy", [a])
    out = ctx.out_dtype()
    if out in _NARROW_INTS:  # tract's pow has no kernel for these: compute in i32, wrap back as torch does
        wide = ctx.tmp("pow", operands(ctx, [a, b], "i32", len(ctx.out_shape())), suffix="i32")
        return ctx.emit("tract_core_cast", [wide], {"to": out})
    return elementwise(ctx, "pow", [a, b])


for _aten, _nnef in (("maximum", "max"), ("minimum", "min"), ("fmax", "max"), ("fmin", "min")):
    def _make(aten: str, kind: str) -> None:
        @handler(f"aten::{aten}", args="x x")
        def _minmax(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
            """aten::maximum/minimum(Tensor self, Tensor other) -> Tensor"""
            if ctx.out_dtype() == "bool":
                return bool_logic(ctx, kind, a, b)
            return elementwise(ctx, kind, [a, b])
    _make(_aten, _nnef)

for _aten, _nnef in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("gt", "gt"), ("le", "le"), ("ge", "ge"),
                     ("greater", "gt"), ("less", "lt"), ("greater_equal", "ge"), ("less_equal", "le"),
                     ("not_equal", "ne")):
    def _make_cmp(aten: str, kind: str) -> None:
        @handler(f"aten::{aten}", args="x x")
        def _compare(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
            """aten::eq/ne/lt/gt/le/ge(Tensor self, Tensor other) -> Tensor (bool)"""
            if promote([a, b]) == "bool":
                return bool_logic(ctx, kind, a, b)
            return elementwise(ctx, kind, [a, b], compute=promote([a, b]))
    _make_cmp(_aten, _nnef)


def _bool_operands(ctx: OpContext, a: Operand, b: Operand) -> list[Operand]:
    rank = len(ctx.out_shape())
    out: list[Operand] = []
    for v in (a, b):
        if isinstance(v, NTensor) and v.dtype != "bool":
            v = ctx.tmp("ne", [v, 0.0 if v.dtype in FLOAT_DTYPES else 0], suffix="nz")
        out.append(ctx.to_rank(v, rank) if isinstance(v, NTensor) else bool(v))
    return out


def bool_logic(ctx: OpContext, kind: str, a: Operand, b: Operand) -> NTensor:
    """A comparison, min or max of two bools in and/or/not (plain NNEF): tract compares
    and orders numbers only (false < true, as in torch)."""
    a, b = _bool_operands(ctx, a, b)

    def neg(v: Operand) -> Operand:
        return (not v) if isinstance(v, bool) else ctx.tmp("not", [v], suffix="not")

    def both(x: Operand, y: Operand) -> NTensor:
        return ctx.tmp("and", [x, y], suffix="and")

    forms = {  # (final op, its two operands)
        "eq": ("or", lambda: (both(a, b), both(neg(a), neg(b)))),
        "ne": ("or", lambda: (both(a, neg(b)), both(neg(a), b))),
        "lt": ("and", lambda: (neg(a), b)),
        "gt": ("and", lambda: (a, neg(b))),
        "le": ("or", lambda: (neg(a), b)),
        "ge": ("or", lambda: (a, neg(b))),
        "min": ("and", lambda: (a, b)),
        "max": ("or", lambda: (a, b)),
    }
    op, args = forms[kind]
    return ctx.emit(op, list(args()))


@handler("aten::logical_and", "aten::__and__", "aten::bitwise_and", args="x x")
def logical_and(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::logical_and(Tensor self, Tensor other) -> Tensor  (bitwise on integers)"""
    if ctx.out_dtype() != "bool":
        return elementwise(ctx, "tract_core_bitand", [a, b])
    return ctx.emit("and", _bool_operands(ctx, a, b))


@handler("aten::logical_or", "aten::__or__", "aten::bitwise_or", args="x x")
def logical_or(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::logical_or(Tensor self, Tensor other) -> Tensor  (bitwise on integers)"""
    if ctx.out_dtype() != "bool":
        return elementwise(ctx, "tract_core_bitor", [a, b])
    return ctx.emit("or", _bool_operands(ctx, a, b))


@handler("aten::logical_xor", "aten::__xor__", "aten::bitwise_xor", args="x x")
def logical_xor(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::logical_xor(Tensor self, Tensor other) -> Tensor  (bitwise on integers)"""
    if ctx.out_dtype() != "bool":
        return elementwise(ctx, "tract_core_bitxor", [a, b])
    # tract's ne does not take bools: (a and not b) or (not a and b).
    a, b = _bool_operands(ctx, a, b)
    if not isinstance(a, NTensor) or not isinstance(b, NTensor):
        raise ctx.unsupported("xor with a constant", "use logical_not(x) or x itself")
    not_a = ctx.tmp("not", [a], suffix="na")
    not_b = ctx.tmp("not", [b], suffix="nb")
    left = ctx.tmp("and", [a, not_b], suffix="l")
    right = ctx.tmp("and", [not_a, b], suffix="r")
    return ctx.emit("or", [left, right])


@handler("aten::logical_not", "aten::bitwise_not", args="t")
def logical_not(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::logical_not(Tensor self) -> Tensor  (bitwise_not on integers: ~x)"""
    if x.dtype != "bool":
        if ctx.out_dtype() != "bool":
            return ctx.emit("tract_core_bitnot", [x])
        x = ctx.tmp("ne", [x, 0.0 if x.dtype in FLOAT_DTYPES else 0], suffix="nz")
    return ctx.emit("not", [x])


@handler("aten::__lshift__", "aten::__rshift__", "aten::bitwise_left_shift", "aten::bitwise_right_shift", args="x x")
def shift(ctx: OpContext, a: Operand, b: Operand) -> NTensor:
    """aten::bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor  (also >>, <<; arithmetic right shift)"""
    dtype = ctx.out_dtype()  # an integer type: torch shifts nothing else
    left = ctx.kind in ("aten::__lshift__", "aten::bitwise_left_shift")
    a, b = operands(ctx, [a, b], dtype, len(ctx.out_shape()))
    return ctx.emit("tract_shl" if left else "tract_shr", [a, b])


# --- unary -----------------------------------------------------------------------------
_UNARY = {
    "neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "floor": "floor", "ceil": "ceil", "sign": "sign", "square": "sqr",
}
for _aten, _nnef in _UNARY.items():
    def _make_unary(kind: str, aten: str) -> None:
        @handler(f"aten::{aten}", args="t")
        def _unary(ctx: OpContext, x: NTensor) -> NTensor:
            """aten::<unary>(Tensor self) -> Tensor"""
            return elementwise(ctx, kind, [x])
    _make_unary(_nnef, _aten)


@handler("aten::reciprocal", args="t")
def reciprocal(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::reciprocal(Tensor self) -> Tensor  (tract's recip; NNEF's rcp, which tract lacks, as 1 / x)"""
    (x,) = operands(ctx, [x], ctx.out_dtype(), x.rank)
    return ctx.emit("div", [1.0, x]) if ctx.strict else ctx.emit("recip", [x])


@handler("aten::erf", "aten::special_erf", args="t")
def erf(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::erf(Tensor self) -> Tensor  (strict NNEF: a rational approximation, |error| < 1.5e-7)"""
    (x,) = operands(ctx, [x], ctx.out_dtype(), x.rank)
    return ctx.emit("copy", [erf_of(ctx, x)]) if ctx.strict else ctx.emit("tract_core_erf", [x])


@handler("aten::round", args="t i?")
def round_(ctx: OpContext, x: NTensor, decimals: int | None) -> NTensor:
    """aten::round(Tensor self) -> Tensor  (also round.decimals; halves go to the even integer)"""
    (x,) = operands(ctx, [x], ctx.out_dtype(), x.rank)
    scale = 10.0 ** decimals if decimals else 1.0
    if scale != 1.0:
        x = ctx.tmp("mul", [x, scale], suffix="scaled")
    if not ctx.strict:
        rounded = ctx.tmp("tract_core_round_even", [x], suffix="round")
    else:  # NNEF's round takes halves away from zero: floor(x + 0.5), minus 1 on odd halves
        up = ctx.tmp("floor", [ctx.tmp("add", [x, 0.5], suffix="half_up")], suffix="up")
        tie = ctx.tmp("eq", [ctx.tmp("sub", [up, x], suffix="gap"), 0.5], suffix="tie")
        half = ctx.tmp("mul", [ctx.tmp("floor", [ctx.tmp("mul", [up, 0.5], suffix="halved")], suffix="pairs"), 2.0],
                       suffix="even")
        odd = ctx.tmp("ne", [up, half], suffix="odd")
        rounded = ctx.tmp("select", [ctx.tmp("and", [tie, odd], suffix="odd_tie"),
                                     ctx.tmp("sub", [up, 1.0], suffix="down"), up], suffix="round")
    if scale != 1.0:
        return ctx.emit("div", [rounded, scale])
    return ctx.emit("copy", [rounded])


@handler("aten::log2", args="t")
def log2(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::log2(Tensor self) -> Tensor"""
    (x,) = operands(ctx, [x], ctx.out_dtype(), x.rank)
    return ctx.emit("div", [ctx.tmp("log", [x]), math.log(2.0)])


@handler("aten::log1p", "aten::special_log1p", args="t")
def log1p(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::log1p(Tensor self) -> Tensor  (accurate for tiny x, see _math.log1p)"""
    c = Calc(ctx, float_compute(ctx))
    (x,) = c.inputs(x)
    return c.result(_math.log1p(c, x))


@handler("aten::expm1", "aten::special_expm1", args="t")
def expm1(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::expm1(Tensor self) -> Tensor  (accurate for tiny x, see _math.expm1)"""
    c = Calc(ctx, float_compute(ctx))
    (x,) = c.inputs(x)
    return c.result(_math.expm1(c, x))
