"""torch static quantization (eager mode: QuantStub/DeQuantStub, prepare, calibrate,
convert): aten::quantize_per_tensor, aten::dequantize and the ``quantized::`` ops the
converted modules trace to (linear, conv1d/conv2d, their fused-ReLU forms, and the
QFunctional add, add_relu, mul, cat, add_scalar, mul_scalar and matmul); and the
helpers through which the float handlers (activation.py, pool.py, resize.py,
reduce.py, shape.py) take torch-quantized inputs.

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

The aten ops torch runs on quantized tensors (relu, clamp, pools, upsample, mean, cat,
sigmoid...) reach the float handlers, which take a quantized input in one of two ways
(``torch_quantized``): on the codes, where tract has the op for quantized types and it
cannot leave the input's grid (relu, clamps, max pools, nearest upsampling, concat of
one type), or dequantized: the float computation, then a cast to the output's type. The
output's grid is the input's (what torch keeps for these ops), a fixed one (sigmoid,
tanh, hardsigmoid: torch's fixed output quantization) or the one the op names
(``quantized::hardswish``...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.payload import quantized_datum_type, quantized_params
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

# torch's ScalarType codes of the quantized dtypes (quantize_per_tensor's dtype argument).
_SCALAR_TYPES = {12: torch.qint8, 13: torch.quint8, 14: torch.qint32}
_TORCH_OF_CODES = {"u8": torch.quint8, "i8": torch.qint8, "i32": torch.qint32}
# The smallest code of each quantized type: an output zero point there means the
# quantization's clamp already applies a fused ReLU.
_LOWEST = {"u8": 0, "i8": -128, "i32": -(2**31)}
_BATCH_AXES = "abcdefgh"

Handler = TypeVar("Handler", bound=Callable[..., Any])
# A fixed output quantization: codes datum type -> (scale, zero point). torch's, for the
# ops whose output range it knows (aten/src/ATen/native/quantized/cpu: qsigmoid,
# qhardsigmoid, qtanh).
FixedGrid = dict[str, tuple[float, int]]
SIGMOID_GRID: FixedGrid = {"u8": (1.0 / 256, 0), "i8": (1.0 / 256, -128)}
TANH_GRID: FixedGrid = {"u8": (2.0 / 256, 128), "i8": (2.0 / 256, 0)}


# --- torch-quantized tensors through float handlers -----------------------------------------
def is_quantized(t: Any) -> bool:
    """Whether ``t`` is a tensor of tract's quantized type (a torch-quantized activation)."""
    return isinstance(t, NTensor) and quantized_params(t.dtype) is not None


class _Recomputed(OpContext):
    """The node as a float handler sees it when it runs on a quantized input: its output
    datum type is ``dtype``. ``final``: the handler's ``emit`` is the node's output (on the
    codes); otherwise it is an intermediate the caller quantizes (dequantized)."""

    def __init__(self, ctx: OpContext, dtype: str, final: bool):
        vars(self).update(vars(ctx))  # the same node and graph builder
        self._outer, self._dtype, self._final = ctx, dtype, final

    def out_dtype(self, index: int = 0) -> str:
        return self._dtype

    def emit(self, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, out: int = 0,
             value: Any | None = None, shape: Sequence[Any] | None = None,
             dtype: str | None = None) -> NTensor:
        if self._final:
            return self._outer.emit(kind, args, attrs, out, value, shape, dtype or self._dtype)
        return self._outer.tmp(kind, args, attrs, dtype=dtype or self._dtype,
                               shape=shape if shape is not None else self._outer.out_shape(out), suffix="f32")


def _quantized_operands(args: Sequence[Any]) -> list[NTensor]:
    """The quantized tensors among ``args`` (lists of tensors included)."""
    flat = [t for a in args for t in (a if isinstance(a, list) else [a])]
    return [t for t in flat if is_quantized(t)]


def _dequantize_all(ctx: OpContext, args: Sequence[Any]) -> list[Any]:
    def f32(a: Any) -> Any:
        return ctx.cast(a, "f32") if is_quantized(a) else a
    return [[f32(t) for t in a] if isinstance(a, list) else f32(a) for a in args]


def on_codes(ctx: OpContext, fn: Callable[..., NTensor], *args: Any) -> NTensor:
    """The float handler ``fn`` run on the codes: tract computes its ops on the quantized
    type of the first quantized input, which is the output's (ops that select or move
    values, never leaving the grid)."""
    return fn(_Recomputed(ctx, _quantized_operands(args)[0].dtype, final=True), *args)


def dequantized(ctx: OpContext, fn: Callable[..., NTensor], *args: Any, out_type: str) -> NTensor:
    """The float handler ``fn`` run on the dequantized inputs, its result quantized to
    ``out_type`` (tract's cast rounds to the nearest code, as torch's requantization)."""
    y = fn(_Recomputed(ctx, "f32", final=False), *_dequantize_all(ctx, args))
    return ctx.emit("tract_core_cast", [y], {"to": out_type}, dtype=out_type)


