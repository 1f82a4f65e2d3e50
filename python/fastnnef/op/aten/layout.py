"""Layout ops composed from the shape primitives: atleast_Nd, broadcast_tensors,
h/v/d/column stacks and splits, movedim, ravel, rot90, fliplr/flipud, matrix transposes
(mT, mH, adjoint), tile, repeat_interleave, channel_shuffle, unfold (sliding windows),
block_diag, and torch's ``*_copy`` forms of view ops (same handlers as the views)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import (
    broadcast_shapes,
    is_static,
    times,
    unknown,
    volume,
)
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.aten._slices import split_pieces
from fastnnef.op.aten.indexing import flip
from fastnnef.op.aten.shape import repeat
from fastnnef.op.context import OpContext
from fastnnef.op.registry import DEFAULT_REGISTRY, handler

# Axes atleast_{n}d inserts into a rank-r tensor, keyed (n, r): torch puts a 1-D input in
# the middle of a 3-D result ([n] -> [1, n, 1]).
_ATLEAST_AXES = {
    (1, 0): [0], (2, 0): [0, 1], (2, 1): [0], (3, 0): [0, 1, 2], (3, 1): [0, 2], (3, 2): [2],
}


def _atleast(ctx: OpContext, t: NTensor, n: int, suffix: str) -> NTensor:
    axes = _ATLEAST_AXES.get((n, t.rank))
    return ctx.tmp("unsqueeze", [t], {"axes": axes}, suffix=suffix) if axes else t


@handler("aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d", args="t")
def atleast(ctx: OpContext, x: NTensor) -> list[NTensor]:
    """aten::atleast_2d(Tensor self) -> Tensor  (also .Sequence(Tensor[] tensors) -> Tensor[], atleast_1d/3d)"""
    return atleast_sequence(ctx, [x])


@handler("aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d", args="L", overload="Sequence")
def atleast_sequence(ctx: OpContext, tensors: list[NTensor]) -> list[NTensor]:
    """aten::atleast_2d.Sequence(Tensor[] tensors) -> Tensor[]"""
    n = int(ctx.kind[-2])
    out = []
    for k, t in enumerate(tensors):
        axes = _ATLEAST_AXES.get((n, t.rank))
        out.append(ctx.emit("unsqueeze", [t], {"axes": axes}, out=k) if axes
                   else ctx.emit("copy", [t], out=k, shape=t.shape))
    return out


@handler("aten::broadcast_tensors", args="L")
def broadcast_tensors(ctx: OpContext, tensors: list[NTensor]) -> list[NTensor]:
    """aten::broadcast_tensors(Tensor[] tensors) -> Tensor[]"""
    target = broadcast_shapes([t.shape for t in tensors], "broadcast_tensors")
    out = []
    for k, t in enumerate(tensors):
        t = ctx.to_rank(t, len(target))
        if tuple(t.shape) == tuple(target):
            out.append(ctx.emit("copy", [t], out=k, shape=target))
            continue
        if any(unknown(d) for d in target):
            raise ctx.unsupported("broadcast_tensors of dynamic axes whose sizes only match at run time")
        out.append(ctx.emit("tract_core_broadcast", [t], {"shape": list(target)}, out=k, shape=target))
    return out


# --- stacks and splits ------------------------------------------------------------------
def _concat(ctx: OpContext, parts: Sequence[NTensor], axis: int) -> NTensor:
    dtype = ctx.out_dtype()
    parts = [ctx.cast(p, dtype) for p in parts]
    if len(parts) == 1:
        return ctx.emit("copy", parts)
    return ctx.emit("concat", [list(parts)], {"axis": axis})


@handler("aten::vstack", "aten::row_stack", args="L")
def vstack(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::vstack(Tensor[] tensors) -> Tensor"""
    return _concat(ctx, [_atleast(ctx, t, 2, f"2d{k}") for k, t in enumerate(tensors)], 0)


