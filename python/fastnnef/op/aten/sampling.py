"""Sampling and patches: grid_sampler (F.grid_sample), affine_grid_generator
(F.affine_grid), im2col / col2im (nn.Unfold / nn.Fold, F.unfold / F.fold). Tensor.unfold
(sliding windows along one axis) is in layout.py.

Grid sampling is ``tract_core_grid_sample`` (tract >= 0.23.2, gate ``resize_grid_sample``),
which follows torch's contract for every mode, padding mode and align_corners. An affine
grid is the export-time base grid (torch's normalized coordinates, plus ones) times the
traced theta. im2col is a convolution with one-hot filters (one output channel per kernel
tap), col2im the matching transposed convolution, which sums overlapping patches; the
channels go through the batch axis so the filters stay kernel-sized whatever the channel
count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import times
from fastnnef.op.aten._common import torch_dtype
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


# --- grid sampling ------------------------------------------------------------------------
@handler("aten::grid_sampler", "aten::grid_sampler_2d", "aten::grid_sampler_3d", args="t t i i b",
         since="resize_grid_sample")
def grid_sampler(ctx: OpContext, x: NTensor, grid: NTensor, mode: int, padding: int, align_corners: bool) -> NTensor:
    """aten::grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""  # noqa: E501
    if mode not in _INTERPOLATION or padding not in _PADDING:
        raise ctx.unsupported(f"grid sampling mode {mode} with padding mode {padding}")
    if x.rank not in (4, 5) or grid.rank != x.rank or grid.shape[-1] != x.rank - 2:
        raise ctx.unsupported(f"grid sampling of a rank-{x.rank} input with a {list(grid.shape)} grid")
    if _INTERPOLATION[mode] == "bicubic" and x.rank != 4:
        raise ctx.unsupported("bicubic grid sampling of a volume", "torch only has it in 2-D")
    dtype = ctx.out_dtype()
    x, grid = ctx.cast(x, dtype), ctx.cast(grid, dtype)
    if _INTERPOLATION[mode] == "bicubic" and _PADDING[padding] == "border":
        x, grid = _border_margin(ctx, x, grid, align_corners)
    attrs = {"mode": _INTERPOLATION[mode], "padding_mode": _PADDING[padding], "align_corners": align_corners}
    return ctx.emit("tract_core_grid_sample", [x, grid], attrs)


def _border_margin(ctx: OpContext, x: NTensor, grid: NTensor, align_corners: bool) -> tuple[NTensor, NTensor]:
    """Bicubic sampling with border padding: torch clamps each of the 4x4 taps into the
    image, tract clamps the sample position first, which differs outside the image. With
    the image replicated 2 cells further on each side and the grid rescaled to land on the
    same pixels, tract's clamp only moves positions whose taps all read the edge anyway."""
    ctx.static(x, [2, 3], "bicubic grid sampling with border padding")
    h, w = int(x.shape[2]), int(x.shape[3])
    pads = [Tuple((0, 0)), Tuple((0, 0)), Tuple((2, 2)), Tuple((2, 2))]
    wider = ctx.tmp("pad", [x], {"padding": pads, "border": "replicated"}, dtype=x.dtype,
                    shape=x.shape[:2] + (h + 4, w + 4), suffix="margin")
    # pixel' = pixel + 2 in normalized coordinates, per axis (grid holds x then y).
    scale = [(n - 1) / (n + 3) if align_corners else n / (n + 4) for n in (w, h)]
    factor = ctx.constant(torch.tensor(scale, dtype=torch_dtype(x.dtype)).reshape(1, 1, 1, 2),
                          label=f"grid_margin_{w}x{h}_{int(align_corners)}_{x.dtype}")
    return wider, ctx.tmp("mul", [grid, factor], suffix="grid_margin")


