"""Padding (aten::pad, constant_pad_nd, reflection/replication pads) and pooling (max/avg,
adaptive max/avg).

NNEF pools take ``size``/``stride``/``dilation``/``padding`` over every axis, batch and
channel included (``[1, 1, kh, kw]``). torch's ``ceil_mode`` becomes extra trailing padding
that the pool ignores (``border='ignore'``), so the window count matches the traced output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import add_dims, unknown
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.aten.quantized import torch_quantized
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

# ----------------------------------------------------------------------------------------
# padding


def _pairs(ctx: OpContext, pad: Sequence[Size], rank: int) -> list[tuple[Size, Size]]:
    """torch's flat ``pad`` (last axis first: l, r, l, r...) as per-axis (before, after)."""
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise ctx.unsupported(f"padding {list(pad)} for a rank-{rank} tensor")
    pairs: list[tuple[Size, Size]] = [(0, 0)] * rank
    for i in range(len(pad) // 2):
        pairs[rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return pairs


def _padded_shape(shape: Sequence[Size], pairs: Sequence[tuple[Size, Size]]) -> tuple[Size, ...]:
    return tuple(d if a == b == 0 else d + a + b for d, (a, b) in zip(shape, pairs))


def _by_slices(ctx: OpContext, x: NTensor, pairs: list[tuple[int, int]], mode: str) -> NTensor:
    """Padding built from slices and concat, axis by axis: circular (the wrapped-around
    ends), or replicate for strict NNEF (tract parses only its own 'replicated' border)."""
    padded = [axis for axis, (a, b) in enumerate(pairs) if a or b]
    ctx.static(x, padded, f"{mode} padding")
    if not padded:
        return ctx.emit("copy", [x])
    for n, axis in enumerate(padded):
        before, after = pairs[axis]
        size = int(x.shape[axis])
        if min(before, after) < 0 or (mode == "circular" and max(before, after) > size):
            raise ctx.unsupported(f"{mode} padding ({before}, {after}) of an axis of size {size}")
        parts = []
        for count, begin, end, tag in ((before, size - before, size, "pad_l"), (after, 0, after, "pad_r")):
            if not count:
                continue
            if mode == "replicate":  # the edge cell, tiled `count` times
                begin, end = (0, 1) if tag == "pad_l" else (size - 1, size)
            shape = list(x.shape)
            shape[axis] = end - begin
            part = ctx.tmp("slice", [x], {"axes": [axis], "begin": [begin], "end": [end]}, suffix=tag)
            if mode == "replicate" and count > 1:
                repeats = [1] * x.rank
                repeats[axis] = count
                shape[axis] = count
                part = ctx.tmp("tile", [part], {"repeats": repeats}, suffix=tag)
            parts.append(part)
        parts.insert(1 if before else 0, x)
        shape = list(x.shape)
        shape[axis] = size + before + after
        if n == len(padded) - 1:
            return ctx.emit("concat", [parts], {"axis": axis})
        x = ctx.tmp("concat", [parts], {"axis": axis}, suffix="padded")
    raise AssertionError("unreachable")


def _static(amount: Size) -> bool:
    return isinstance(amount, int) and not isinstance(amount, DimExpr)


def _cropped(amount: Size) -> int:
    return max(-int(amount), 0) if _static(amount) else 0


def _grown(amount: Size) -> Size:
    return max(int(amount), 0) if _static(amount) else amount


def _pad_by_concat(ctx: OpContext, x: NTensor, pairs: list[tuple[Size, Size]], value: float) -> NTensor:
    """Constant padding by amounts that are sizes of dynamic axes: tract's ``pad`` takes
    integers only, so each side is a block of ``value`` broadcast to its symbolic shape,
    concatenated to ``x``."""
    if ctx.strict:
        raise ctx.unsupported("padding by an amount that depends on a dynamic axis in strict NNEF")
    fill = typed_scalar(ctx, value, x.dtype)
    for axis, (before, after) in enumerate(pairs):
        if _static(before) and _static(after) and before == after == 0:
            continue
        parts: list[NTensor] = []
        size = x.shape[axis]
        for amount, first in ((before, True), (after, False)):
            if _static(amount) and amount == 0:
                continue
            shape = list(x.shape)
            shape[axis] = amount
            block = ctx.tmp("tract_core_broadcast", [fill], {"shape": shape}, dtype=x.dtype, shape=tuple(shape),
                            suffix="fill")
            parts.insert(0 if first else len(parts), block)
            size = add_dims(size, amount)
        parts.insert(1 if not (_static(before) and before == 0) else 0, x)
        shape = list(x.shape)
        shape[axis] = size
        x = ctx.tmp("concat", [parts], {"axis": axis}, dtype=x.dtype, shape=tuple(shape), suffix="padded")
    return ctx.emit("copy", [x])


def _pad_by_gather(ctx: OpContext, x: NTensor, pairs: list[tuple[Size, Size]], mode: str) -> NTensor:
    """Reflect or replicate padding by amounts that are sizes of dynamic axes (a codec's
    extra padding): each padded axis is gathered from positions computed in the graph.
    With ``t = j - before`` over the padded range, reflect reads ``min(|t|, 2(n-1) - |t|)``
    and replicate ``clamp(t, 0, n-1)`` (torch needs amounts below n for reflect)."""
    if ctx.strict:
        raise ctx.unsupported(f"{mode} padding by an amount that depends on a dynamic axis in strict NNEF")
    for axis, (before, after) in enumerate(pairs):
        if _static(before) and _static(after) and before == after == 0:
            continue
        n = x.shape[axis]
        if unknown(n):
            raise ctx.unsupported(f"{mode} padding of an axis whose dynamic size is unknown")
        total = add_dims(add_dims(n, before), after)
        positions = ctx.tmp("tract_core_range", [0, total, 1], dtype="i64", shape=(total,), suffix="positions")
        t = ctx.tmp("sub", [positions, typed_scalar(ctx, before, "i64")], suffix="from")
        last = typed_scalar(ctx, _dim_plus(n, -1), "i64")
        if mode == "reflect":
            distance = ctx.tmp("abs", [t], suffix="distance")
            mirrored = ctx.tmp("sub", [typed_scalar(ctx, _dim_times(_dim_plus(n, -1), 2), "i64"), distance],
                               suffix="mirrored")
            index = ctx.tmp("min", [distance, mirrored], suffix="index")
        else:
            index = ctx.tmp("max", [ctx.tmp("min", [t, last], suffix="below"), typed_scalar(ctx, 0, "i64")],
                            suffix="index")
        shape = list(x.shape)
        shape[axis] = total
        x = ctx.tmp("tract_core_gather", [x, index], {"axis": axis}, dtype=x.dtype, shape=tuple(shape),
                    suffix="padded")
    return ctx.emit("copy", [x])


def _dim_plus(d: Size, k: int) -> Size:
    return d + k


def _dim_times(d: Size, k: int) -> Size:
    return d * k


def pad_tensor(ctx: OpContext, x: NTensor, pad: Sequence[Size], mode: str, value: float | None) -> NTensor:
    pairs = _pairs(ctx, pad, x.rank)
    if mode == "circular" or (mode == "replicate" and ctx.strict):
        if not all(_static(a) and _static(b) for a, b in pairs):
            raise ctx.unsupported(f"{mode} padding by an amount that depends on a dynamic axis ({list(pad)})")
        return _by_slices(ctx, x, pairs, mode)  # type: ignore[arg-type]
    border = {"constant": "constant", "reflect": "reflect", "replicate": "replicated"}.get(mode)
    if border is None:
        raise ctx.unsupported(f"padding mode {mode!r}", "use constant, reflect, replicate or circular")
    # An amount computed from a dynamic size (window padding: (ws - W % ws) % ws) is a
    # size itself, so not negative: it only grows its axis.
    crop = [(_cropped(a), _cropped(b)) for a, b in pairs]
    grow = [(_grown(a), _grown(b)) for a, b in pairs]
    if all(_static(a) and _static(b) and a == b == 0 for a, b in pairs):
        return ctx.emit("copy", [x])
    if not all(_static(a) and _static(b) for a, b in grow):
        if border != "constant":
            return _pad_by_gather(ctx, x, grow, mode)
        return _pad_by_concat(ctx, x, grow, float(value or 0.0))
    attrs: dict[str, Any] = {"padding": [Tuple(p) for p in grow], "border": border}
    if border == "constant":
        attrs["value"] = float(value or 0.0)
    if not any(a or b for a, b in crop):
        return ctx.emit("pad", [x], attrs)
    if mode != "constant":
        raise ctx.unsupported(f"negative padding in {mode} mode")
    # Negative amounts crop (constant mode only): pad the positive part, slice the rest.
    axes = [axis for axis, (a, b) in enumerate(crop) if a or b]
    ctx.static(x, axes, "negative padding")
    if any(a or b for a, b in grow):
        x = ctx.tmp("pad", [x], attrs, dtype=x.dtype, shape=_padded_shape(x.shape, grow), suffix="grow")
    return ctx.emit("slice", [x], {
        "axes": axes,
        "begin": [crop[axis][0] for axis in axes],
        "end": [int(x.shape[axis]) - crop[axis][1] for axis in axes],
    })


@handler("aten::pad", args="t D s f?")
@torch_quantized("dequantize")  # a pad value is a real value, not a code
def pad(ctx: OpContext, x: NTensor, padding: list[Size], mode: str, value: float | None) -> NTensor:
    """aten::pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    return pad_tensor(ctx, x, padding, mode, value)


@handler("aten::constant_pad_nd", args="t D f?")
@torch_quantized("dequantize")  # a pad value is a real value, not a code
def constant_pad_nd(ctx: OpContext, x: NTensor, padding: list[Size], value: float | None) -> NTensor:
    """aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return pad_tensor(ctx, x, padding, "constant", value)


@handler("aten::reflection_pad1d", "aten::reflection_pad2d", "aten::reflection_pad3d", args="t I")
@torch_quantized("dequantize")
def reflection_pad(ctx: OpContext, x: NTensor, padding: list[int]) -> NTensor:
    """aten::reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor"""
    return pad_tensor(ctx, x, padding, "reflect", None)


@handler("aten::replication_pad1d", "aten::replication_pad2d", "aten::replication_pad3d", args="t I")
@torch_quantized("dequantize")
def replication_pad(ctx: OpContext, x: NTensor, padding: list[int]) -> NTensor:
    """aten::replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor"""
    return pad_tensor(ctx, x, padding, "replicate", None)


@handler("aten::_pad_circular", args="t I")
@torch_quantized("dequantize")
def pad_circular(ctx: OpContext, x: NTensor, padding: list[int]) -> NTensor:
    """aten::_pad_circular(Tensor self, SymInt[] pad) -> Tensor"""
    return pad_tensor(ctx, x, padding, "circular", None)


# ----------------------------------------------------------------------------------------
# pooling

_SPATIAL = re.compile(r"pool(\d)d")


def _n_spatial(ctx: OpContext) -> int:
    """Spatial rank from the op name (max_pool2d -> 2)."""
    match = _SPATIAL.search(ctx.kind)
    assert match, ctx.kind
    return int(match.group(1))


def _expand(ctx: OpContext, values: Sequence[int], n: int, what: str, default: Sequence[int]) -> list[int]:
    values = list(values) or list(default)
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise ctx.unsupported(f"{what} {values} for {n} spatial axes")
    return values


class _Batched:
    """Pools need NC + spatial axes: an unbatched input gets a unit batch axis, removed
    again by the last op (emitted under the node's output name)."""

    def __init__(self, ctx: OpContext, x: NTensor, n: int):
        if x.rank not in (n + 1, n + 2):
            raise ctx.unsupported(f"a {n}-d pool of a rank-{x.rank} tensor")
        self.ctx = ctx
        self.added = x.rank == n + 1
        self.x = x if not self.added else ctx.tmp("unsqueeze", [x], {"axes": [0]}, suffix="batch")

    def out_shape(self, index: int = 0) -> tuple[Size, ...]:
        shape = self.ctx.out_shape(index)
        return (1,) + shape if self.added else shape

    def emit(self, kind: str, args: list, attrs: dict, suffix: str = "pool") -> NTensor:
        if not self.added:
            return self.ctx.emit(kind, args, attrs)
        t = self.ctx.tmp(kind, args, attrs, dtype=self.ctx.out_dtype(), shape=self.out_shape(), suffix=suffix)
        return self.ctx.emit("squeeze", [t], {"axes": [0]})


def _window_padding(
    ctx: OpContext, x: NTensor, out: Sequence[Size], kernel: Sequence[int], stride: Sequence[int],
    padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
) -> list[tuple[int, int]]:
    """Per spatial axis (before, after); ceil_mode adds trailing cells so that the floor
    formula gives the traced output size."""
    n = len(kernel)
    pads = [(p, p) for p in padding]
    if not ceil_mode:
        return pads
    axes = list(range(x.rank - n, x.rank))
    ctx.static(x, axes, "ceil_mode pooling")
    for i, axis in enumerate(axes):
        size, o = int(x.shape[axis]), int(out[axis])
        extra = max(0, (o - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - (size + 2 * padding[i]))
        pads[i] = (padding[i], padding[i] + extra)
    return pads


def _full(values: Sequence[int], fill: int = 1) -> list[int]:
    return [fill, fill] + list(values)


def _full_pads(pads: Sequence[tuple[int, int]]) -> list[Tuple]:
    return [Tuple((0, 0)), Tuple((0, 0))] + [Tuple(p) for p in pads]


def _max_pool_with_indices(ctx: OpContext, x: NTensor, attrs: dict) -> list[NTensor]:
    """Values and indices (flat over the spatial axes of each plane, as torch's), from
    tract's max_pool_with_index (batched input only)."""
    return list(ctx.emit_multi("max_pool_with_index", [x], attrs, outs=[0, 1]))


def _max_pool(
    ctx: OpContext, x: NTensor, kernel: list[int], stride: list[int], padding: list[int],
    dilation: list[int], ceil_mode: bool, with_indices: bool,
) -> NTensor | list[NTensor]:
    n = _n_spatial(ctx)
    kernel = _expand(ctx, kernel, n, "kernel_size", [])
    stride = _expand(ctx, stride, n, "stride", kernel)
    padding = _expand(ctx, padding, n, "padding", [0])
    dilation = _expand(ctx, dilation, n, "dilation", [1])
    b = _Batched(ctx, x, n)
    pads = _window_padding(ctx, b.x, b.out_shape(), kernel, stride, padding, dilation, ceil_mode)
    attrs = {
        "size": _full(kernel),
        "border": "ignore",  # padded cells never win: torch pads max pools with -inf
        "padding": _full_pads(pads),
        "stride": _full(stride),
        "dilation": _full(dilation),
    }
    if with_indices:
        if b.added:
            raise ctx.unsupported("pooling indices of an unbatched input", "add the batch axis with unsqueeze(0)")
        return _max_pool_with_indices(ctx, b.x, attrs)
    return b.emit("max_pool", [b.x], attrs)


@handler("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", args="t I I I I b")
@torch_quantized("codes")
def max_pool(
    ctx: OpContext, x: NTensor, kernel: list[int], stride: list[int], padding: list[int],
    dilation: list[int], ceil_mode: bool,
) -> NTensor:
    """aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor"""  # noqa: E501
    out = _max_pool(ctx, x, kernel, stride, padding, dilation, ceil_mode, False)
    assert isinstance(out, NTensor)
    return out


@handler("aten::max_pool1d_with_indices", "aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices",
         args="t I I I I b")
def max_pool_with_indices(
    ctx: OpContext, x: NTensor, kernel: list[int], stride: list[int], padding: list[int],
    dilation: list[int], ceil_mode: bool,
) -> list[NTensor]:
    """aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""  # noqa: E501
    out = _max_pool(ctx, x, kernel, stride, padding, dilation, ceil_mode, True)
    assert isinstance(out, list)
    return out


@handler("aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d", args="t I I I b b i?")
@torch_quantized("dequantize")
def avg_pool(
    ctx: OpContext, x: NTensor, kernel: list[int], stride: list[int], padding: list[int],
    ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
) -> NTensor:
    """aten::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""  # noqa: E501
    n = _n_spatial(ctx)
    kernel = _expand(ctx, kernel, n, "kernel_size", [])
    stride = _expand(ctx, stride, n, "stride", kernel)
    padding = _expand(ctx, padding, n, "padding", [0])
    b = _Batched(ctx, x, n)
    dtype = ctx.out_dtype()
    src = b.x
    pads = _window_padding(ctx, src, b.out_shape(), kernel, stride, padding, [1] * n, ceil_mode)
    border = "constant" if count_include_pad else "ignore"
    if count_include_pad and any(after != before for before, after in pads) and any(padding):
        # torch counts the declared padding in the divisor but not the ceil_mode overhang:
        # pad explicitly with zeros, then let the pool ignore only the overhang.
        zeros = [(p, p) for p in padding]
        src = ctx.tmp("pad", [src], {"padding": _full_pads(zeros), "border": "constant", "value": 0.0},
                      dtype=dtype, shape=_padded_shape(src.shape, [(0, 0), (0, 0)] + zeros), suffix="zeros")
        pads = [(0, after - before) for before, after in pads]
        border = "ignore"
    elif count_include_pad and any(after != before for before, after in pads):
        border = "ignore"  # no declared padding: only the overhang, which torch excludes
    attrs = {
        "size": _full(kernel),
        "border": border,
        "padding": _full_pads(pads),
        "stride": _full(stride),
    }
    if divisor_override is None:
        return b.emit("avg_pool", [src], attrs)
    total = ctx.tmp("box", [src], {**attrs, "normalize": False}, dtype=dtype, shape=b.out_shape(), suffix="sum")
    return b.emit("div", [total, float(divisor_override)], {}, suffix="avg")


# ----------------------------------------------------------------------------------------
# adaptive pooling


def _adaptive(ctx: OpContext, x: NTensor, output_size: list[int], kind: str) -> NTensor:
    """Adaptive pooling axis by axis (max and mean over a rectangle are separable).

    Per axis: same size -> nothing; output 1 -> a reduce (dynamic sizes fine); an exact
    divisor -> a pool; otherwise torch's bins ``[floor(i*L/O), ceil((i+1)*L/O))`` as
    slices reduced one by one and concatenated."""
    n = _n_spatial(ctx)
    b = _Batched(ctx, x, n)
    src = b.x
    rank = src.rank
    # The traced output_size, not the output shape: the IR marks a pooled dynamic axis as
    # dynamic-unknown even when its size is the constant O.
    out: dict[int, Size] = dict(zip(range(rank - n, rank), _expand(ctx, output_size, n, "output_size", [])))
    reduce_kind = "mean_reduce" if kind == "avg" else "max_reduce"
    axes = list(range(rank - n, rank))
    todo = [a for a in axes if out[a] != src.shape[a]]
    ones = [a for a in todo if out[a] == 1]
    if ones and len(ones) == len(todo):
        return b.emit(reduce_kind, [src], {"axes": ones})
    ctx.static(src, todo, f"adaptive_{kind}_pool to a size other than 1")
    if all(int(src.shape[a]) % int(out[a]) == 0 for a in todo):
        k = [int(src.shape[a]) // int(out[a]) if a in todo else 1 for a in axes]
        attrs = {"size": _full(k), "border": "ignore", "padding": _full_pads([(0, 0)] * n), "stride": _full(k)}
        return b.emit("avg_pool" if kind == "avg" else "max_pool", [src], attrs)
    cur = src
    for i, axis in enumerate(todo):
        last = i == len(todo) - 1
        size, o = int(cur.shape[axis]), int(out[axis])
        pieces = []
        for j in range(o):
            begin, end = (j * size) // o, -((-(j + 1) * size) // o)
            shape = list(cur.shape)
            shape[axis] = end - begin
            piece = ctx.tmp("slice", [cur], {"axes": [axis], "begin": [begin], "end": [end]}, suffix="bin")
            shape[axis] = 1
            pieces.append(ctx.tmp(reduce_kind, [piece], {"axes": [axis]}, suffix="bin_r"))
        shape = list(cur.shape)
        shape[axis] = o
        if last:
            return b.emit("concat", [pieces], {"axis": axis})
        cur = ctx.tmp("concat", [pieces], {"axis": axis}, suffix="bins")
    return cur


@handler("aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
         "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d", args="t I")
@torch_quantized("dequantize")
def adaptive_avg_pool(ctx: OpContext, x: NTensor, output_size: list[int]) -> NTensor:
    """aten::adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    return _adaptive(ctx, x, output_size, "avg")


@handler("aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d", "aten::adaptive_max_pool3d", args="t I")
def adaptive_max_pool(ctx: OpContext, x: NTensor, output_size: list[int]) -> Sequence[NTensor | None]:
    """aten::adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)"""
    n = _n_spatial(ctx)
    axes = list(range(x.rank - n, x.rank))
    out = dict(zip(axes, _expand(ctx, output_size, n, "output_size", [])))
    if x.rank == n + 2 and all(x.is_static() and int(x.shape[a]) % int(out[a]) == 0 for a in axes):
        # One max pool window per output cell: tract's max_pool_with_index gives torch's indices.
        k = [int(x.shape[a]) // int(out[a]) for a in axes]
        attrs = {"size": _full(k), "border": "ignore", "padding": _full_pads([(0, 0)] * n),
                 "stride": _full(k), "dilation": _full([1] * n)}
        return _max_pool_with_indices(ctx, x, attrs)
    # Values only: the indices stay unbound, so a use of them fails at that use.
    return [_adaptive(ctx, x, output_size, "max"), None]
