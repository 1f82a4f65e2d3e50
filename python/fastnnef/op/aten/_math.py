"""Numeric building blocks of the special-function, loss, distance and cumulative families.

``Calc`` emits one node's intermediate elementwise ops tersely (``c("add", x, 1.0)``) and its
output op with the traced dtype (``c.out(...)``). The functions below it build, from
elementwise NNEF ops, the functions tract has no primitive for (lgamma, digamma, erfc,
erfinv, modified Bessel functions...). Each approximation is chosen to stay within tract's
``approximate`` tolerance of torch (relative error about 1e-6 or better in f32) over the whole
range torch defines; the tests of op/aten/special.py sweep those ranges. They are of single
precision grade: f64 inputs get the same accuracy, well within that tolerance, not f64's.

Float formulas of f16 tensors are computed in f32 and rounded once at the end, as torch's CPU
kernels do (``float_compute``): f16 intermediates would overflow (``x*x`` past 256) or lose
the digits a cancellation needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.op_table import infer
from fastnnef.op.aten._common import Operand, operands, torch_dtype, typed_scalar
from fastnnef.op.context import FLOAT_DTYPES, OpContext

Scalar = int | float | bool


def float_compute(ctx: OpContext) -> str:
    """The dtype a float formula of this node is computed in: the output's float type,
    with f16 (and non-float outputs of float formulas) widened to f32."""
    out = ctx.out_dtype()
    return out if out in ("f32", "f64") else "f32"


class Calc:
    """Intermediate ops of one node, computed in ``dtype`` (a float type, or the node's
    integer type for integer formulas)."""

    def __init__(self, ctx: OpContext, dtype: str):
        self.ctx = ctx
        self.dtype = dtype

    def __call__(self, kind: str, *args: Any, **attrs: Any) -> NTensor:
        """``kind(args, attrs)`` as an intermediate op (dtype and shape from its rule)."""
        return self.ctx.tmp(kind, list(args), attrs or None, suffix=kind.replace("tract_core_", ""))

    def out(self, kind: str, *args: Any, **attrs: Any) -> NTensor:
        """``kind(args, attrs)`` as the node's output; computed in another dtype than the
        traced output, it is an intermediate followed by a cast."""
        derived = infer(kind, list(args), dict(attrs))
        if derived is not None and derived[0] != self.ctx.out_dtype():
            return self.ctx.emit("tract_core_cast", [self(kind, *args, **attrs)], {"to": self.ctx.out_dtype()})
        return self.ctx.emit(kind, list(args), attrs or None)

    def result(self, t: NTensor, out: int = 0) -> NTensor:
        """An already computed ``t`` as node output ``out`` (a cast where dtypes differ)."""
        dtype = self.ctx.out_dtype(out)
        if t.dtype == dtype:
            return self.ctx.emit("copy", [t], out=out)
        return self.ctx.emit("tract_core_cast", [t], {"to": dtype}, out=out)

    def inputs(self, *values: Operand, rank: int = -1) -> list[Any]:
        """``values`` cast to the compute dtype and aligned to ``rank`` (default: the
        output's rank); numbers become literals of that dtype."""
        rank = len(self.ctx.out_shape()) if rank < 0 else rank
        return operands(self.ctx, list(values), self.dtype, rank)

    def lit(self, value: Scalar, dtype: str = "") -> Any:
        """``value`` as an operand ``select`` accepts in ``dtype`` (default: compute dtype)."""
        return typed_scalar(self.ctx, value, dtype or self.dtype)

    def select(self, cond: NTensor, a: Any, b: Any) -> NTensor:
        """``cond ? a : b``, numbers typed like the tensor branch (or the compute dtype)."""
        tensors = [t for t in (a, b) if isinstance(t, NTensor)]
        dtype = tensors[0].dtype if tensors else self.dtype
        a = a if isinstance(a, NTensor) else self.lit(a, dtype)
        b = b if isinstance(b, NTensor) else self.lit(b, dtype)
        if tensors:
            return self("select", cond, a, b)
        return self.ctx.tmp("select", [cond, a, b], dtype=dtype, shape=cond.shape, suffix="select")

    def constant(self, value: float, dtype: str = "") -> NTensor:
        """A 0-d tensor holding ``value`` (NaN, which no NNEF literal can write; a number
        that a formula needs as a tensor)."""
        dtype = dtype or self.dtype
        return self.ctx.constant(torch.tensor(value, dtype=torch_dtype(dtype)), label=f"fastnnef_{value}_{dtype}")

    def poly(self, t: NTensor, coeffs: Sequence[float]) -> NTensor:
        """``coeffs[0] + coeffs[1]*t + ...`` by Horner's rule."""
        acc = self("add", self("mul", t, coeffs[-1]), coeffs[-2])
        for c in reversed(coeffs[:-2]):
            acc = self("add", self("mul", acc, t), c)
        return acc


# --- classification ---------------------------------------------------------------------
def is_nan(c: Calc, x: NTensor) -> NTensor:
    """NaN test: ``tract_core_is_nan`` for tract, ``x != x`` in strict NNEF; never for
    integers and bools."""
    if x.dtype not in FLOAT_DTYPES:
        return nothing(c, x)
    return c("ne", x, x) if c.ctx.strict else c("tract_core_is_nan", x)


def nothing(c: Calc, x: NTensor) -> NTensor:
    """An all-false bool tensor shaped like ``x`` (which holds no NaN, no infinity)."""
    if x.dtype == "bool":
        return c("and", x, c("not", x))
    return c("ne", x, x)


def signbit(c: Calc, x: NTensor) -> NTensor:
    """The sign bit of ``x``: negative, or a negative zero (``1/-0.0`` is ``-inf``)."""
    neg = c("lt", x, 0.0 if x.dtype in FLOAT_DTYPES else 0)
    if x.dtype not in FLOAT_DTYPES:
        return neg
    neg_zero = c("and", c("eq", x, 0.0), c("lt", c("recip", x), 0.0))
    return c("or", neg, neg_zero)


def trunc(c: Calc, x: NTensor) -> NTensor:
    """Rounding toward zero (NNEF has floor and ceil only)."""
    return c("select", c("lt", x, 0.0), c("ceil", x), c("floor", x))


# --- logarithms -----------------------------------------------------------------------------
def log1p(c: Calc, x: NTensor) -> NTensor:
    """``log(1 + x)`` accurate for tiny ``x``: ``log(u) * x / (u - 1)`` with ``u = 1 + x``
    cancels the rounding of ``u`` (Goldberg); ``x`` itself where ``u`` rounds to 1, and
    ``log(u)`` where ``u - 1`` is exact (large and infinite ``x``)."""
    u = c("add", x, 1.0)
    d = c("sub", u, 1.0)
    scaled = c("mul", c("log", u), c.select(c("eq", d, x), 1.0, c("div", x, d)))
    return c("select", c("eq", d, 0.0), x, scaled)


def expm1(c: Calc, x: NTensor) -> NTensor:
    """``exp(x) - 1`` accurate for tiny ``x``: ``(u - 1) * x / log(u)`` with ``u = exp(x)``
    (Kahan); ``x`` where ``u`` rounds to 1, and ``u - 1`` where ``log(u)`` is exact (large or
    infinite ``x``, and ``u = 0``)."""
    u = c("exp", x)
    d = c("sub", u, 1.0)
    lu = c("log", u)
    scaled = c("mul", d, c.select(c("eq", lu, x), 1.0, c("div", x, lu)))
    return c("select", c("eq", u, 1.0), x, c("select", c("eq", d, -1.0), d, scaled))


def log_add_exp(c: Calc, a: NTensor, b: NTensor) -> NTensor:
    """``log(exp(a) + exp(b))`` without overflow; equal infinities give themselves."""
    d = c.select(c("eq", a, b), 0.0, c("abs", c("sub", a, b)))
    return c("add", c("max", a, b), c("log", c("add", c("exp", c("neg", d)), 1.0)))


def softplus(c: Calc, x: NTensor) -> NTensor:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log(1 + exp(-|x|))``."""
    tail = c("log", c("add", c("exp", c("neg", c("abs", x))), 1.0))
    return c("add", c("max", x, 0.0), tail)


# --- gamma family ---------------------------------------------------------------------------
# Lanczos approximation, g = 7, n = 9 (Godfrey's coefficients): relative error below 1e-13
# for Re(z) >= 0.5 in exact arithmetic, so f32 rounding dominates.
_LANCZOS_G = 7.0
_LANCZOS = (
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
    1.5056327351493116e-7,
)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _reduced_pi(c: Calc, x: NTensor) -> NTensor:
    """``pi * (x - round(x))``: the argument of sin/tan with the period removed exactly
    (``x - round(x)`` is exact in floating point), so large ``x`` keep their digits."""
    return c("mul", c("sub", x, c("round", x)), math.pi)


def lgamma(c: Calc, x: NTensor) -> NTensor:
    """``log|Gamma(x)|`` for every real ``x``: Lanczos for ``x >= 0.5``, the reflection
    ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` below (inf at the poles 0, -1, -2...)."""
    small = c("lt", x, 0.5)
    z = c("select", small, c("sub", 1.0, x), x)
    w = c("sub", z, 1.0)
    series = c("add", c("div", _LANCZOS[1], c("add", w, 1.0)), _LANCZOS[0])
    for k, p in enumerate(_LANCZOS[2:], start=2):
        series = c("add", series, c("div", p, c("add", w, float(k))))
    t = c("add", w, _LANCZOS_G + 0.5)
    log_z = c("add", c("sub", c("mul", c("add", w, 0.5), c("log", t)), t), c("log", series))
    log_z = c("add", log_z, _HALF_LOG_2PI)
    sin = c("abs", c("sin", _reduced_pi(c, x)))
    reflected = c("sub", c("sub", math.log(math.pi), c("log", sin)), log_z)
    return c("select", small, reflected, log_z)


# Asymptotic series of digamma: log z - 1/(2z) - sum B_2k / (2k z^2k), k = 1..4.
_DIGAMMA_SERIES = (-1.0 / 12, 1.0 / 120, -1.0 / 252, 1.0 / 240)
_DIGAMMA_SHIFT = 6


def digamma(c: Calc, x: NTensor) -> NTensor:
    """``digamma(x)``: the recurrence ``psi(z) = psi(z + 6) - sum 1/(z + k)`` brings the
    argument where the asymptotic series is exact to f32, and the reflection
    ``psi(x) = psi(1 - x) - pi / tan(pi x)`` covers ``x < 0``. Like torch: ``-inf`` at
    ``0.0``, ``+inf`` at ``-0.0``, NaN at the negative integers."""
    neg = c("lt", x, 0.0)
    z = c("select", neg, c("sub", 1.0, x), x)
    w = c("add", z, float(_DIGAMMA_SHIFT))
    inv2 = c("recip", c("sqr", w))
    tail = c("mul", inv2, c.poly(inv2, _DIGAMMA_SERIES))
    psi = c("add", c("sub", c("log", w), c("div", 0.5, w)), tail)
    for k in range(_DIGAMMA_SHIFT):
        psi = c("sub", psi, c("recip", c("add", z, float(k))) if k else c("recip", z))
    r = _reduced_pi(c, x)
    reflected = c("sub", psi, c("div", math.pi, c("tan", r)))
    out = c("select", neg, reflected, psi)
    pole = c("and", neg, c("eq", r, 0.0))
    return c("select", pole, c.constant(math.nan), out)


# --- error function family ------------------------------------------------------------------
# Numerical Recipes' erfcc: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0, with a
# fractional error below 1.2e-7 everywhere (so also in the far tail, where 1 - erf fails).
_ERFC = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
    1.48851587, -0.82215223, 0.17087277,
)


def log_erfc_abs(c: Calc, z: NTensor) -> tuple[NTensor, NTensor]:
    """``(log(erfc(|z|)) + |z|^2, |z|)``: the scaled logarithm, finite for any ``z``."""
    a = c("abs", z)
    t = c("recip", c("add", c("mul", a, 0.5), 1.0))
    return c("add", c("log", t), c.poly(t, _ERFC)), a


def erfc(c: Calc, x: NTensor) -> NTensor:
    """``erfc(x)``, with full relative precision in the tail; ``2 - erfc(-x)`` for ``x < 0``."""
    scaled, a = log_erfc_abs(c, x)
    tail = c("exp", c("sub", scaled, c("sqr", a)))
    return c("select", c("lt", x, 0.0), c("sub", 2.0, tail), tail)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision:
# central polynomial in w - 2.5 for w = -log(1 - x^2) < 5, tail polynomial in sqrt(w) - 3.
_ERFINV_CENTER = (
    1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
    -3.5233877e-06, 3.43273939e-07, 2.81022636e-08,
)
_ERFINV_TAIL = (
    2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
    0.00134934322, 0.000100950558, -0.000200214257,
)


def erfinv_core(c: Calc, x: NTensor, w: NTensor) -> NTensor:
    """``erfinv(x)`` given ``w = -log((1 - x)(1 + x))`` (callers that know ``1 - x^2``
    more precisely than ``x`` pass it); ``+-inf`` at ``+-1``, NaN outside ``[-1, 1]``."""
    center = c.poly(c("sub", w, 2.5), _ERFINV_CENTER)
    tail = c.poly(c("sub", c("sqrt", w), 3.0), _ERFINV_TAIL)
    y = c("mul", c("select", c("lt", w, 5.0), center, tail), x)
    return c("select", c("eq", w, math.inf), c("mul", x, math.inf), y)


def erfinv(c: Calc, x: NTensor) -> NTensor:
    w = c("neg", c("log", c("mul", c("sub", 1.0, x), c("add", x, 1.0))))
    return erfinv_core(c, x, w)


_GILES_RANGE = 16.0  # w = -log(1 - x^2) stays below this for every f32 x in (-1, 1)


def ndtri(c: Calc, p: NTensor) -> NTensor:
    """The standard normal quantile. On the lower half (``q = min(p, 1 - p)``, the upper
    half by symmetry, ``1 - p`` being exact there): ``sqrt 2 erfinv(2q - 1)`` with
    ``1 - x^2`` taken as ``4q(1 - q)``; below the range of Giles' polynomials (``q`` under
    about 1e-7) the asymptotic ``-sqrt(L - log L - log 2 pi)``, ``L = -2 log q``, refined by
    two Newton steps on ``log ndtr(x) = log q``."""
    q = c("min", p, c("sub", 1.0, p))
    log_q = c("log", q)
    w = c("neg", c("log", c("mul", c("mul", q, 4.0), c("sub", 1.0, q))))
    central = c("mul", erfinv_core(c, c("sub", c("mul", q, 2.0), 1.0), w), math.sqrt(2.0))
    big_l = c("mul", log_q, -2.0)
    x = c("neg", c("sqrt", c("sub", c("sub", big_l, c("log", big_l)), math.log(2 * math.pi))))
    for _ in range(2):
        # For x <= 0: log ndtr(x) = log(erfc(|x|/sqrt 2) / 2), and ndtr/pdf = sqrt(pi/2) exp(scaled).
        scaled, a = log_erfc_abs(c, c("mul", x, math.sqrt(0.5)))
        log_cdf = c("add", c("sub", scaled, c("sqr", a)), math.log(0.5))
        ratio = c("mul", c("exp", scaled), math.sqrt(math.pi / 2))
        x = c("sub", x, c("mul", c("sub", log_cdf, log_q), ratio))
    lower = c("select", c("lt", w, _GILES_RANGE), central, x)
    lower = c.select(c("eq", q, 0.0), -math.inf, lower)
    return c("select", c("gt", p, 0.5), c("neg", lower), lower)


# --- modified Bessel functions of the first kind ----------------------------------------------
# Abramowitz & Stegun 9.8.1-9.8.4: polynomials in t = x / 3.75 for |x| <= 3.75 (relative
# error < 2e-7), and for sqrt(x) exp(-x) I(x) in 3.75 / x above (absolute < 2.2e-7 on ~0.4).
_BESSEL_T = 3.75
_I0_SMALL = (1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813)
_I0_LARGE = (
    0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706, 0.02635537,
    -0.01647633, 0.00392377,
)
_I1_SMALL = (0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411)
_I1_LARGE = (
    0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967, -0.02895312,
    0.01787654, -0.00420059,
)


def bessel_i(c: Calc, x: NTensor, order: int, scaled: bool) -> NTensor:
    """``I0``/``I1`` of ``x`` (``order``), times ``exp(-|x|)`` when ``scaled`` (i0e, i1e).
    The unscaled large branch is ``exp(|x|) * P / sqrt|x|``, which overflows where torch's
    does (``exp(|x|)`` past 88.7 in f32, though ``I0(89)`` itself is finite)."""
    a = c("abs", x)
    small_poly = c.poly(c("sqr", c("div", x, _BESSEL_T)), _I0_SMALL if order == 0 else _I1_SMALL)
    if order == 1:
        small_poly = c("mul", small_poly, x)
    if scaled:
        small_poly = c("mul", small_poly, c("exp", c("neg", a)))
    big = c("max", a, _BESSEL_T)  # both branches are evaluated: keep this one finite
    large_poly = c("div", c.poly(c("div", _BESSEL_T, big), _I0_LARGE if order == 0 else _I1_LARGE), c("sqrt", big))
    large = large_poly if scaled else c("mul", c("exp", big), large_poly)
    if order == 1:
        large = c("mul", large, c("sign", x))
    return c("select", c("le", a, _BESSEL_T), small_poly, large)


# --- norms ------------------------------------------------------------------------------------
def norm(c: Calc, x: NTensor, p: float, axes: Sequence[int]) -> NTensor:
    """The ``p``-norm of ``x`` over ``axes`` (kept as size 1), as torch's vector_norm:
    ``p`` = 0 counts non-zeros, +-inf take the largest/smallest magnitude."""
    if p == 2:
        return c("sqrt", c("sum_reduce", c("sqr", x), axes=list(axes)))
    if p == 0:
        nonzero = c("tract_core_cast", c("ne", x, 0.0), to=x.dtype)
        return c("sum_reduce", nonzero, axes=list(axes))
    a = c("abs", x)
    if p == 1:
        return c("sum_reduce", a, axes=list(axes))
    if math.isinf(p):
        return c("max_reduce" if p > 0 else "min_reduce", a, axes=list(axes))
    return c("pow", c("sum_reduce", c("pow", a, float(p)), axes=list(axes)), 1.0 / p)


def log_softmax(c: Calc, x: NTensor, axis: int) -> NTensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (plain NNEF)."""
    shifted = c("sub", x, c("max_reduce", x, axes=[axis]))
    return c("sub", shifted, c("log", c("sum_reduce", c("exp", shifted), axes=[axis])))