def fixed_grid(ctx: OpContext, x: NTensor, grid: FixedGrid) -> str:
    """The output type of an op whose output quantization torch fixes (``grid``)."""
    codes = quantized_params(x.dtype)[0]  # type: ignore[index]
    if codes not in grid:
        raise ctx.unsupported(f"a {ctx.kind} of a {x.dtype} tensor (torch fixes its output "
                              f"quantization for {' and '.join(grid)} codes only)", "dequantize() before it")
    scale, zero_point = grid[codes]
    return quantized_output_type(ctx, scale, zero_point)


def torch_quantized(mode: str, grid: FixedGrid | None = None) -> Callable[[Handler], Handler]:
    """Lets a float handler take torch-quantized inputs (its first argument, a tensor or a
    list of tensors, quantized): ``mode`` ``"codes"`` (``on_codes``) or ``"dequantize"``
    (``dequantized``, to ``grid`` if given, else to the first quantized input's type).
    Float inputs go to the handler unchanged."""
    if mode not in ("codes", "dequantize"):
        raise ValueError(f"torch_quantized mode {mode!r}: 'codes' or 'dequantize'")

    def decorate(fn: Handler) -> Handler:
        @functools.wraps(fn)
        def dispatch(ctx: OpContext, *args: Any) -> Any:
            quantized = _quantized_operands(args[:1])
            if not quantized:
                return fn(ctx, *args)
            same = all(t.dtype == quantized[0].dtype for t in quantized)
            if mode == "codes" and same:
                return on_codes(ctx, fn, *args)
            out_type = fixed_grid(ctx, quantized[0], grid) if grid else quantized[0].dtype
            return dequantized(ctx, fn, *args, out_type=out_type)
        return dispatch  # type: ignore[return-value]
    return decorate


def _input_params(ctx: OpContext, x: NTensor) -> tuple[str, int, float]:
    params = quantized_params(x.dtype)
    if params is None:
        raise ctx.unsupported(f"a quantized op on {x.name}, which is not quantized ({x.dtype})",
                              "quantize the input first (a QuantStub before the quantized module)")
    return params


def quantized_output_type(ctx: OpContext, scale: float, zero_point: int) -> str:
    """The tract type of the node's quantized output on the grid ``(scale, zero_point)``."""
    return quantized_datum_type(ctx.out_torch_dtype(), scale, zero_point)


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


def _packed(ctx: OpContext, packed: Any, what: str) -> tuple[torch.Tensor, torch.Tensor | None]:
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


def _bias_codes(ctx: OpContext, bias: torch.Tensor | None, channels: int, scale: float) -> NTensor:
    """The bias as i32 codes of the accumulator's scale (input scale x weight scale)."""
    data = torch.zeros(channels) if bias is None else bias.detach().float()
    return ctx.constant(torch.round(data / scale).to(torch.int32), suffix="bias")


def _float_bias(ctx: OpContext, bias: torch.Tensor | None, channels: int) -> NTensor:
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
    out_type = quantized_output_type(ctx, scale, zero_point)
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
    """quantized::linear_relu(Tensor X, LinearPackedParamsBase W_prepack, float Y_scale_i, int Y_zero_point_i) -> Tensor Y"""  # noqa: E501
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
    out_type = quantized_output_type(ctx, scale, zero_point)
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
            """quantized::conv2d(Tensor qx, Conv2dPackedParamsBase packed_weight, float output_scale, int output_zero_point) -> Tensor"""  # noqa: E501
            return _conv(ctx, x, packed, scale, zero_point, n, relu=False)

        @handler(f"quantized::conv{n}d_relu", args="t n f i")
        def conv_relu(ctx: OpContext, x: NTensor, packed: Any, scale: float, zero_point: int) -> NTensor:
            """quantized::conv2d_relu(Tensor qx, Conv2dPackedParamsBase packed_weight, float output_scale, int output_zero_point) -> Tensor"""  # noqa: E501
            return _conv(ctx, x, packed, scale, zero_point, n, relu=True)

    _register(_n)


# --- FloatFunctional: add, mul, cat ------------------------------------------------------------
def _binary(ctx: OpContext, kind: str, a: NTensor, b: NTensor, scale: float, zero_point: int, relu: bool) -> NTensor:
    _input_params(ctx, a)
    _input_params(ctx, b)
    rank = len(ctx.out_shape())
    af, bf = (ctx.to_rank(ctx.cast(t, "f32"), rank) for t in (a, b))
    y = ctx.tmp(kind, [af, bf], suffix=kind)
    return _quantize(ctx, y, quantized_output_type(ctx, scale, zero_point), relu)


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
def cat(ctx: OpContext, parts: list[NTensor], dim: int, scale: float | None, zero_point: int | None) -> NTensor:
    """quantized::cat(Tensor[] qx, int dim, float? scale, int? zero_point) -> Tensor  (no
    scale: the first input's)"""
    first = _input_params(ctx, parts[0])
    for p in parts[1:]:
        _input_params(ctx, p)
    if scale is None or zero_point is None:
        scale, zero_point = first[2], first[1]
    joined = ctx.tmp("concat", [[ctx.cast(p, "f32") for p in parts]], {"axis": ctx.axis(dim, parts[0].rank)},
                     suffix="cat")
    return _quantize(ctx, joined, quantized_output_type(ctx, scale, zero_point), relu=False)


