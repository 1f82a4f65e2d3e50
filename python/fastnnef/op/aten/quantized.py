"""torch static quantization (eager mode: QuantStub/DeQuantStub, prepare, calibrate,
convert): aten::quantize_per_tensor, aten::dequantize and the ``quantized::`` ops the
converted modules trace to (linear, conv1d/conv2d, their fused-ReLU forms, and the
FloatFunctional add, mul and cat).

A quantized activation is a tensor of tract's quantized type, ``QU8(Z:zero_point S:scale)``:
the NNEF tensor's datum type carries the scale and zero point that torch's trace does not
record, and every op producing one names it as its output type. Ops that only move data
(reshape, transpose...) pass it on (``OpContext.emit``).

Weights come from the packed params (``LinearPackedParamsBase``, ``Conv2dPackedParamsBase``,
unpacked at export time). Per-tensor weights are written as their int codes with a
``graph.quant`` line and run in tract's integer kernels (``tract_core_einsum_q``,
``tract_core_qconv``), the bias as i32 codes of scale ``s_input * s_weight``. tract has no
per-channel quantized type: per-channel weights are written as int codes with their scales
and zero points as float vectors, dequantized in the graph (tract folds that at load), and
the layer runs in f32 before its output is quantized. add, mul and cat run on the dequantized
values, then quantize to their output type. Either way tract's result is torch's within one
quantization step (the two round the accumulators differently).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.payload import quantized_datum_type, quantized_params
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

# torch's ScalarType codes of the quantized dtypes (quantize_per_tensor's dtype argument).
_SCALAR_TYPES = {12: torch.qint8, 13: torch.quint8, 14: torch.qint32}
# The smallest code of each quantized type: an output zero point there means the
# quantization's clamp already applies a fused ReLU.
_LOWEST = {"u8": 0, "i8": -128, "i32": -(2**31)}
_BATCH_AXES = "abcdefgh"


def _input_params(ctx: OpContext, x: NTensor) -> tuple[str, int, float]:
    params = quantized_params(x.dtype)
    if params is None:
        raise ctx.unsupported(f"a quantized op on {x.name}, which is not quantized ({x.dtype})",
                              "quantize the input first (a QuantStub before the quantized module)")
    return params


def _output_type(ctx: OpContext, scale: float, zero_point: int) -> str:
    return quantized_datum_type(ctx.out_value().dtype, scale, zero_point)


def _quantize(ctx: OpContext, y: NTensor, out_type: str, relu: bool) -> NTensor:
    """The float ``y`` (optionally through ReLU) quantized to ``out_type``: the node's output."""
    if relu:
        y = ctx.tmp("relu", [y], suffix="relu")
    return ctx.emit("tract_core_cast", [y], {"to": out_type}, dtype=out_type)


def _requantized(ctx: OpContext, kind: str, args: Sequence[Any], attrs: dict[str, Any], out_type: str,
                 relu: bool) -> NTensor:
    """An integer-kernel op whose output is ``out_type``; a fused ReLU that the output's
    clamp does not already apply goes through f32 (exact: ReLU keeps values on the grid)."""
    codes, zero_point, _ = quantized_params(out_type)  # type: ignore[misc]
    if not relu or zero_point == _LOWEST[codes]:
        return ctx.emit(kind, args, attrs, dtype=out_type)
    y = ctx.tmp(kind, args, attrs, dtype=out_type, shape=ctx.out_shape(), suffix="q")
    return _quantize(ctx, ctx.cast(y, "f32"), out_type, True)