def _steps(n: int, align_corners: bool) -> torch.Tensor:
    """torch's normalized sample positions along an axis of ``n`` (affine_grid's linspace)."""
    if n <= 1:
        return torch.zeros(max(n, 0), dtype=torch.float64)
    steps = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    return steps if align_corners else steps * (n - 1) / n


@handler("aten::affine_grid_generator", args="t I b")
def affine_grid_generator(ctx: OpContext, theta: NTensor, size: list[int], align_corners: bool) -> NTensor:
    """aten::affine_grid_generator(Tensor theta, SymInt[] size, bool align_corners) -> Tensor"""
    spatial = size[2:]
    k = len(spatial)
    if k not in (2, 3) or theta.rank != 3 or theta.shape[1:] != (k, k + 1):
        raise ctx.unsupported(f"affine grid of size {size} from a {list(theta.shape)} theta")
    dtype = ctx.out_dtype()
    # base[..., :] = (x, y[, z], 1) with x along the last axis, as torch builds it.
    axes = [_steps(n, align_corners) for n in reversed(spatial)]
    mesh = torch.meshgrid(*reversed(axes), indexing="ij")
    base = torch.stack([*reversed(mesh), torch.ones_like(mesh[0])], dim=-1).reshape(1, -1, k + 1)
    label = f"affine_grid_base_{'x'.join(map(str, spatial))}_{int(align_corners)}_{dtype}"
    base_t = ctx.constant(base.to(torch_dtype(dtype)), label=label)
    points = ctx.tmp("matmul", [base_t, ctx.cast(theta, dtype)], {"transposeA": False, "transposeB": True},
                     suffix="points")
    return ctx.emit("reshape", [points], {"shape": list(spatial), "axis_start": 1, "axis_count": 1})


# --- patches --------------------------------------------------------------------------------
def _pair(ctx: OpContext, values: Sequence[int], what: str) -> list[int]:
    values = list(values)
    if len(values) == 1:
        values *= 2
    if len(values) != 2:
        raise ctx.unsupported(f"{what} {values}: im2col/col2im take 2 values")
    return values


def _one_hot_filter(ctx: OpContext, kernel: Sequence[int], dtype: str, transposed: bool = False) -> NTensor:
    """Channel k <-> kernel tap k (row-major, torch's order): ``[kh*kw, 1, kh, kw]`` for
    conv, ``[1, kh*kw, kh, kw]`` for deconv (tract's deconv filter is [C_out, C_in, ...])."""
    kh, kw = kernel
    shape = (1, kh * kw, kh, kw) if transposed else (kh * kw, 1, kh, kw)
    data = torch.eye(kh * kw, dtype=torch_dtype(dtype)).reshape(shape)
    return ctx.constant(data, label=f"one_hot_{'deconv' if transposed else 'conv'}_filter_{kh}x{kw}_{dtype}")


def _float(ctx: OpContext, what: str) -> str:
    dtype = ctx.out_dtype()
    if dtype not in FLOAT_DTYPES:
        raise ctx.unsupported(f"{what} of {dtype} values", "tract's convolutions take floats: cast first")
    return dtype


