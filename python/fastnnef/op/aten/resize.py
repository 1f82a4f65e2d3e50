"""Resizing: upsample_nearest*/upsample_*linear* (F.interpolate, nn.Upsample) and
pixel_shuffle / pixel_unshuffle.

With tract >= 0.23.2 (gate ``resize_grid_sample``) resizes are ``tract_core_resize`` with
torch's coordinate mapping: nearest = asymmetric + floor, nearest-exact =
tf_half_pixel_for_nn + floor, linear = half_pixel (torch clamps negative source
coordinates, which tract's edge taps reproduce) or align_corners. The scale that torch
uses is ``1 / scale_factor`` when a scale factor was traced, ``in / out`` otherwise, so the
graph passes ``scales`` in the first case and ``sizes`` in the second (integer ratios
always go as ``scales``: they also hold for dynamic axes). Older targets and strict NNEF
get ``nearest_upsample`` / ``multilinear_upsample`` (integer factors only); bicubic
(tract's cubic kernel, torch's a = -0.75) needs tract_core_resize.
"""

from __future__ import annotations

from typing import Any

from fastnnef.dim import DimExpr
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.op.aten.quantized import torch_quantized
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

_SPATIAL = {"1d": 1, "2d": 2, "3d": 3}


def _scale_factors(ctx: OpContext, first: int, n: int) -> list[float] | None:
    """Traced scale factors, inputs ``first`` on: ``float[]? scale_factors`` (.vec
    overloads) or one ``float? scales_*`` per axis (older overloads); None when torch used
    the sizes."""
    values = [ctx.arg(k, "v") for k in range(first, ctx.n_inputs)]
    items = values[0] if len(values) == 1 and isinstance(values[0], list) else values
    factors = [v for v in items if isinstance(v, (int, float))]
    if not factors:
        return None
    if len(factors) == 1 and n > 1:
        factors *= n
    if len(factors) != n:
        raise ctx.unsupported(f"{len(factors)} scale factors for {n} spatial axes")
    return [float(f) for f in factors]


