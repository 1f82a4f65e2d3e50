"""Convolutions: aten::_convolution (what nn.ConvNd/ConvTransposeNd, and torch.convolution,
trace to), _convolution_mode (string padding), the conv{1,2,3}d / conv_transpose{1,2,3}d
forms, and the time-major conv_tbc.

NNEF ``conv``/``deconv`` take the bias as ``[1, C]`` and the padding as explicit
``(before, after)`` pairs: an empty padding list means SAME_UPPER in tract, so it is never
left empty. Non-zero ``padding_mode`` (reflect/replicate/circular) traces as an
``aten::pad`` before the convolution, handled in ``pool.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.op.aten._common import accumulation_dtype
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _spatial(values: Sequence[int], n: int, what: str, ctx: OpContext) -> list[int]:
    """A per-spatial-axis list; torch expands a single value to every axis."""
    values = list(values)
    if len(values) == 1 and n > 1:
        values = values * n
    if len(values) != n:
        raise ctx.unsupported(f"{what} {values} for {n} spatial axes")
    return values


def _bias(ctx: OpContext, bias: NTensor | None, dtype: str) -> NTensor | float:
    """NNEF wants the bias as ``[1, C]``; no bias is the literal 0.0."""
    if bias is None:
        return 0.0
    bias = ctx.cast(bias, dtype)
    if bias.rank == 1:
        bias = ctx.tmp("unsqueeze", [bias], {"axes": [0]}, suffix="bias")
    return bias


def _same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> list[tuple[int, int]]:
    """torch's padding='same': total d*(k-1), the odd extra cell on the right."""
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _geometry(
    ctx: OpContext, x: NTensor, weight: NTensor, stride: Sequence[int], dilation: Sequence[int], what: str,
) -> tuple[int, list[int], list[int]]:
    """(spatial rank, stride, dilation) of a (transposed) convolution; refuses unbatched inputs."""
    n = weight.rank - 2
    if x.rank != n + 2:
        raise ctx.unsupported(
            f"{what} of a rank-{x.rank} input with a rank-{weight.rank} weight (unbatched input?)",
            "add the batch axis with unsqueeze(0) before the convolution",
        )
    return n, _spatial(stride, n, "stride", ctx), _spatial(dilation, n, "dilation", ctx)


def _emit(ctx: OpContext, kind: str, args: Sequence[Any], attrs: dict[str, Any], dtype: str) -> NTensor:
    """The (de)convolution computed in ``dtype``: f32 for an f16 model under
    ``force_linear_accumulation_in_f32`` (tract's conv has no accumulator option, so the
    operands are cast to f32 and the result back), else the output dtype."""
    if dtype == ctx.out_dtype():
        return ctx.emit(kind, args, attrs)
    y = ctx.tmp(kind, args, attrs, dtype=dtype, shape=ctx.out_shape(), suffix="acc")
    return ctx.emit("tract_core_cast", [y], {"to": ctx.out_dtype()})


def _conv(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: Sequence[int],
    padding: str | Sequence[int], dilation: Sequence[int], groups: int,
) -> NTensor:
    dtype = accumulation_dtype(ctx, ctx.out_dtype())
    n, stride, dilation = _geometry(ctx, x, weight, stride, dilation, "convolution")
    kernel = [int(k) for k in weight.shape[2:]]
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * n
        elif padding == "same":
            pads = _same_padding(kernel, dilation)
        else:
            raise ctx.unsupported(f"padding={padding!r}", "use 'same', 'valid' or integers")
    else:
        pads = [(p, p) for p in _spatial(padding, n, "padding", ctx)]
    return _emit(
        ctx, "conv",
        [ctx.cast(x, dtype), ctx.cast(weight, dtype), _bias(ctx, bias, dtype)],
        {
            "border": "constant",
            "padding": [Tuple(p) for p in pads],
            "stride": stride,
            "dilation": dilation,
            "groups": groups,
        },
        dtype,
    )


