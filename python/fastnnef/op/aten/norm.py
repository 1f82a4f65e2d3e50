"""Normalizations: batch_norm (eval and batch statistics), instance_norm, group_norm,
layer_norm, rms_norm; native_layer_norm / native_group_norm with their statistics; the
weight norm reparametrization (_weight_norm).

Written with stdlib reductions (``mean_reduce`` keeps reduced axes as size 1), so dynamic
axes keep working; tract folds the parameter-only arithmetic at load. With
``TractNNEF(force_norm_in_f32=True)`` an f16 norm is computed in f32 and cast back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import channel_param, finish
from fastnnef.op.aten._moments import normalize, statistics
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler


def _compute_dtype(ctx: OpContext) -> str:
    out = ctx.out_dtype()
    if out not in FLOAT_DTYPES:
        raise ctx.unsupported(f"normalization of a {out} tensor", "normalize a float tensor")
    if out == "f16" and ctx.caps.force_norm_in_f32:
        return "f32"
    return out


def _reduced(x: NTensor, axes: Sequence[int]) -> tuple[Size, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _scale_shift(
    ctx: OpContext, x: NTensor, inv: NTensor, weight: NTensor | None, bias: NTensor | None,
) -> NTensor:
    """``x * inv [* weight] [+ bias]`` (operands broadcastable to ``x``); the last op is
    the node output (cast back to the traced dtype when computed in f32)."""
    chain: list[tuple[str, NTensor]] = [("mul", inv)]
    if weight is not None:
        chain.append(("mul", weight))
    if bias is not None:
        chain.append(("add", bias))
    y = x
    for i, (kind, operand) in enumerate(chain):
        if i == len(chain) - 1:
            return finish(ctx, kind, [y, operand], x)
        y = ctx.tmp(kind, [y, operand], suffix=f"{kind}{i}")
    raise AssertionError("unreachable: the chain is never empty")


def _param(ctx: OpContext, p: NTensor, dtype: str) -> NTensor:
    """A weight, bias or running statistic in the compute dtype: a stored one is converted
    at export (an f16 model whose norm kept f32 parameters gets f16 variables, as the
    reference writes it, and no cast op unless ``force_norm_in_f32`` asks for one)."""
    return ctx.cast(p, dtype, convert_constant=True)


def _channel(ctx: OpContext, p: NTensor | None, dtype: str, rank: int) -> NTensor | None:
    return None if p is None else channel_param(ctx, _param(ctx, p, dtype), rank)


def _trailing(ctx: OpContext, p: NTensor | None, dtype: str, rank: int) -> NTensor | None:
    return None if p is None else ctx.to_rank(_param(ctx, p, dtype), rank)


@handler("aten::batch_norm", args="t t? t? t? t? b f f *")
def batch_norm(
    ctx: OpContext, x: NTensor, weight: NTensor | None, bias: NTensor | None,
    mean: NTensor | None, var: NTensor | None, training: bool, _momentum: float, eps: float,
) -> NTensor:
    """aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
    Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if x.rank < 2:
        raise ctx.unsupported(f"batch_norm of a rank-{x.rank} input", "the input needs a channel dim 1")
    dtype = _compute_dtype(ctx)
    xc = ctx.cast(x, dtype)
    if training or mean is None or var is None:
        # torch normalizes with the batch statistics here (the output does not depend on momentum).
        centered, inv = normalize(ctx, xc, [0] + list(range(2, x.rank)), eps)
        return _scale_shift(ctx, centered, inv, _channel(ctx, weight, dtype, x.rank),
                            _channel(ctx, bias, dtype, x.rank))
    # Eval: scale = weight / sqrt(running_var + eps), shift = bias - running_mean * scale,
    # computed on the [C] parameters (tract folds it), then one multiply-add on the input.
    var_c, mean_c = _param(ctx, var, dtype), _param(ctx, mean, dtype)
    scale = ctx.tmp("rsqrt", [ctx.tmp("add", [var_c, float(eps)], suffix="var_eps")], suffix="inv_std")
    if weight is not None:
        scale = ctx.tmp("mul", [scale, _param(ctx, weight, dtype)], suffix="scale")
    shift = ctx.tmp("neg", [ctx.tmp("mul", [mean_c, scale], suffix="mean_scaled")], suffix="shift")
    if bias is not None:
        shift = ctx.tmp("add", [shift, _param(ctx, bias, dtype)], suffix="shift_bias")
    return _scale_shift(ctx, xc, channel_param(ctx, scale, x.rank), None, channel_param(ctx, shift, x.rank))