def _resize(ctx: OpContext, x: NTensor, mode: str, align_corners: bool, scales_from: int) -> NTensor:
    """Resize ``x`` to the traced output, with the scale factors read from input
    ``scales_from`` on."""
    n = _SPATIAL[ctx.kind[-2:]]
    if x.rank != n + 2:
        raise ctx.unsupported(f"{n}-d upsampling of a rank-{x.rank} tensor")
    dtype = ctx.out_dtype()
    out = ctx.out_shape()
    factors = _scale_factors(ctx, scales_from, n)
    axes = list(range(2, x.rank))
    # Integer ratio per axis when both sizes are known (None: not an integer or dynamic).
    ratios: list[int | None] = []
    for i, a in enumerate(axes):
        if factors is not None:
            f = factors[i]
            ratios.append(int(f) if f == int(f) else None)
        elif isinstance(x.shape[a], DimExpr) or isinstance(out[a], DimExpr) or int(out[a]) % int(x.shape[a]):
            ratios.append(None)
        else:
            ratios.append(int(out[a]) // int(x.shape[a]))
    if ctx.caps.upsample_with_debox and mode.startswith("nearest") and all(r is not None for r in ratios):
        # TractNNEF(upsample_with_debox=True): integer nearest upsampling as NNEF's debox,
        # a box-filter deconvolution that repeats each value over a factor-sized window.
        factor = [1, 1] + [int(r) for r in ratios if r is not None]
        return ctx.emit("debox", [ctx.cast(x, dtype)],
                        {"size": factor, "stride": factor, "padding": [Tuple((0, 0))] * x.rank})
    if ctx.caps.supports("resize_grid_sample"):
        coord = {
            "nearest": "asymmetric",
            "nearest_exact": "tf_half_pixel_for_nn",
            "linear": "align_corners" if align_corners else "half_pixel",
            "cubic": "align_corners" if align_corners else "half_pixel",  # no clamp: torch clamps each cubic tap
        }[mode]
        attrs: dict[str, Any] = {
            "coord_transformer": coord,
            "interpolator": "nearest" if mode.startswith("nearest") else mode,
            "nearest_mode": "floor",
        }
        if all(r is not None for r in ratios) or (factors is not None and not align_corners):
            # tract computes a resized size from a scale only for a known length.
            ctx.static(x, [a for a, r in zip(axes, ratios) if r is None], "resizing by a non-integer scale factor")
            scales = [float(r) if r is not None else f for r, f in zip(ratios, factors or [0.0] * n)]
            attrs["scales"] = [1.0, 1.0] + scales
        else:
            ctx.static(x, axes, "resizing by a non-integer ratio")
            if any(isinstance(d, DimExpr) for d in out):
                raise ctx.unsupported("resizing to sizes that depend on a dynamic axis")
            attrs["sizes"] = [int(d) for d in out]
        return ctx.emit("tract_core_resize", [ctx.cast(x, dtype)], attrs)
    if any(r is None for r in ratios):
        raise ctx.unsupported(
            f"{ctx.kind} by a non-integer factor for this target",
            f"export with TractNNEF >= {VERSION_GATES['resize_grid_sample'].first.to_str()} "
            "(tract_core_resize) or use integer scale factors",
        )
    factor = [int(r) for r in ratios if r is not None]
    if mode == "nearest":
        return ctx.emit("nearest_upsample", [ctx.cast(x, dtype)], {"factor": factor})
    if mode == "nearest_exact":
        # With integer factors, (dst + 0.5) / f floors like dst / f.
        return ctx.emit("nearest_upsample", [ctx.cast(x, dtype)], {"factor": factor})
    method = "aligned" if align_corners else "symmetric"
    return ctx.emit("multilinear_upsample", [ctx.cast(x, dtype)],
                    {"factor": factor, "method": method, "border": "replicate"})


@handler("aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d", args="t *")
# Dequantized, though it only copies values: tract's optimized nearest_upsample of a
# quantized tensor loses its type (the codes read back as plain u8; 0.21 to 0.23).
@torch_quantized("dequantize")
def upsample_nearest(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _resize(ctx, x, "nearest", False, 2)


@handler("aten::_upsample_nearest_exact1d", "aten::_upsample_nearest_exact2d", "aten::_upsample_nearest_exact3d",
         args="t *")
@torch_quantized("dequantize")
def upsample_nearest_exact(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::_upsample_nearest_exact2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    return _resize(ctx, x, "nearest_exact", False, 2)


@handler("aten::upsample_linear1d", "aten::upsample_bilinear2d", "aten::upsample_trilinear3d", args="t _ b *")
@torch_quantized("dequantize")
def upsample_linear(ctx: OpContext, x: NTensor, align_corners: bool) -> NTensor:
    """aten::upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""  # noqa: E501
    if ctx.kind.endswith("_aa"):
        raise ctx.unsupported("antialiased interpolation")
    return _resize(ctx, x, "linear", align_corners, 3)


@handler("aten::pixel_shuffle", args="t i")
def pixel_shuffle(ctx: OpContext, x: NTensor, r: int) -> NTensor:
    """aten::pixel_shuffle(Tensor self, int upscale_factor) -> Tensor"""
    if x.rank < 3:
        raise ctx.unsupported(f"pixel_shuffle of a rank-{x.rank} tensor")
    c = x.rank - 3
    ctx.static(x, [c], "pixel_shuffle")
    ch, h, w = x.shape[c:]
    lead = tuple(x.shape[:c])
    # [*, C*r*r, H, W] -> [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H*r, W*r]
    split = lead + (int(ch) // (r * r), r, r, h, w)
    t = ctx.tmp("reshape", [x], {"shape": [int(ch) // (r * r), r, r], "axis_start": c, "axis_count": 1},
                dtype=x.dtype, shape=split, suffix="split")
    perm = list(range(c)) + [c, c + 3, c + 1, c + 4, c + 2]
    t = ctx.tmp("transpose", [t], {"axes": perm}, suffix="moved")
    rows = lead + (split[c], ctx.out_shape()[c + 1], w, r)
    t = ctx.tmp("reshape", [t], {"shape": [-1], "axis_start": c + 1, "axis_count": 2},
                dtype=x.dtype, shape=rows, suffix="rows")
    return ctx.emit("reshape", [t], {"shape": [-1], "axis_start": c + 2, "axis_count": 2})


@handler("aten::pixel_unshuffle", args="t i")
def pixel_unshuffle(ctx: OpContext, x: NTensor, r: int) -> NTensor:
    """aten::pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor"""
    if x.rank < 3:
        raise ctx.unsupported(f"pixel_unshuffle of a rank-{x.rank} tensor")
    c = x.rank - 3
    ctx.static(x, [c], "pixel_unshuffle")
    ch = x.shape[c]
    lead = tuple(x.shape[:c])
    out = ctx.out_shape()
    h, w = out[c + 1], out[c + 2]
    # [*, C, H*r, W*r] -> [*, C, H, r, W, r] -> [*, C, r, r, H, W] -> [*, C*r*r, H, W]
    t = ctx.tmp("reshape", [x], {"shape": [-1, r], "axis_start": c + 1, "axis_count": 1},
                dtype=x.dtype, shape=lead + (ch, h, r, x.shape[c + 2]), suffix="rows")
    t = ctx.tmp("reshape", [t], {"shape": [-1, r], "axis_start": c + 3, "axis_count": 1},
                dtype=x.dtype, shape=lead + (ch, h, r, w, r), suffix="cols")
    perm = list(range(c)) + [c, c + 2, c + 4, c + 1, c + 3]
    t = ctx.tmp("transpose", [t], {"axes": perm}, suffix="moved")
    return ctx.emit("reshape", [t], {"shape": [int(ch) * r * r], "axis_start": c, "axis_count": 3})


@handler("aten::upsample_bicubic2d", "aten::_upsample_bicubic2d_aa", args="t _ b *",
         since="resize_grid_sample")
def upsample_bicubic(ctx: OpContext, x: NTensor, align_corners: bool) -> NTensor:
    """aten::upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor  (tract_core_resize's cubic kernel is torch's, a = -0.75)"""  # noqa: E501
    if ctx.kind.endswith("_aa"):
        raise ctx.unsupported("antialiased bicubic interpolation", "interpolate with antialias=False")
    return _resize(ctx, x, "cubic", align_corners, 3)
