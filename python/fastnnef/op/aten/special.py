"""Special functions: the gamma family (lgamma, digamma, mvlgamma), the error-function
family (erfc, erfinv, ndtr, ndtri, log_ndtr, erfcx), modified Bessel functions (i0, i1 and
their exponentially scaled forms), sinc, logit, entr, xlogy, xlog1py.

tract has none of these (except erf): each is an approximation built from elementwise ops in
op/aten/_math.py, computed in f32 for f16 and integer inputs (torch returns floats).
"""

from __future__ import annotations

import math

import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten import _math as m
from fastnnef.op.aten._common import Operand, torch_dtype
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _calc(ctx: OpContext, *values: Operand) -> tuple[m.Calc, list[NTensor]]:
    """A float ``Calc`` for the node and its inputs as tensors of the compute dtype (numbers
    become 0-d constants: the formulas need tensors to test them)."""
    c = m.Calc(ctx, m.float_compute(ctx))
    tensors = [v if isinstance(v, NTensor) else c.constant(float(v)) for v in values]
    return c, c.inputs(*tensors)


# --- gamma family -------------------------------------------------------------------------
@handler("aten::lgamma", "aten::special_gammaln", args="t")
def lgamma(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::lgamma(Tensor self) -> Tensor"""
    c, (x,) = _calc(ctx, x)
    return c.result(m.lgamma(c, x))


@handler("aten::digamma", "aten::special_digamma", "aten::special_psi", args="t")
def digamma(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::digamma(Tensor self) -> Tensor"""
    c, (x,) = _calc(ctx, x)
    return c.result(m.digamma(c, x))


@handler("aten::mvlgamma", "aten::special_multigammaln", args="t i")
def mvlgamma(ctx: OpContext, x: NTensor, p: int) -> NTensor:
    """aten::mvlgamma(Tensor self, int p) -> Tensor  (sum of lgamma(x - i/2), i < p, + p(p-1)/4 log pi)"""
    if p < 1:
        raise ctx.unsupported(f"mvlgamma with p={p}", "torch requires p >= 1")
    c, (x,) = _calc(ctx, x)
    # The p shifted arguments side by side on a new last axis: one lgamma, one sum.
    shifts = torch.arange(p, dtype=torch.float64).mul(-0.5).to(torch_dtype(c.dtype))
    offsets = c.ctx.constant(shifts.reshape([1] * x.rank + [p]))
    shifted = c("add", c("unsqueeze", x, axes=[x.rank]), offsets)
    total = c("squeeze", c("sum_reduce", m.lgamma(c, shifted), axes=[x.rank]), axes=[x.rank])
    return c.out("add", total, p * (p - 1) / 4 * math.log(math.pi))


# --- error function family ------------------------------------------------------------------
@handler("aten::erfc", "aten::special_erfc", args="t")
def erfc(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::erfc(Tensor self) -> Tensor"""
    c, (x,) = _calc(ctx, x)
    return c.result(m.erfc(c, x))


@handler("aten::special_erfcx", args="t")
def erfcx(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::special_erfcx(Tensor self) -> Tensor  (exp(x^2) erfc(x), finite for large x)"""
    c, (x,) = _calc(ctx, x)
    scaled, _ = m.log_erfc_abs(c, x)
    positive = c("exp", scaled)
    negative = c("sub", c("mul", c("exp", c("sqr", x)), 2.0), positive)
    return c.out("select", c("lt", x, 0.0), negative, positive)


@handler("aten::erfinv", "aten::special_erfinv", args="t")
def erfinv(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::erfinv(Tensor self) -> Tensor"""
    c, (x,) = _calc(ctx, x)
    return c.result(m.erfinv(c, x))


@handler("aten::special_ndtr", args="t")
def ndtr(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::special_ndtr(Tensor self) -> Tensor  (the standard normal CDF, erfc(-x/sqrt 2)/2)"""
    c, (x,) = _calc(ctx, x)
    return c.out("mul", m.erfc(c, c("mul", x, -math.sqrt(0.5))), 0.5)


@handler("aten::special_log_ndtr", args="t")
def log_ndtr(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::special_log_ndtr(Tensor self) -> Tensor  (log of the normal CDF, in log space
    for x < 0 so the far tail stays finite)"""
    c, (x,) = _calc(ctx, x)
    scaled, a = m.log_erfc_abs(c, c("mul", x, math.sqrt(0.5)))
    log_tail = c("sub", scaled, c("sqr", a))  # log erfc(|x| / sqrt 2)
    negative = c("add", log_tail, math.log(0.5))
    positive = m.log1p(c, c("mul", c("exp", log_tail), -0.5))
    return c.out("select", c("lt", x, 0.0), negative, positive)


@handler("aten::special_ndtri", args="t")
def ndtri(ctx: OpContext, p: NTensor) -> NTensor:
    """aten::special_ndtri(Tensor self) -> Tensor  (the standard normal quantile)"""
    c, (p,) = _calc(ctx, p)
    return c.result(m.ndtri(c, p))


# --- Bessel functions ---------------------------------------------------------------------------
_BESSEL = {
    "aten::i0": (0, False), "aten::special_i0": (0, False), "aten::special_i0e": (0, True),
    "aten::special_i1": (1, False), "aten::special_i1e": (1, True),
}


@handler(*_BESSEL, args="t")
def bessel(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::i0(Tensor self) -> Tensor  (also special_i0e, special_i1, special_i1e)"""
    order, scaled = _BESSEL[ctx.kind]
    c, (x,) = _calc(ctx, x)
    return c.result(m.bessel_i(c, x, order, scaled))


# --- others ------------------------------------------------------------------------------------
@handler("aten::sinc", "aten::special_sinc", args="t")
def sinc(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::sinc(Tensor self) -> Tensor  (sin(pi x) / (pi x), 1 at 0: torch's own formula)"""
    c, (x,) = _calc(ctx, x)
    px = c("mul", x, math.pi)
    return c.out("select", c("eq", x, 0.0), c.lit(1.0), c("div", c("sin", px), px))


@handler("aten::logit", "aten::special_logit", args="t f?")
def logit(ctx: OpContext, x: NTensor, eps: float | None) -> NTensor:
    """aten::logit(Tensor self, float? eps=None) -> Tensor  (log(z / (1 - z)), z = x clamped to [eps, 1 - eps])"""
    c, (x,) = _calc(ctx, x)
    if eps is not None:
        x = c("min", c("max", x, eps), 1.0 - eps)
    return c.out("log", c("div", x, c("sub", 1.0, x)))


@handler("aten::special_entr", args="t")
def entr(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::special_entr(Tensor self) -> Tensor  (-x log x; 0 at 0, -inf below)"""
    c, (x,) = _calc(ctx, x)
    value = c.select(c("eq", x, 0.0), 0.0, c("neg", c("mul", x, c("log", x))))
    return c.out("select", c("lt", x, 0.0), c.lit(-math.inf), value)


def _xlog(ctx: OpContext, x: Operand, y: Operand, one_plus: bool) -> NTensor:
    """``x * log(y)`` (or ``log1p(y)``), 0 where ``x == 0`` unless ``y`` is NaN."""
    c, (x, y) = _calc(ctx, x, y)
    log = m.log1p(c, y) if one_plus else c("log", y)
    zero = c("and", c("eq", x, 0.0), c("not", m.is_nan(c, y)))
    return c.out("select", zero, c.lit(0.0), c("mul", x, log))


@handler("aten::xlogy", "aten::special_xlogy", args="x x")
def xlogy(ctx: OpContext, x: Operand, y: Operand) -> NTensor:
    """aten::xlogy.Tensor(Tensor self, Tensor other) -> Tensor  (also .Scalar_Self, .Scalar_Other)"""
    return _xlog(ctx, x, y, one_plus=False)


@handler("aten::special_xlog1py", args="x x")
def xlog1py(ctx: OpContext, x: Operand, y: Operand) -> NTensor:
    """aten::special_xlog1py(Tensor self, Tensor other) -> Tensor  (also the Scalar overloads)"""
    return _xlog(ctx, x, y, one_plus=True)