@handler("quantized::mul_relu", args="t t f i")
def mul_relu(ctx: OpContext, a: NTensor, b: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::mul_relu(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc"""
    return _binary(ctx, "mul", a, b, scale, zero_point, relu=True)


@handler("quantized::matmul", args="t t f i")
def matmul(ctx: OpContext, a: NTensor, b: NTensor, scale: float, zero_point: int) -> NTensor:
    """quantized::matmul(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc"""
    _input_params(ctx, a)
    _input_params(ctx, b)
    if a.rank < 2 or b.rank < 2:
        raise ctx.unsupported(f"a quantized matmul of ranks {a.rank} and {b.rank}", "use inputs of rank 2 or more")
    rank = max(a.rank, b.rank)
    af, bf = (ctx.to_rank(ctx.cast(t, "f32"), rank) for t in (a, b))
    y = ctx.tmp("matmul", [af, bf], {"transposeA": False, "transposeB": False}, suffix="mm")
    return _quantize(ctx, y, quantized_output_type(ctx, scale, zero_point), relu=False)


def _scalar_grid(ctx: OpContext, x: NTensor, op: Callable[..., torch.Tensor], scalar: float) -> str:
    """The output type of a QFunctional scalar op: torch derives its grid from x's and the
    scalar alone (a shifted zero point, a scaled scale, a widened range past the codes'
    limits), so torch's own op on a one-element tensor of x's grid gives it."""
    codes, zero_point, scale = _input_params(ctx, x)
    probe = op(torch.quantize_per_tensor(torch.zeros(1), scale, zero_point, _TORCH_OF_CODES[codes]), scalar)
    return quantized_output_type(ctx, probe.q_scale(), probe.q_zero_point())


@handler("quantized::add_scalar", args="t f")
def add_scalar(ctx: OpContext, x: NTensor, scalar: float) -> NTensor:
    """quantized::add_scalar(Tensor qa, Scalar b) -> Tensor qc"""
    out_type = _scalar_grid(ctx, x, torch.ops.quantized.add_scalar, scalar)
    return _quantize(ctx, ctx.tmp("add", [ctx.cast(x, "f32"), float(scalar)], suffix="add"), out_type, relu=False)


@handler("quantized::mul_scalar", args="t f")
def mul_scalar(ctx: OpContext, x: NTensor, scalar: float) -> NTensor:
    """quantized::mul_scalar(Tensor qa, Scalar b) -> Tensor qc"""
    out_type = _scalar_grid(ctx, x, torch.ops.quantized.mul_scalar, scalar)
    return _quantize(ctx, ctx.tmp("mul", [ctx.cast(x, "f32"), float(scalar)], suffix="mul"), out_type, relu=False)


# --- normalization (an unfused BatchNorm after convert) -----------------------------------------
@handler("quantized::batch_norm1d", "quantized::batch_norm2d", "quantized::batch_norm3d", args="t t? t? t t f f i")
def batch_norm(ctx: OpContext, x: NTensor, weight: NTensor | None, bias: NTensor | None, mean: NTensor,
               var: NTensor, eps: float, scale: float, zero_point: int) -> NTensor:
    """quantized::batch_norm2d(Tensor qx, Tensor? weight, Tensor? bias, Tensor mean, Tensor var, float eps, float output_scale, int output_zero_point) -> Tensor"""  # noqa: E501
    _input_params(ctx, x)
    xf = ctx.cast(x, "f32")
    lead = [0] + list(range(2, xf.rank))  # [C] -> [1, C, 1, ...]

    def channel(t: NTensor, suffix: str) -> NTensor:
        return ctx.tmp("unsqueeze", [ctx.cast(t, "f32")], {"axes": lead}, suffix=suffix)

    std = ctx.tmp("sqrt", [ctx.tmp("add", [channel(var, "var"), float(eps)], suffix="var_eps")], suffix="std")
    y = ctx.tmp("div", [ctx.tmp("sub", [xf, channel(mean, "mean")], suffix="centered"), std], suffix="normalized")
    if weight is not None:
        y = ctx.tmp("mul", [y, channel(weight, "weight")], suffix="scaled")
    if bias is not None:
        y = ctx.tmp("add", [y, channel(bias, "bias")], suffix="shifted")
    return _quantize(ctx, y, quantized_output_type(ctx, scale, zero_point), relu=False)
