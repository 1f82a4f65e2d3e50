"""Activations: ReLU family, GELU, SiLU, Mish, Hardswish, Softplus, ELU/SELU/CELU,
log-sigmoid, threshold, clamp, GLU, softmax/log_softmax.

Every formula is written with ops that exist in every tract version the exporter targets
(stdlib + ``tract_core`` unary ops), except where a version gate picks a native op.
Intermediate ops keep the traced output dtype: torch keeps f16 activations in f16.

torch-quantized inputs (op/aten/quantized.py ``torch_quantized``): relu and the clamps
run on the codes, the others dequantized; the ``quantized::`` activations of converted
modules (nnq.Hardswish, ReLU6, LeakyReLU, Sigmoid, ELU, CELU) reuse the float handlers.
"""

from __future__ import annotations

import math
from typing import Any

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import (
    Operand,
    channel_param,
    elementwise,
    erf,
    literal,
    operands,
    typed_scalar,
)
from fastnnef.op.aten.quantized import (
    SIGMOID_GRID,
    TANH_GRID,
    dequantized,
    is_quantized,
    quantized_output_type,
    torch_quantized,
)
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

# torch.nn.SELU's constants (torch/nn/modules/activation.py docs, the SELU paper).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _input(ctx: OpContext, x: NTensor) -> NTensor:
    return ctx.cast(x, ctx.out_dtype())