def _packed(ctx: OpContext, packed: Any, what: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(quantized weight, float bias) of a packed-params script object."""
    try:
        weight, bias = packed.unpack()
    except (AttributeError, RuntimeError) as err:
        raise ctx.unsupported(f"{what} packed params that do not unpack ({type(packed).__name__}: {err})") from None
    if weight.qscheme() not in (torch.per_tensor_affine, torch.per_channel_affine):
        raise ctx.unsupported(f"a weight quantized {weight.qscheme()}",
                              "use per_tensor_affine or per_channel_affine weights")
    return weight, bias


def _per_channel_weight(ctx: OpContext, weight: torch.Tensor) -> NTensor:
    """A per-channel weight as f32, dequantized in the graph from its int codes: tract's
    graph.quant holds one scale per tensor."""
    if weight.q_per_channel_axis() != 0:
        raise ctx.unsupported(f"a weight quantized per channel along axis {weight.q_per_channel_axis()}",
                              "quantize weights per output channel (axis 0)")
    lead = (-1,) + (1,) * (weight.dim() - 1)
    codes = ctx.cast(ctx.constant(weight.int_repr(), suffix="weight"), "f32")
    zero_points = ctx.constant(weight.q_per_channel_zero_points().to(torch.float32).reshape(lead),
                               suffix="weight_zero_points")
    scales = ctx.constant(weight.q_per_channel_scales().to(torch.float32).reshape(lead), suffix="weight_scales")
    return ctx.tmp("mul", [ctx.tmp("sub", [codes, zero_points], suffix="w_centered"), scales], suffix="w_f32")


def _bias_codes(ctx: OpContext, bias: Optional[torch.Tensor], channels: int, scale: float) -> NTensor:
    """The bias as i32 codes of the accumulator's scale (input scale x weight scale)."""
    data = torch.zeros(channels) if bias is None else bias.detach().float()
    return ctx.constant(torch.round(data / scale).to(torch.int32), suffix="bias")


def _float_bias(ctx: OpContext, bias: Optional[torch.Tensor], channels: int) -> NTensor:
    return ctx.constant(torch.zeros(channels) if bias is None else bias.detach().float(), suffix="bias")


# --- quantize / dequantize -------------------------------------------------------------------
@handler("aten::quantize_per_tensor", args="t f i i")
def quantize_per_tensor(ctx: OpContext, x: NTensor, scale: float, zero_point: int, dtype: int) -> NTensor:
    """aten::quantize_per_tensor(Tensor self, float scale, int zero_point, ScalarType dtype) -> Tensor"""
    if dtype not in _SCALAR_TYPES:
        raise ctx.unsupported(f"quantize_per_tensor to dtype code {dtype}", "use torch.quint8, qint8 or qint32")
    out_type = quantized_datum_type(_SCALAR_TYPES[dtype], scale, zero_point)
    return ctx.emit("tract_core_cast", [ctx.cast(x, "f32")], {"to": out_type}, dtype=out_type)


@handler("aten::dequantize", args="t")
def dequantize(ctx: OpContext, q: NTensor) -> NTensor:
    """aten::dequantize.self(Tensor self) -> Tensor  ((codes - zero_point) * scale)"""
    if quantized_params(q.dtype) is None:
        return ctx.emit("copy", [q])
    return ctx.emit("tract_core_cast", [q], {"to": ctx.out_dtype()})


# --- linear ----------------------------------------------------------------------------------
def _linear(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int, relu: bool) -> NTensor:
    _, x_zero_point, x_scale = _input_params(ctx, x)
    weight, bias = _packed(ctx, packed, "linear")
    out_type = _output_type(ctx, scale, zero_point)
    channels = weight.shape[0]
    if x.rank < 1 or weight.dim() != 2:
        raise ctx.unsupported(f"a quantized linear of a rank-{x.rank} input")
    if weight.qscheme() == torch.per_channel_affine:
        xf = ctx.cast(x, "f32")
        w = ctx.to_rank(_per_channel_weight(ctx, weight), xf.rank)
        y = ctx.tmp("matmul", [xf, w], {"transposeA": False, "transposeB": True}, suffix="mm")
        y = ctx.tmp("add", [y, ctx.to_rank(_float_bias(ctx, bias, channels), xf.rank)], suffix="biased")
        return _quantize(ctx, y, out_type, relu)
    # x [..., K] . w [N, K] + bias [N], accumulated in i32 (tract's einsum_q takes the
    # bias and the six quantization parameters as extra, axis-less inputs).
    batch = _BATCH_AXES[: x.rank - 1]
    expr = f"{batch}k,nk,n,,,,,,->{batch}n"
    w_scale, w_zero_point = float(weight.q_scale()), int(weight.q_zero_point())
    attrs = {
        "expr": expr, "acc": "i32", "output": out_type,
        "bias": _bias_codes(ctx, bias, channels, x_scale * w_scale),
        "a0": x_zero_point, "a_scale": x_scale, "b0": w_zero_point, "b_scale": w_scale,
        "c0": zero_point, "c_scale": scale,
    }
    return _requantized(ctx, "tract_core_einsum_q", [[x, ctx.constant(weight, suffix="weight")]], attrs, out_type, relu)


@handler("quantized::linear", args="t n f i")
def linear(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int) -> NTensor:
    """quantized::linear(Tensor X, LinearPackedParamsBase W_prepack, float Y_scale_i, int Y_zero_point_i) -> Tensor Y"""
    return _linear(ctx, x, packed, scale, zero_point, relu=False)


@handler("quantized::linear_relu", args="t n f i")
def linear_relu(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int) -> NTensor:
    """quantized::linear_relu(Tensor X, LinearPackedParamsBase W_prepack, float Y_scale_i, int Y_zero_point_i) -> Tensor Y"""
    return _linear(ctx, x, packed, scale, zero_point, relu=True)


# --- convolution -----------------------------------------------------------------------------
def _conv(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int, n: int, relu: bool) -> NTensor:
    _, x_zero_point, x_scale = _input_params(ctx, x)
    weight, bias = _packed(ctx, packed, f"conv{n}d")
    if packed.transpose():
        raise ctx.unsupported("a quantized transposed convolution")
    if x.rank != n + 2:
        raise ctx.unsupported(f"a quantized conv{n}d of a rank-{x.rank} input", "add the batch axis")
    if n == 1:  # torch packs conv1d as a conv2d over [O, I, 1, K]
        weight = weight.squeeze(2)
    out_type = _output_type(ctx, scale, zero_point)
    channels, groups = weight.shape[0], int(packed.groups())
    geometry = {
        "dilation": list(packed.dilation())[-n:],
        "stride": list(packed.stride())[-n:],
        "padding": [Tuple((p, p)) for p in list(packed.padding())[-n:]],
        "border": "constant",
    }
    if weight.qscheme() == torch.per_channel_affine:
        bias_f = ctx.tmp("unsqueeze", [_float_bias(ctx, bias, channels)], {"axes": [0]}, suffix="bias")
        y = ctx.tmp("conv", [ctx.cast(x, "f32"), _per_channel_weight(ctx, weight), bias_f],
                    {**geometry, "groups": groups}, suffix="conv")
        return _quantize(ctx, y, out_type, relu)
    w_scale, w_zero_point = float(weight.q_scale()), int(weight.q_zero_point())
    attrs = {
        # tract_core_qconv declares ``group`` but reads ``groups`` (its conv reader's name):
        # both are given. Its ``a`` is the filter and ``b`` the input (matmul's A x B).
        "group": groups, "groups": groups, **geometry,
        "a0": w_zero_point, "a_scale": w_scale, "b0": x_zero_point, "b_scale": x_scale,
        "c0": zero_point, "c_scale": scale, "output_dt": out_type,
    }
    args = [x, ctx.constant(weight, suffix="weight"), _bias_codes(ctx, bias, channels, x_scale * w_scale)]
    return _requantized(ctx, "tract_core_qconv", args, attrs, out_type, relu)


for _n in (1, 2):
    def _register(n: int) -> None:
        @handler(f"quantized::conv{n}d", args="t n f i")
        def conv(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int) -> NTensor:
            """quantized::conv2d(Tensor qx, Conv2dPackedParamsBase packed_weight, float output_scale, int output_zero_point) -> Tensor"""
            return _conv(ctx, x, packed, scale, zero_point, n, relu=False)

        @handler(f"quantized::conv{n}d_relu", args="t n f i")
        def conv_relu(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int) -> NTensor:
            """quantized::conv2d_relu(Tensor qx, Conv2dPackedParamsBase packed_weight, float output_scale, int output_zero_point) -> Tensor"""
            return _conv(ctx, x, packed, scale, zero_point, n, relu=True)

    _register(_n)


# --- FloatFunctional: add, mul, cat ------------------------------------------------------------
def _binary(ctx: OpContext, kind: str, a: NTensor, b: NTensor, scale: float, zero_point: int, relu: bool) -> NTensor:
    _input_params(ctx, a)
    _input_params(ctx, b)
    rank = len(ctx.out_shape())
    af, bf = (ctx.to_rank(ctx.cast(t, "f32"), rank) for t in (a, b))
    y = ctx.tmp(kind, [af, bf], suffix=kind)
    return _quantize(ctx, y, _output_type(ctx, scale, zero_point), relu)


@handler("quantized::add", args="t t f i")
def add(ctx: OpContext, a: NTensor, b: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::add(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc"""
    return _binary(ctx, "add", a, b, scale, zero_point, relu=False)


@handler("quantized::add_relu", args="t t f i")
def add_relu(ctx: OpContext, a: NTensor, b: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::add_relu(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc"""
    return _binary(ctx, "add", a, b, scale, zero_point, relu=True)


@handler("quantized::mul", args="t t f i")
def mul(ctx: OpContext, a: NTensor, b: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::mul(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc"""
    return _binary(ctx, "mul", a, b, scale, zero_point, relu=False)


@handler("quantized::cat", args="L i f? i?")
def cat(ctx: OpContext, parts: list[NTensor], dim: int, scale: Optional[float], zero_point: Optional[int]) -> NTensor:
    """quantized::cat(Tensor[] qx, int dim, float? scale, int? zero_point) -> Tensor  (no
    scale: the first input's)"""
    first = _input_params(ctx, parts[0])
    for p in parts[1:]:
        _input_params(ctx, p)
    if scale is None or zero_point is None:
        scale, zero_point = first[2], first[1]
    joined = ctx.tmp("concat", [[ctx.cast(p, "f32") for p in parts]], {"axis": ctx.axis(dim, parts[0].rank)},
                     suffix="cat")
    return _quantize(ctx, joined, _output_type(ctx, scale, zero_point), relu=False)