@handler("aten::im2col", args="t I I I I")
def im2col(ctx: OpContext, x: NTensor, kernel: list[int], dilation: list[int], padding: list[int],
           stride: list[int]) -> NTensor:
    """aten::im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    dtype = _float(ctx, "im2col")
    kernel, dilation = _pair(ctx, kernel, "kernel_size"), _pair(ctx, dilation, "dilation")
    padding, stride = _pair(ctx, padding, "padding"), _pair(ctx, stride, "stride")
    if x.rank not in (3, 4):
        raise ctx.unsupported(f"im2col of a rank-{x.rank} tensor", "torch takes (C, H, W) or (N, C, H, W)")
    batched = x.rank == 4
    x = ctx.cast(x, dtype)
    if not batched:
        x = ctx.tmp("unsqueeze", [x], {"axes": [0]}, suffix="batched")
    ctx.static(x, [1], "im2col")
    n, c = x.shape[0], int(x.shape[1])
    taps = kernel[0] * kernel[1]
    rows, cols = (_patch_count(ctx, x.shape[2 + i], kernel[i], dilation[i], padding[i], stride[i]) for i in range(2))
    # [N, C, H, W] -> [N*C, 1, H, W]: one image per channel, so the filter is [taps, 1, kh, kw].
    planes = ctx.tmp("reshape", [x], {"shape": [-1, 1], "axis_start": 0, "axis_count": 2},
                     dtype=dtype, shape=(times(n, c), 1) + x.shape[2:], suffix="planes")
    patches = ctx.tmp("conv", [planes, _one_hot_filter(ctx, kernel, dtype), 0.0], {
        "border": "constant", "padding": [Tuple((p, p)) for p in padding], "stride": stride,
        "dilation": dilation, "groups": 1,
    }, dtype=dtype, shape=(times(n, c), taps, rows, cols), suffix="patches")
    # [N*C, taps, rows, cols] -> [N, C*taps, rows*cols], as torch lays the columns out.
    shape = [-1, c * taps, rows * cols] if batched else [c * taps, rows * cols]
    return ctx.emit("reshape", [patches], {"shape": shape, "axis_start": 0, "axis_count": 4})


def _patch_count(ctx: OpContext, size: Size, k: int, d: int, p: int, s: int) -> Size:
    if not isinstance(size, int):
        raise ctx.unsupported("im2col along a dynamic axis", "keep the image size static")
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@handler("aten::col2im", args="t I I I I I")
def col2im(ctx: OpContext, cols: NTensor, output_size: list[int], kernel: list[int], dilation: list[int],
           padding: list[int], stride: list[int]) -> NTensor:
    """aten::col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""  # noqa: E501
    dtype = _float(ctx, "col2im")
    size, kernel = _pair(ctx, output_size, "output_size"), _pair(ctx, kernel, "kernel_size")
    dilation, padding, stride = (_pair(ctx, v, w) for v, w in ((dilation, "dilation"), (padding, "padding"),
                                                                (stride, "stride")))
    if cols.rank not in (2, 3):
        raise ctx.unsupported(f"col2im of a rank-{cols.rank} tensor", "torch takes (C*kh*kw, L) or (N, C*kh*kw, L)")
    batched = cols.rank == 3
    cols = ctx.cast(cols, dtype)
    if not batched:
        cols = ctx.tmp("unsqueeze", [cols], {"axes": [0]}, suffix="batched")
    ctx.static(cols, [1, 2], "col2im")
    n, taps = cols.shape[0], kernel[0] * kernel[1]
    c = int(cols.shape[1]) // taps
    rows, width = (_patch_count(ctx, size[i], kernel[i], dilation[i], padding[i], stride[i]) for i in range(2))
    # [N, C*taps, rows*cols] -> [N*C, taps, rows, cols], then each tap added back in place.
    grid = ctx.tmp("reshape", [cols], {"shape": [-1, taps, rows, width], "axis_start": 0, "axis_count": 3},
                   dtype=dtype, shape=(times(n, c), taps, rows, width), suffix="taps")
    reach = [(m - 1) * s + d * (k - 1) + 1 - 2 * p
             for m, s, d, k, p in zip((rows, width), stride, dilation, kernel, padding)]
    image = ctx.tmp("deconv", [grid, _one_hot_filter(ctx, kernel, dtype, transposed=True), 0.0], {
        "border": "constant", "padding": [Tuple((p, p)) for p in padding], "stride": stride,
        "dilation": dilation, "groups": 1,
        # Cells no patch reaches (torch keeps them, as zeros): tract needs the explicit size.
        "output_shape": list(size) if reach != list(size) else [],
    }, dtype=dtype, shape=(times(n, c), 1, *size), suffix="image")
    shape = [-1, c] if batched else [c]
    return ctx.emit("reshape", [image], {"shape": shape, "axis_start": 0, "axis_count": 2})