@handler("aten::relu", args="t")
@torch_quantized("codes")
def relu(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::relu(Tensor self) -> Tensor"""
    return elementwise(ctx, "relu", [x])


@handler("aten::sigmoid", args="t")
@torch_quantized("dequantize", SIGMOID_GRID)
def sigmoid(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::sigmoid(Tensor self) -> Tensor"""
    return elementwise(ctx, "sigmoid", [x])


@handler("aten::tanh", args="t")
@torch_quantized("dequantize", TANH_GRID)
def tanh(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::tanh(Tensor self) -> Tensor"""
    return elementwise(ctx, "tanh", [x])


# --- clamps ----------------------------------------------------------------------------
def _clamp(ctx: OpContext, x: NTensor, lo: Operand | None, hi: Operand | None) -> NTensor:
    """torch.clamp: ``min(max(x, lo), hi)`` (so lo > hi gives hi, as torch does)."""
    if lo is None and hi is None:
        raise ctx.unsupported("clamp with neither min nor max", "give at least one bound")
    if is_quantized(x):
        if isinstance(lo, NTensor) or isinstance(hi, NTensor):
            return dequantized(ctx, _clamp, x, lo, hi, out_type=x.dtype)
        # On the codes: tract quantizes the bounds to x's grid, as torch's quantized clamp.
        limits = [float(b) for b in (lo, hi) if b is not None]
        if len(limits) == 2:
            return ctx.emit("min", [ctx.tmp("max", [x, limits[0]], suffix="lo"), limits[1]])
        return ctx.emit("max" if lo is not None else "min", [x, limits[0]])
    dtype = ctx.out_dtype()
    rank = len(ctx.out_shape())
    (x,) = operands(ctx, [x], dtype, rank)
    bounds = operands(ctx, [b for b in (lo, hi) if b is not None], dtype, rank)
    lo_op = bounds.pop(0) if lo is not None else None
    hi_op = bounds.pop(0) if hi is not None else None
    if lo_op is not None and hi_op is not None:
        return ctx.emit("min", [ctx.tmp("max", [x, lo_op], suffix="lo"), hi_op])
    return ctx.emit("max", [x, lo_op]) if lo_op is not None else ctx.emit("min", [x, hi_op])


@handler("aten::clamp", "aten::clip", args="t x? x?")
def clamp(ctx: OpContext, x: NTensor, lo: Operand | None, hi: Operand | None) -> NTensor:
    """aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor  (also .Tensor)"""
    return _clamp(ctx, x, lo, hi)


@handler("aten::clamp_min", args="t x")
def clamp_min(ctx: OpContext, x: NTensor, lo: Operand) -> NTensor:
    """aten::clamp_min(Tensor self, Scalar min) -> Tensor  (also .Tensor)"""
    return _clamp(ctx, x, lo, None)


@handler("aten::clamp_max", args="t x")
def clamp_max(ctx: OpContext, x: NTensor, hi: Operand) -> NTensor:
    """aten::clamp_max(Tensor self, Scalar max) -> Tensor  (also .Tensor)"""
    return _clamp(ctx, x, None, hi)


@handler("aten::hardtanh", args="t f f")
def hardtanh(ctx: OpContext, x: NTensor, lo: float, hi: float) -> NTensor:
    """aten::hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    return _clamp(ctx, x, lo, hi)


@handler("aten::relu6", args="t")
def relu6(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::relu6(Tensor self) -> Tensor"""
    return _clamp(ctx, x, 0.0, 6.0)


@handler("quantized::relu6", args="t b?")
def quantized_relu6(ctx: OpContext, x: NTensor, inplace: bool | None) -> NTensor:
    """quantized::relu6(Tensor qx, bool inplace=False) -> Tensor  (x's grid)"""
    return _clamp(ctx, x, 0.0, 6.0)


@handler("quantized::clamp", args="t x? x?")
def quantized_clamp(ctx: OpContext, x: NTensor, lo: Operand | None, hi: Operand | None) -> NTensor:
    """quantized::clamp(Tensor qx, Scalar? min=None, Scalar? max=None) -> Tensor qy  (x's grid)"""
    return _clamp(ctx, x, lo, hi)


@handler("aten::threshold", args="t f f")
@torch_quantized("dequantize")
def threshold(ctx: OpContext, x: NTensor, th: float, value: float) -> NTensor:
    """aten::threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor  (x > th ? x : value)"""
    x = _input(ctx, x)
    keep = ctx.tmp("gt", [x, literal(th, x.dtype)], suffix="keep")
    return ctx.emit("select", [keep, x, typed_scalar(ctx, value, x.dtype)])


# --- ReLU variants ---------------------------------------------------------------------
@handler("aten::leaky_relu", args="t f?")
@torch_quantized("dequantize")
def leaky_relu(ctx: OpContext, x: NTensor, slope: float | None) -> NTensor:
    """aten::leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    return ctx.emit("leaky_relu", [_input(ctx, x)], {"alpha": 0.01 if slope is None else float(slope)})


@handler("aten::prelu", "aten::_prelu_kernel", args="t t")
def prelu(ctx: OpContext, x: NTensor, weight: NTensor) -> NTensor:
    """aten::prelu(Tensor self, Tensor weight) -> Tensor  (weight: 1 value or one per channel, dim 1)"""
    x = _input(ctx, x)
    w = ctx.cast(weight, x.dtype)
    if weight.rank != 1:
        raise ctx.unsupported(f"prelu weight of rank {weight.rank}", "use nn.PReLU (a 1-D weight)")
    if weight.shape[0] != 1 and x.rank >= 2:
        w = channel_param(ctx, w, x.rank)
    else:
        w = ctx.to_rank(w, x.rank)
    neg = ctx.tmp("lt", [x, literal(0, x.dtype)], suffix="neg")
    return ctx.emit("select", [neg, ctx.tmp("mul", [x, w], suffix="scaled"), x])


# --- smooth activations ----------------------------------------------------------------
@handler("aten::gelu", args="t s?")
@torch_quantized("dequantize")
def gelu(ctx: OpContext, x: NTensor, approximate: str | None) -> NTensor:
    """aten::gelu(Tensor self, *, str approximate='none') -> Tensor"""
    x = _input(ctx, x)
    if approximate in (None, "none"):
        # x * 0.5 * (1 + erf(x / sqrt(2)))
        inner = ctx.tmp("mul", [x, 1.0 / math.sqrt(2.0)], suffix="scaled")
        cdf = ctx.tmp("add", [erf(ctx, inner), 1.0], suffix="cdf")
    elif approximate == "tanh":
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
        cube = ctx.tmp("mul", [x, ctx.tmp("mul", [x, x], suffix="sq")], suffix="cube")
        poly = ctx.tmp("add", [x, ctx.tmp("mul", [cube, 0.044715], suffix="c")], suffix="poly")
        inner = ctx.tmp("mul", [poly, math.sqrt(2.0 / math.pi)], suffix="inner")
        cdf = ctx.tmp("add", [ctx.tmp("tanh", [inner], suffix="tanh"), 1.0], suffix="cdf")
    else:
        raise ctx.unsupported(f"gelu approximate={approximate!r}", "use 'none' or 'tanh'")
    return ctx.emit("mul", [ctx.tmp("mul", [x, cdf], suffix="xcdf"), 0.5])


@handler("aten::silu", args="t")
def silu(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::silu(Tensor self) -> Tensor  (x * sigmoid(x))"""
    x = _input(ctx, x)
    return ctx.emit("mul", [x, ctx.tmp("sigmoid", [x], suffix="sig")])


def _softplus(ctx: OpContext, x: NTensor, suffix: str) -> NTensor:
    """log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))."""
    e = ctx.tmp("exp", [ctx.tmp("neg", [ctx.tmp("abs", [x], suffix=f"{suffix}_abs")], suffix=f"{suffix}_nabs")],
                suffix=f"{suffix}_exp")
    tail = ctx.tmp("log", [ctx.tmp("add", [e, 1.0], suffix=f"{suffix}_1p")], suffix=f"{suffix}_log")
    return ctx.tmp("add", [ctx.tmp("max", [x, literal(0, x.dtype)], suffix=f"{suffix}_pos"), tail], suffix=suffix)


@handler("aten::mish", args="t")
def mish(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::mish(Tensor self) -> Tensor  (x * tanh(softplus(x)))"""
    x = _input(ctx, x)
    return ctx.emit("mul", [x, ctx.tmp("tanh", [_softplus(ctx, x, "sp")], suffix="tanh")])


@handler("aten::softplus", args="t f? f?")
def softplus(ctx: OpContext, x: NTensor, beta: float | None, thresh: float | None) -> NTensor:
    """aten::softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor
    (x where beta*x > threshold, else log(1 + exp(beta*x)) / beta)"""
    x = _input(ctx, x)
    beta = 1.0 if beta is None else beta
    thresh = 20.0 if thresh is None else thresh
    bx = x if beta == 1 else ctx.tmp("mul", [x, beta], suffix="bx")
    sp = _softplus(ctx, bx, "sp")
    if beta != 1:
        sp = ctx.tmp("div", [sp, beta], suffix="sp_beta")
    linear = ctx.tmp("gt", [bx, thresh], suffix="linear")
    return ctx.emit("select", [linear, x, sp])


def _elu(ctx: OpContext, x: NTensor, alpha: float, scale: float, input_scale: float) -> NTensor:
    """x > 0 ? scale*x : scale*alpha*(exp(x*input_scale) - 1); exp only sees x <= 0."""
    x = _input(ctx, x)
    neg = ctx.tmp("min", [x, literal(0, x.dtype)], suffix="neg")
    if input_scale != 1:
        neg = ctx.tmp("mul", [neg, input_scale], suffix="in_scale")
    em1 = ctx.tmp("sub", [ctx.tmp("exp", [neg], suffix="exp"), 1.0], suffix="em1")
    low = ctx.tmp("mul", [em1, scale * alpha], suffix="low") if scale * alpha != 1 else em1
    high = ctx.tmp("mul", [x, scale], suffix="high") if scale != 1 else x
    pos = ctx.tmp("gt", [x, literal(0, x.dtype)], suffix="pos")
    return ctx.emit("select", [pos, high, low])


@handler("aten::elu", args="t f? f? f?")
def elu(ctx: OpContext, x: NTensor, alpha: float | None, scale: float | None, input_scale: float | None) -> NTensor:
    """aten::elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    return _elu(ctx, x, 1.0 if alpha is None else alpha, 1.0 if scale is None else scale,
                1.0 if input_scale is None else input_scale)


@handler("aten::selu", args="t")
def selu(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::selu(Tensor self) -> Tensor"""
    return _elu(ctx, x, SELU_ALPHA, SELU_SCALE, 1.0)


@handler("aten::celu", args="t f?")
def celu(ctx: OpContext, x: NTensor, alpha: float | None) -> NTensor:
    """aten::celu(Tensor self, Scalar alpha=1.0) -> Tensor  (elu with input_scale 1/alpha)"""
    alpha = 1.0 if alpha is None else alpha
    if alpha == 0:
        raise ctx.unsupported("celu with alpha=0", "torch itself rejects it")
    return _elu(ctx, x, alpha, 1.0, 1.0 / alpha)


@handler("aten::log_sigmoid", args="t")
def log_sigmoid(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::log_sigmoid(Tensor self) -> Tensor  (-softplus(-x) = min(x, 0) - log(1 + exp(-|x|)))"""
    x = _input(ctx, x)
    e = ctx.tmp("exp", [ctx.tmp("neg", [ctx.tmp("abs", [x], suffix="abs")], suffix="nabs")], suffix="exp")
    tail = ctx.tmp("log", [ctx.tmp("add", [e, 1.0], suffix="1p")], suffix="log")
    return ctx.emit("sub", [ctx.tmp("min", [x, literal(0, x.dtype)], suffix="neg"), tail])


@handler("aten::hardswish", args="t")
def hardswish(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::hardswish(Tensor self) -> Tensor  (x * relu6(x + 3) / 6; tract_core_hard_swish
    computes x * clamp(x/6 + 1/2, 0, 1), the same function)"""
    x = _input(ctx, x)
    if not ctx.strict:
        return ctx.emit("tract_core_hard_swish", [x])
    gate = ctx.tmp("add", [ctx.tmp("div", [x, 6.0], suffix="sixth"), 0.5], suffix="shift")
    return ctx.emit("mul", [x, ctx.tmp("min", [ctx.tmp("max", [gate, 0.0], suffix="lo"), 1.0], suffix="gate")])


@handler("aten::hardsigmoid", args="t")
@torch_quantized("dequantize", SIGMOID_GRID)
def hardsigmoid(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::hardsigmoid(Tensor self) -> Tensor  (relu6(x + 3) / 6)"""
    x = _input(ctx, x)
    shifted = ctx.tmp("add", [x, 3.0], suffix="shift")
    clamped = ctx.tmp("min", [ctx.tmp("max", [shifted, 0.0], suffix="lo"), 6.0], suffix="hi")
    return ctx.emit("div", [clamped, 6.0])


@handler("aten::hardshrink", args="t f?")
def hardshrink(ctx: OpContext, x: NTensor, lambd: float | None) -> NTensor:
    """aten::hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor  (|x| > lambd ? x : 0)"""
    x = _input(ctx, x)
    lambd = 0.5 if lambd is None else lambd
    keep = ctx.tmp("gt", [ctx.tmp("abs", [x], suffix="abs"), lambd], suffix="keep")
    return ctx.emit("select", [keep, x, typed_scalar(ctx, 0.0, x.dtype)])


@handler("aten::softshrink", args="t f?")
def softshrink(ctx: OpContext, x: NTensor, lambd: float | None) -> NTensor:
    """aten::softshrink(Tensor self, Scalar lambd=0.5) -> Tensor  (x - clamp(x, -lambd, lambd))"""
    x = _input(ctx, x)
    lambd = 0.5 if lambd is None else lambd
    inner = ctx.tmp("min", [ctx.tmp("max", [x, -lambd], suffix="lo"), lambd], suffix="hi")
    return ctx.emit("sub", [x, inner])


@handler("aten::glu", args="t i?")
def glu(ctx: OpContext, x: NTensor, dim: int | None) -> NTensor:
    """aten::glu(Tensor self, int dim=-1) -> Tensor  (a * sigmoid(b), a|b the halves along dim)"""
    x = _input(ctx, x)
    axis = ctx.axis(-1 if dim is None else dim, x.rank)
    ctx.static(x, [axis], "glu")
    size = int(x.shape[axis])
    if size % 2:
        raise ctx.unsupported(f"glu over an axis of odd size {size}", "the split axis must be even")
    half = size // 2
    a = ctx.tmp("slice", [x], {"axes": [axis], "begin": [0], "end": [half]}, suffix="a")
    b = ctx.tmp("slice", [x], {"axes": [axis], "begin": [half], "end": [size]}, suffix="b")
    return ctx.emit("mul", [a, ctx.tmp("sigmoid", [b], suffix="gate")])


# --- softmax ---------------------------------------------------------------------------
def _softmax_input(ctx: OpContext, x: NTensor, dim: int) -> tuple[NTensor, list[int]]:
    x = _input(ctx, x)
    if x.dtype not in FLOAT_DTYPES:
        raise ctx.unsupported(f"softmax of {x.dtype}", "softmax needs a float tensor")
    return x, [ctx.axis(dim, x.rank)]


@handler("aten::softmax", "aten::_softmax", "aten::special_softmax", args="t i n?")
def softmax(ctx: OpContext, x: NTensor, dim: int, _dtype: Any) -> NTensor:
    """aten::softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor
    (_softmax's third input is half_to_float; both are covered by the traced output dtype)"""
    x, axes = _softmax_input(ctx, x, dim)
    if x.dtype == "f16" and ctx.out_dtype() == "f16" and not ctx.strict:
        # torch's CPU kernel computes a half softmax in float and rounds once; tract's f16
        # softmax rounds every step and, on CPUs without f16 arithmetic, is slower than
        # two casts and an f32 softmax (gpt-oss's f16 prefill: +9 %, benches/README.md).
        wide = ctx.tmp("softmax", [ctx.cast(x, "f32")], {"axes": axes}, dtype="f32", suffix="f32")
        return ctx.emit("tract_core_cast", [wide], {"to": "f16"})
    return ctx.emit("softmax", [x], {"axes": axes})


@handler("aten::log_softmax", "aten::_log_softmax", "aten::special_log_softmax", args="t i n?")
def log_softmax(ctx: OpContext, x: NTensor, dim: int, _dtype: Any) -> NTensor:
    """aten::log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor
    (before tract 0.21.14: x - max - log(sum(exp(x - max))))"""
    x, axes = _softmax_input(ctx, x, dim)
    top = ctx.tmp("max_reduce", [x], {"axes": axes}, suffix="max")
    shifted = ctx.tmp("sub", [x, top], suffix="shift")
    total = ctx.tmp("sum_reduce", [ctx.tmp("exp", [shifted], suffix="exp")], {"axes": axes}, suffix="sum")
    return ctx.emit("sub", [shifted, ctx.tmp("log", [total], suffix="log")])


@handler("aten::log_softmax", "aten::_log_softmax", "aten::special_log_softmax", args="t i n?",
         since="native_log_softmax")
def log_softmax_native(ctx: OpContext, x: NTensor, dim: int, _dtype: Any) -> NTensor:
    """aten::log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    x, axes = _softmax_input(ctx, x, dim)
    return ctx.emit("tract_core_log_softmax", [x], {"axes": axes})


# --- quantized:: activations (converted modules): their output grid is an argument -----------
@handler("quantized::hardswish", args="t f i")
def quantized_hardswish(ctx: OpContext, x: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::hardswish(Tensor input, float output_scale, int output_zero_point) -> Tensor"""
    return dequantized(ctx, hardswish, x, out_type=quantized_output_type(ctx, scale, zero_point))


@handler("quantized::sigmoid", args="t f i")
def quantized_sigmoid(ctx: OpContext, x: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::sigmoid(Tensor qx, float output_scale, int output_zero_point) -> Tensor"""
    return dequantized(ctx, sigmoid, x, out_type=quantized_output_type(ctx, scale, zero_point))


@handler("quantized::leaky_relu", args="t f b f i")
def quantized_leaky_relu(ctx: OpContext, x: NTensor, slope: float, inplace: bool, scale: float,
                         zero_point: int) -> NTensor:
    """quantized::leaky_relu(Tensor qx, Scalar negative_slope, bool inplace, float output_scale, int output_zero_point) -> Tensor"""  # noqa: E501
    return dequantized(ctx, leaky_relu, x, slope, out_type=quantized_output_type(ctx, scale, zero_point))


@handler("quantized::elu", args="t f i f? f? f?")
def quantized_elu(ctx: OpContext, x: NTensor, out_scale: float, zero_point: int, alpha: float | None,
                  scale: float | None, input_scale: float | None) -> NTensor:
    """quantized::elu(Tensor self, float output_scale, int output_zero_point, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""  # noqa: E501
    return dequantized(ctx, elu, x, alpha, scale, input_scale,
                       out_type=quantized_output_type(ctx, out_scale, zero_point))


@handler("quantized::celu", args="t f i f?")
def quantized_celu(ctx: OpContext, x: NTensor, out_scale: float, zero_point: int, alpha: float | None) -> NTensor:
    """quantized::celu(Tensor self, float output_scale, int output_zero_point, Scalar alpha=1) -> Tensor"""
    return dequantized(ctx, celu, x, alpha, out_type=quantized_output_type(ctx, out_scale, zero_point))