@handler("aten::instance_norm", args="t t? t? t? t? b f f *")
def instance_norm(
    ctx: OpContext, x: NTensor, weight: NTensor | None, bias: NTensor | None,
    mean: NTensor | None, var: NTensor | None, use_input_stats: bool, momentum: float, eps: float,
) -> NTensor:
    """aten::instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
    Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if not use_input_stats:
        # track_running_stats=True in eval: the running stats act as batch_norm's.
        return batch_norm(ctx, x, weight, bias, mean, var, False, momentum, eps)
    if x.rank < 3:
        raise ctx.unsupported(f"instance_norm of a rank-{x.rank} input", "the input needs (N, C, spatial...)")
    dtype = _compute_dtype(ctx)
    centered, inv = normalize(ctx, ctx.cast(x, dtype), list(range(2, x.rank)), eps)
    return _scale_shift(ctx, centered, inv, _channel(ctx, weight, dtype, x.rank), _channel(ctx, bias, dtype, x.rank))


def _grouped(ctx: OpContext, x: NTensor, groups: int, eps: float) -> tuple[NTensor, NTensor, NTensor, list[int], str]:
    """group_norm's normalization: ``x`` normalized per group, back in ``x``'s shape; the
    groups' mean and 1/std (over ``axes`` of the grouped view, kept as size 1); the
    compute dtype."""
    if x.rank < 2:
        raise ctx.unsupported(f"group_norm of a rank-{x.rank} input", "the input needs (N, C, ...)")
    ctx.static(x, [1], "group_norm (channels split into groups)")
    channels = int(x.shape[1])
    if groups <= 0 or channels % groups:
        raise ctx.unsupported(f"group_norm of {channels} channels in {groups} groups", "C must divide by G")
    dtype = _compute_dtype(ctx)
    xc = ctx.cast(x, dtype)
    # Reshape only the channel axis (C -> G, C/G): the batch and spatial axes may be dynamic.
    grouped_shape = (x.shape[0], groups, channels // groups) + tuple(x.shape[2:])
    grouped = ctx.tmp("reshape", [xc], {"shape": [groups, channels // groups], "axis_start": 1, "axis_count": 1},
                      dtype=dtype, shape=grouped_shape, suffix="grouped")
    axes = list(range(2, grouped.rank))
    mean, centered, inv = statistics(ctx, grouped, axes, eps)
    normed = ctx.tmp("reshape", [ctx.tmp("mul", [centered, inv], suffix="normed")],
                     {"shape": [channels], "axis_start": 1, "axis_count": 2}, dtype=dtype, shape=xc.shape,
                     suffix="ungrouped")
    return normed, mean, inv, axes, dtype


def _affine(ctx: OpContext, normed: NTensor, weight: NTensor | None, bias: NTensor | None, dtype: str) -> NTensor:
    """``normed [* weight] [+ bias]`` per channel, as the node output."""
    w, b = _channel(ctx, weight, dtype, normed.rank), _channel(ctx, bias, dtype, normed.rank)
    if w is None and b is None:
        return finish(ctx, "copy", [normed], normed)
    if w is None:
        return finish(ctx, "add", [normed, b], normed)
    return _scale_shift(ctx, normed, w, None, b)


@handler("aten::group_norm", args="t i t? t? f *")
def group_norm(
    ctx: OpContext, x: NTensor, groups: int, weight: NTensor | None, bias: NTensor | None, eps: float,
) -> NTensor:
    """aten::group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None,
    float eps=1e-05, bool cudnn_enabled=True) -> Tensor"""
    normed, _, _, _, dtype = _grouped(ctx, x, groups, eps)
    return _affine(ctx, normed, weight, bias, dtype)


@handler("aten::layer_norm", args="t I t? t? f *")
def layer_norm(
    ctx: OpContext, x: NTensor, normalized_shape: list[int], weight: NTensor | None,
    bias: NTensor | None, eps: float,
) -> NTensor:
    """aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None,
    Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"""
    k = len(normalized_shape)
    if not 0 < k <= x.rank:
        raise ctx.unsupported(f"layer_norm over {normalized_shape} of a rank-{x.rank} input")
    dtype = _compute_dtype(ctx)
    centered, inv = normalize(ctx, ctx.cast(x, dtype), list(range(x.rank - k, x.rank)), eps)
    return _scale_shift(ctx, centered, inv, _trailing(ctx, weight, dtype, x.rank), _trailing(ctx, bias, dtype, x.rank))


@handler("aten::rms_norm", args="t I t? f?")
def rms_norm(
    ctx: OpContext, x: NTensor, normalized_shape: list[int], weight: NTensor | None, eps: float | None,
) -> NTensor:
    """aten::rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None,
    float? eps=None) -> Tensor  (x * rsqrt(mean(x^2) + eps) * weight; eps None = finfo.eps)"""
    k = len(normalized_shape)
    if not 0 < k <= x.rank:
        raise ctx.unsupported(f"rms_norm over {normalized_shape} of a rank-{x.rank} input")
    dtype = _compute_dtype(ctx)
    if eps is None:
        eps = torch.finfo(ctx.out_torch_dtype()).eps
    xc = ctx.cast(x, dtype)
    axes = list(range(x.rank - k, x.rank))
    ms = ctx.tmp("mean_reduce", [ctx.tmp("sqr", [xc], suffix="sq")], {"axes": axes}, suffix="ms")
    inv = ctx.tmp("rsqrt", [ctx.tmp("add", [ms, float(eps)], suffix="ms_eps")], suffix="inv_rms")
    return _scale_shift(ctx, xc, inv, _trailing(ctx, weight, dtype, x.rank), None)


# --- weight norm, and the multi-output forms of layer_norm / group_norm ---------------------
@handler("aten::_weight_norm", args="t t i")
def weight_norm(ctx: OpContext, v: NTensor, g: NTensor, dim: int) -> NTensor:
    """aten::_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor  (v * g / ||v||, the
    norm over every axis but ``dim``; dim -1: over the whole tensor)"""
    dtype = _compute_dtype(ctx)
    v, g = ctx.cast(v, dtype), ctx.cast(g, dtype)
    kept = None if dim == -1 else ctx.axis(dim, v.rank)
    axes = [a for a in range(v.rank) if a != kept]
    norm = ctx.tmp("sqrt", [ctx.tmp("sum_reduce", [ctx.tmp("sqr", [v], suffix="sq")], {"axes": axes}, suffix="ss")],
                   suffix="norm")
    scale = ctx.tmp("div", [ctx.to_rank(g, v.rank), norm], suffix="scale")
    return finish(ctx, "mul", [v, scale], v)


def _stat_output(ctx: OpContext, stat: NTensor, out: int, squeeze: Sequence[int] = ()) -> NTensor:
    """A mean or rstd as node output ``out`` (its traced dtype; ``squeeze``: axes to drop)."""
    dtype = ctx.out_dtype(out)
    if squeeze:
        if stat.dtype != dtype:
            stat = ctx.cast(stat, dtype)
        return ctx.emit("squeeze", [stat], {"axes": list(squeeze)}, out=out)
    if stat.dtype != dtype:
        return ctx.emit("tract_core_cast", [stat], {"to": dtype}, out=out)
    return ctx.emit("copy", [stat], out=out)


@handler("aten::native_layer_norm", args="t I t? t? f")
def native_layer_norm(
    ctx: OpContext, x: NTensor, normalized_shape: list[int], weight: NTensor | None,
    bias: NTensor | None, eps: float,
) -> list[NTensor]:
    """aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight,
    Tensor? bias, float eps) -> (Tensor, Tensor mean, Tensor rstd)  (statistics keep the
    normalized axes as size 1)"""
    k = len(normalized_shape)
    if not 0 < k <= x.rank:
        raise ctx.unsupported(f"native_layer_norm over {normalized_shape} of a rank-{x.rank} input")
    dtype = _compute_dtype(ctx)
    mean, centered, inv = statistics(ctx, ctx.cast(x, dtype), list(range(x.rank - k, x.rank)), eps)
    y = _scale_shift(ctx, centered, inv, _trailing(ctx, weight, dtype, x.rank), _trailing(ctx, bias, dtype, x.rank))
    return [y, _stat_output(ctx, mean, 1), _stat_output(ctx, inv, 2)]


@handler("aten::native_group_norm", args="t t? t? _ _ _ i f")
def native_group_norm(
    ctx: OpContext, x: NTensor, weight: NTensor | None, bias: NTensor | None, groups: int, eps: float,
) -> list[NTensor]:
    """aten::native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C,
    SymInt HxW, int group, float eps) -> (Tensor, Tensor mean, Tensor rstd)  (statistics [N, group])"""
    normed, mean, inv, stat_axes, dtype = _grouped(ctx, x, groups, eps)
    y = _affine(ctx, normed, weight, bias, dtype)
    return [y, _stat_output(ctx, mean, 1, stat_axes), _stat_output(ctx, inv, 2, stat_axes)]