def _deconv_filter(ctx: OpContext, weight: NTensor, groups: int, dtype: str) -> NTensor:
    """torch's transposed-conv weight ``[C_in, C_out/g, k...]`` -> tract's deconv filter
    ``[C_out, C_in/g, k...]`` (a per-group swap of the two channel axes)."""
    weight = ctx.cast(weight, dtype)
    c_in, c_out_g = int(weight.shape[0]), int(weight.shape[1])
    spatial = tuple(weight.shape[2:])
    rest = list(range(3, weight.rank + 1))
    if groups == 1:
        return ctx.tmp("transpose", [weight], {"axes": [1, 0] + list(range(2, weight.rank))}, suffix="filter")
    grouped = (groups, c_in // groups, c_out_g) + spatial
    w = ctx.tmp("reshape", [weight], {"shape": list(grouped)}, dtype=dtype, shape=grouped, suffix="filter_g")
    w = ctx.tmp("transpose", [w], {"axes": [0, 2, 1] + rest}, suffix="filter_t")
    final = (groups * c_out_g, c_in // groups) + spatial
    return ctx.tmp("reshape", [w], {"shape": list(final)}, dtype=dtype, shape=final, suffix="filter")


def _deconv(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: Sequence[int],
    padding: Sequence[int], dilation: Sequence[int], output_padding: Sequence[int], groups: int,
) -> NTensor:
    dtype = accumulation_dtype(ctx, ctx.out_dtype())
    n, stride, dilation = _geometry(ctx, x, weight, stride, dilation, "transposed convolution")
    padding = _spatial(padding, n, "padding", ctx)
    output_padding = _spatial(output_padding, n, "output_padding", ctx)
    output_shape: list[int] = []
    if any(output_padding):
        # tract derives the extra cells from an explicit output shape, which needs static sizes.
        out = ctx.out_shape()
        ctx.static(x, list(range(2, x.rank)), "transposed convolution with output_padding")
        output_shape = [int(d) for d in out[2:]]
    return _emit(
        ctx, "deconv",
        [ctx.cast(x, dtype), _deconv_filter(ctx, weight, groups, dtype), _bias(ctx, bias, dtype)],
        {
            "border": "constant",
            "padding": [Tuple((p, p)) for p in padding],
            "stride": stride,
            "dilation": dilation,
            "output_shape": output_shape,
            "groups": groups,
        },
        dtype,
    )


@handler("aten::_convolution", args="t t t? I I I b I i *")
def convolution(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: list[int],
    padding: list[int], dilation: list[int], transposed: bool, output_padding: list[int], groups: int,
) -> NTensor:
    """aten::_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor"""  # noqa: E501
    if transposed:
        return _deconv(ctx, x, weight, bias, stride, padding, dilation, output_padding, groups)
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups)


@handler("aten::_convolution_mode", "aten::conv1d", "aten::conv2d", "aten::conv3d", args="t t t? I I I i")
def conv_nd(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: list[int],
    padding: str | list[int], dilation: list[int], groups: int,
) -> NTensor:
    """aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1, SymInt groups=1) -> Tensor  (also the str-padding overloads)"""  # noqa: E501
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups)


@handler("aten::_convolution_mode", "aten::conv1d", "aten::conv2d", "aten::conv3d", args="t t t? I s I i",
         overload="padding")
def conv_nd_padding(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: list[int],
    padding: str, dilation: list[int], groups: int,
) -> NTensor:
    """aten::conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, str padding="valid", SymInt[2] dilation=1, SymInt groups=1) -> Tensor"""  # noqa: E501
    return conv_nd(ctx, x, weight, bias, stride, padding, dilation, groups)


@handler("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", args="t t t? I I I i I")
def conv_transpose_nd(
    ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor | None, stride: list[int],
    padding: list[int], output_padding: list[int], groups: int, dilation: list[int],
) -> NTensor:
    """aten::conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] output_padding=0, SymInt groups=1, SymInt[2] dilation=1) -> Tensor"""  # noqa: E501
    return _deconv(ctx, x, weight, bias, stride, padding, dilation, output_padding, groups)


@handler("aten::conv_tbc", args="t t t i")
def conv_tbc(ctx: OpContext, x: NTensor, weight: NTensor, bias: NTensor, pad: int) -> NTensor:
    """aten::conv_tbc(Tensor self, Tensor weight, Tensor bias, int pad=0) -> Tensor  (a 1-D
    convolution on time-major [T, B, C_in] with a [K, C_in, C_out] weight, padded on both sides)"""
    if x.rank != 3 or weight.rank != 3:
        raise ctx.unsupported(f"conv_tbc of a rank-{x.rank} input with a rank-{weight.rank} weight",
                              "conv_tbc takes [T, B, C_in] and [K, C_in, C_out]")
    dtype = ctx.out_dtype()
    batch_major = ctx.tmp("transpose", [ctx.cast(x, dtype)], {"axes": [1, 2, 0]}, suffix="bct")
    filt = ctx.tmp("transpose", [ctx.cast(weight, dtype)], {"axes": [2, 1, 0]}, suffix="filter")
    attrs = {"border": "constant", "padding": [Tuple((pad, pad))], "stride": [1], "dilation": [1], "groups": 1}
    y = ctx.tmp("conv", [batch_major, filt, _bias(ctx, bias, dtype)], attrs, suffix="conv")
    return ctx.emit("transpose", [y], {"axes": [2, 0, 1]})