@handler("aten::hstack", args="L")
def hstack(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::hstack(Tensor[] tensors) -> Tensor"""
    parts = [_atleast(ctx, t, 1, f"1d{k}") for k, t in enumerate(tensors)]
    return _concat(ctx, parts, 0 if all(p.rank == 1 for p in parts) else 1)


@handler("aten::dstack", args="L")
def dstack(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::dstack(Tensor[] tensors) -> Tensor"""
    return _concat(ctx, [_atleast(ctx, t, 3, f"3d{k}") for k, t in enumerate(tensors)], 2)


@handler("aten::column_stack", args="L")
def column_stack(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::column_stack(Tensor[] tensors) -> Tensor"""
    # 0-d and 1-d tensors become columns ([n] -> [n, 1]).
    columns = {0: [0, 1], 1: [1]}
    parts = [ctx.tmp("unsqueeze", [t], {"axes": columns[t.rank]}, suffix=f"col{k}") if t.rank < 2 else t
             for k, t in enumerate(tensors)]
    return _concat(ctx, parts, 1)


@handler("aten::vsplit", "aten::hsplit", "aten::dsplit", args="t _")
def hvdsplit(ctx: OpContext, x: NTensor) -> list[NTensor]:
    """aten::hsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]  (also .array, vsplit, dsplit)"""
    kind = ctx.kind
    axis = {"aten::vsplit": 0, "aten::dsplit": 2}.get(kind, 1 if x.rank > 1 else 0)
    if x.rank <= axis:
        raise ctx.unsupported(f"{kind} of a rank-{x.rank} tensor", "torch needs one more dimension")
    return split_pieces(ctx, x, axis)


# --- axis moves and flips ---------------------------------------------------------------
@handler("aten::movedim", "aten::moveaxis", args="t I I")
def movedim(ctx: OpContext, x: NTensor, source: list[int], destination: list[int]) -> NTensor:
    """aten::movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)  (also .int)"""
    if len(source) != len(destination):
        raise ctx.unsupported("movedim with a different number of source and destination dims")
    src = [ctx.axis(s, x.rank) for s in source]
    perm: list[int | None] = [None] * x.rank
    for s, d in zip(src, destination):
        perm[ctx.axis(d, x.rank)] = s
    rest = iter(a for a in range(x.rank) if a not in src)
    axes = [p if p is not None else next(rest) for p in perm]
    if axes == list(range(x.rank)):
        return ctx.emit("copy", [x])
    return ctx.emit("transpose", [x], {"axes": axes})


@handler("aten::ravel", args="t")
def ravel(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::ravel(Tensor(a) self) -> Tensor(a)"""
    # The IR loses a dynamic axis merged into the flat one: state its size here.
    if x.rank == 1:
        return ctx.emit("copy", [x], shape=x.shape)
    return ctx.emit("reshape", [x], {"shape": [-1]}, shape=(volume(x.shape),))


def _swap_last(ctx: OpContext, x: NTensor, a: int, b: int) -> NTensor:
    axes = list(range(x.rank))
    axes[a], axes[b] = axes[b], axes[a]
    return ctx.emit("transpose", [x], {"axes": axes}, shape=tuple(x.shape[i] for i in axes))


@handler("aten::mT", "aten::mH", "aten::adjoint", "aten::matrix_H", args="t")
def matrix_transpose(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::mT(Tensor(a) self) -> Tensor(a)  (mH, adjoint, matrix_H: no complex dtypes in tract, so the same)"""
    if x.rank < 2 or (ctx.kind == "aten::matrix_H" and x.rank != 2):
        raise ctx.unsupported(f"{ctx.kind} of a rank-{x.rank} tensor", "torch needs a matrix (a batch for mT/mH)")
    return _swap_last(ctx, x, x.rank - 2, x.rank - 1)


@handler("aten::rot90", args="t i I")
def rot90(ctx: OpContext, x: NTensor, k: int, dims: list[int]) -> NTensor:
    """aten::rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor"""
    if len(dims) != 2 or x.rank < 2:
        raise ctx.unsupported(f"rot90 over dims {dims} of a rank-{x.rank} tensor", "torch needs two distinct dims")
    a, b = ctx.axis(dims[0], x.rank), ctx.axis(dims[1], x.rank)
    if a == b:
        raise ctx.unsupported(f"rot90 over the same dim twice ({dims})")
    k %= 4
    if k == 0:
        return ctx.emit("copy", [x])
    if k == 2:
        return flip(ctx, x, [a, b])
    # k=1: flip dims[1], then swap; k=3: flip dims[0], then swap (torch's definition).
    flipped = ctx.tmp("tract_core_downsample", [x], {"axis": b if k == 1 else a, "stride": -1, "modulo": 0},
                      suffix="flip")
    return _swap_last(ctx, flipped, a, b)


@handler("aten::fliplr", args="t")
def fliplr(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::fliplr(Tensor self) -> Tensor"""
    if x.rank < 2:
        raise ctx.unsupported("fliplr of a tensor with fewer than 2 dims")
    return flip(ctx, x, [1])


@handler("aten::flipud", args="t")
def flipud(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::flipud(Tensor self) -> Tensor"""
    if x.rank < 1:
        raise ctx.unsupported("flipud of a 0-d tensor")
    return flip(ctx, x, [0])


# --- repeats ----------------------------------------------------------------------------
@handler("aten::tile", args="t I")
def tile(ctx: OpContext, x: NTensor, dims: list[int]) -> NTensor:
    """aten::tile(Tensor self, SymInt[] dims) -> Tensor"""
    return repeat(ctx, x, [1] * (x.rank - len(dims)) + list(dims))


def _flat(ctx: OpContext, x: NTensor) -> NTensor:
    """``x`` as 1-D (repeat_interleave without dim works on the flattened tensor)."""
    if x.rank == 1:
        return x
    return ctx.tmp("reshape", [x], {"shape": [-1]}, dtype=x.dtype, shape=(volume(x.shape),), suffix="flat")


def _interleave_by_int(ctx: OpContext, x: NTensor, axis: int, r: int) -> NTensor:
    """Each slice along ``axis`` repeated ``r`` times in a row: unsqueeze, tile, merge."""
    u = ctx.tmp("unsqueeze", [x], {"axes": [axis + 1]}, suffix="unsq")
    repeats = [1] * u.rank
    repeats[axis + 1] = r
    tiled = ctx.tmp("tile", [u], {"repeats": repeats}, suffix="tile")
    shape = list(x.shape)
    shape[axis] = times(x.shape[axis], r)
    return ctx.emit("reshape", [tiled], {"shape": [-1], "axis_start": axis, "axis_count": 2}, shape=shape)


def _interleave_indices(ctx: OpContext, repeats: NTensor, n: int, total: int) -> NTensor:
    """Gather indices of repeat_interleave with a repeats tensor over ``n`` slices, computed
    in the graph: position p takes the slice j counted by how many running totals of
    repeats are <= p. ``total`` is the traced output length (torch's output size depends
    on the values, so the exported graph keeps the traced one: repeats must be a constant,
    else a fresh input with other repeats would run with the traced length)."""
    ctx.static(repeats, what="repeat_interleave with a repeats tensor")
    if not ctx.is_variable(repeats):
        raise ctx.unsupported(
            "repeat_interleave with a repeats tensor computed from the model inputs: the output "
            "length depends on the repeat values, which the exported graph would freeze at the traced ones",
            "make repeats a constant (an int, a buffer, a tensor built from literals)",
        )
    r = ctx.cast(repeats, "i64")
    if r.rank == 0 or r.shape[0] != n:  # one repeat for every slice
        r = ctx.tmp("tract_core_broadcast", [ctx.tmp("reshape", [r], {"shape": [1]}, dtype="i64", shape=(1,),
                                                                suffix="rep")],
                    {"shape": [n]}, suffix="reps")
    # running[j] = sum_{k <= j} repeats[k], as a masked [k, j] sum.
    upper = ctx.constant(torch.ones(n, n, dtype=torch.bool).triu(), label=f"triu_mask_{n}")
    zero = typed_scalar(ctx, 0, "i64")
    terms = ctx.tmp("select", [upper, ctx.tmp("unsqueeze", [r], {"axes": [1]}, suffix="rcol"), zero],
                    suffix="terms")
    running = ctx.tmp("sum_reduce", [terms], {"axes": [0]}, suffix="running")  # [1, n]
    positions = ctx.constant(torch.arange(total).unsqueeze(1), label=f"positions_{total}")  # [total, 1]
    passed = ctx.tmp("tract_core_cast", [ctx.tmp("le", [running, positions], suffix="le")], {"to": "i64"},
                     suffix="passed")
    count = ctx.tmp("sum_reduce", [passed], {"axes": [1]}, suffix="count")
    return ctx.tmp("squeeze", [count], {"axes": [1]}, suffix="idx")


@handler("aten::repeat_interleave", args="x x? i? *")
def repeat_interleave(ctx: OpContext, x: NTensor, repeats: object, dim: int | None) -> NTensor:
    """aten::repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor  (also .self_Tensor, .Tensor)"""  # noqa: E501
    if ctx.n_inputs == 2:  # .Tensor(repeats): the indices themselves
        ctx.static(x, what="repeat_interleave(repeats)")
        idx = _interleave_indices(ctx, x, int(x.shape[0]) if x.rank else 1, int(ctx.out_shape()[0]))
        return (ctx.emit("copy", [idx]) if ctx.out_dtype() == "i64"
                else ctx.emit("tract_core_cast", [idx], {"to": ctx.out_dtype()}))
    if dim is None:
        x, axis = _flat(ctx, x), 0
    else:
        axis = ctx.axis(dim, x.rank)
    if isinstance(repeats, int) and not isinstance(repeats, bool):
        return _interleave_by_int(ctx, x, axis, repeats)
    if not isinstance(repeats, NTensor):
        raise ctx.unsupported(f"repeat_interleave with repeats {repeats!r}", "use an int or an int tensor")
    length = ctx.out_shape()[axis]
    if not is_static(length) or not is_static(x.shape[axis]):
        raise ctx.unsupported("repeat_interleave with a repeats tensor along a dynamic axis",
                              "the output length depends on the repeat values: use an int repeat")
    idx = _interleave_indices(ctx, repeats, int(x.shape[axis]), int(length))
    return ctx.emit("tract_core_gather", [x, idx], {"axis": axis})


@handler("aten::channel_shuffle", "aten::native_channel_shuffle", args="t i")
def channel_shuffle(ctx: OpContext, x: NTensor, groups: int) -> NTensor:
    """aten::channel_shuffle(Tensor self, SymInt groups) -> Tensor  (and native_channel_shuffle)"""
    ctx.static(x, [1], "channel_shuffle")
    c = int(x.shape[1])
    if x.rank < 3 or groups < 1 or c % groups:
        raise ctx.unsupported(f"channel_shuffle of {c} channels in {groups} groups of a rank-{x.rank} tensor",
                              "torch needs [N, C, *] with C divisible by groups")
    split = list(x.shape)
    split[1:2] = [groups, c // groups]
    grouped = ctx.tmp("reshape", [x], {"shape": [groups, c // groups], "axis_start": 1, "axis_count": 1},
                      dtype=x.dtype, shape=split, suffix="groups")
    axes = list(range(grouped.rank))
    axes[1], axes[2] = 2, 1
    swapped = ctx.tmp("transpose", [grouped], {"axes": axes}, suffix="swap")
    return ctx.emit("reshape", [swapped], {"shape": [c], "axis_start": 1, "axis_count": 2}, shape=x.shape)


# --- sliding windows --------------------------------------------------------------------
@handler("aten::unfold", "aten::unfold_copy", args="t i i i")
def unfold(ctx: OpContext, x: NTensor, dim: int, size: int, step: int) -> NTensor:
    """aten::unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)  (and unfold_copy)"""
    if x.rank == 0:  # torch: a 0-d tensor unfolds to [size] (size must be 1)
        return ctx.emit("unsqueeze", [x], {"axes": [0]})
    axis = ctx.axis(dim, x.rank)
    if step < 1 or size < 0:
        raise ctx.unsupported(f"unfold with size {size} and step {step}", "torch needs step >= 1")
    n = x.shape[axis]
    # windows[w, k] = w * step + k, gathered along the axis: [..., W, size, ...].
    if is_static(n):
        count: Size = (int(n) - size) // step + 1
        starts: NTensor = ctx.constant(torch.arange(int(count)).unsqueeze(1) * step)
    else:
        if unknown(n):
            raise ctx.unsupported("unfold along a dynamic axis whose size expression is unknown")
        count = (n - size) // step + 1
        rng = ctx.tmp("tract_core_range", [0, count, 1], dtype="i64", shape=(count,), suffix="windows")
        scaled = ctx.tmp("mul", [rng, typed_scalar(ctx, step, "i64")], suffix="starts") if step > 1 else rng
        starts = ctx.tmp("unsqueeze", [scaled], {"axes": [1]}, suffix="startc")
    offsets = ctx.constant(torch.arange(size).unsqueeze(0), label=f"unfold_offsets_{size}")
    idx = ctx.tmp("add", [starts, offsets], suffix="idx")
    windows = ctx.tmp("tract_core_gather", [x, idx], {"axis": axis}, suffix="gather")
    # torch puts the window axis last.
    axes = list(range(axis + 1)) + list(range(axis + 2, x.rank + 1)) + [axis + 1]
    if axes == list(range(x.rank + 1)):
        return ctx.emit("copy", [windows], shape=windows.shape)
    return ctx.emit("transpose", [windows], {"axes": axes}, shape=tuple(windows.shape[a] for a in axes))


@handler("aten::block_diag", args="L")
def block_diag(ctx: OpContext, tensors: list[NTensor]) -> NTensor:
    """aten::block_diag(Tensor[] tensors) -> Tensor"""
    dtype = ctx.out_dtype()
    blocks = []
    for k, t in enumerate(tensors):
        ctx.static(t, what="block_diag")
        if t.rank > 2:
            raise ctx.unsupported(f"block_diag of a rank-{t.rank} tensor", "torch takes tensors of at most 2 dims")
        if t.rank < 2:  # 0-d -> [1, 1], 1-d [n] -> [1, n]
            t = ctx.tmp("unsqueeze", [t], {"axes": list(range(2 - t.rank))}, suffix=f"blk{k}")
        blocks.append(ctx.cast(t, dtype))
    width = sum(int(b.shape[1]) for b in blocks)
    rows, left = [], 0
    for k, b in enumerate(blocks):
        cols = int(b.shape[1])
        if cols == width:
            rows.append(b)
        else:  # zeros on both sides of the block, so each row band spans the full width
            rows.append(ctx.tmp("pad", [b], {"padding": [Tuple((0, 0)), Tuple((left, width - left - cols))],
                                             "border": "constant", "value": 0.0},
                                dtype=dtype, shape=(b.shape[0], width), suffix=f"row{k}"))
        left += cols
    return _concat(ctx, rows, 0)


# --- *_copy forms of view ops -----------------------------------------------------------
# torch's functionalized graphs (and torch.*_copy) name view ops with a _copy suffix: the
# result is the same values without aliasing, so the view's handler serves as is.
_VIEW_COPIES = {
    "aten::view_copy": "aten::view",
    "aten::_reshape_copy": "aten::reshape",
    "aten::permute_copy": "aten::permute",
    "aten::transpose_copy": "aten::transpose",
    "aten::t_copy": "aten::t",
    "aten::squeeze_copy": "aten::squeeze",
    "aten::unsqueeze_copy": "aten::unsqueeze",
    "aten::expand_copy": "aten::expand",
    "aten::slice_copy": "aten::slice",
    "aten::select_copy": "aten::select",
    "aten::narrow_copy": "aten::narrow",
    "aten::split_copy": "aten::split",
    "aten::split_with_sizes_copy": "aten::split_with_sizes",
    "aten::unbind_copy": "aten::unbind",
}


def _register_view_copies() -> None:
    for copy, view in _VIEW_COPIES.items():
        spec = DEFAULT_REGISTRY.lookup(view, None)
        assert spec is not None, view
        handler(copy, args=" ".join(spec.arg_kinds))(spec.fn)


_register_view_copies()


@handler("aten::alias_copy", "aten::detach_copy", args="t")
def identity_copy(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::alias_copy(Tensor self) -> Tensor  (and detach_copy)"""
    return ctx.emit("copy", [x])
