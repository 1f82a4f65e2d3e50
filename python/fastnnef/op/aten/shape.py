"""Shape ops: reshape/view/flatten, permute/transpose, (un)squeeze, expand/repeat,
cat/stack, split/chunk/unbind."""

from __future__ import annotations

from collections.abc import Sequence

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import same_size, unknown
from fastnnef.op.aten._slices import split_pieces
from fastnnef.op.aten.quantized import torch_quantized
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _reshape_to_output(ctx: OpContext, x: NTensor) -> NTensor:
    """Reshape ``x`` to the traced output shape, touching only the window of axes that
    changes, so dynamic axes outside it survive (tract's axis_start/axis_count).

    A dim kept outside the window must be provably the same size on both sides: equal ints
    or equal size expressions. Two unknown sizes (``?``, expressions the IR lost) are not:
    ``[?, C] -> [?, 4C]`` merges rows, so its window takes the unknown axis too."""
    out = ctx.out_shape()
    if tuple(out) == tuple(x.shape) and sum(unknown(d) for d in out) <= 1:
        return ctx.emit("copy", [x])  # a single unknown dim is fixed by the equal volumes
    pre = 0
    while pre < min(x.rank, len(out)) and same_size(x.shape[pre], out[pre]):
        pre += 1
    suf = 0
    while suf < min(x.rank, len(out)) - pre and same_size(x.shape[x.rank - 1 - suf], out[len(out) - 1 - suf]):
        suf += 1
    if not out:
        return ctx.emit("squeeze", [x], {"axes": list(range(x.rank))})
    if pre + suf == len(out):
        # Only unit axes dropped: tract rejects an empty reshape window, so widen it by one axis.
        if suf:
            suf -= 1
        else:
            pre -= 1
    window: list[Size] = list(out[pre : len(out) - suf])
    free = [i for i, d in enumerate(window) if unknown(d)]
    if len(free) > 1:
        raise ctx.unsupported(
            "reshape of dynamic axes into several dynamic axes",
            "keep at most one dynamic axis per reshaped group (use -1 for it)",
        )
    before = x.shape[pre : x.rank - suf]
    if free:
        _check_rest(ctx, before, [d for d in window if not unknown(d)])
    else:
        _check_volume(ctx, before, window)
    shape: list[int | DimExpr] = [-1 if i in free else d for i, d in enumerate(window)]
    count = x.rank - pre - suf
    return ctx.emit("reshape", [x], {"shape": shape, "axis_start": pre, "axis_count": count})


def _check_rest(ctx: OpContext, before: Sequence[Size], others: Sequence[Size]) -> None:
    """Refuse a reshape whose -1 tract cannot compute: the window's element count divided by
    the other sizes must be a size at every length of the dynamic axes (``[N, C] -> [-1, 4C]``
    is ``N/4``, whole only for some N, and tract refuses it). Unknown sizes are left to tract."""
    volume, divisor = _volume(before), _volume(others)
    if volume is None or not isinstance(divisor, int) or divisor <= 0:
        return
    symbolic = volume - volume.constant if isinstance(volume, DimExpr) else 0
    if symbolic == 0 or (symbolic // divisor) * divisor == symbolic:
        return  # the dynamic part divides at every length (the constant is left to tract)
    raise ctx.unsupported(
        f"reshape of {volume} elements into rows of {divisor} (whole only for some lengths of a dynamic axis, "
        "which tract cannot prove)",
        "feed that axis already split (for [N, C] -> [-1, 4C], an input [N4, 4, C]), or make it static",
    )


def _check_volume(ctx: OpContext, before: Sequence[Size], after: Sequence[Size]) -> None:
    """Refuse a reshape whose sizes are right only at some lengths: ``x.view(b, s // 2, 2)``
    holds ``2 * (S/2)`` elements where the input holds ``S``, equal for an even S only,
    which tract cannot prove (it refuses the graph)."""
    if not any(isinstance(d, DimExpr) and d.has_division() for d in after):
        return  # no size rounded by a division: nothing tract could not prove
    volumes = [_volume(dims) for dims in (before, after)]
    if None in volumes or volumes[0] == volumes[1]:
        return
    raise ctx.unsupported(
        f"reshape of {volumes[0]} elements into sizes that hold {volumes[1]} (equal only for some lengths "
        "of a dynamic axis, which tract cannot prove)",
        "export with this axis static, or reshape the static axes only",
    )


def _volume(dims: Sequence[Size]) -> Size | None:
    """The product of ``dims`` as a normalized size; None when not linear."""
    total: Size = 1
    for d in dims:
        total = total * d
        if isinstance(total, DimExpr) and not total.is_linear:
            return None
    return total


@handler("aten::view", "aten::reshape", "aten::_reshape_alias", args="t *")
def reshape(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return _reshape_to_output(ctx, x)


@handler("aten::flatten", "aten::unflatten", "aten::view_as", "aten::reshape_as", args="t *")
def flatten(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::flatten(Tensor self, int start_dim=0, int end_dim=-1) -> Tensor"""
    return _reshape_to_output(ctx, x)


@handler("aten::permute", args="t I")
def permute(ctx: OpContext, x: NTensor, dims: list[int]) -> NTensor:
    """aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    perm = [ctx.axis(d, x.rank) for d in dims]
    if perm == list(range(x.rank)):
        return ctx.emit("copy", [x])
    return ctx.emit("transpose", [x], {"axes": perm})


@handler("aten::transpose", "aten::swapaxes", "aten::swapdims", args="t i i")
def transpose(ctx: OpContext, x: NTensor, a: int, b: int) -> NTensor:
    """aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    perm = list(range(x.rank))
    a, b = ctx.axis(a, x.rank), ctx.axis(b, x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    if a == b:
        return ctx.emit("copy", [x])
    return ctx.emit("transpose", [x], {"axes": perm})


@handler("aten::t", "aten::numpy_T", args="t")
def t(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::t(Tensor(a) self) -> Tensor(a)"""
    if x.rank < 2:
        return ctx.emit("copy", [x])
    return ctx.emit("transpose", [x], {"axes": list(range(x.rank))[::-1]})


@handler("aten::squeeze", args="t I?")
def squeeze(ctx: OpContext, x: NTensor, dims: list[int] | None) -> NTensor:
    """aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)  (also .dims and no-dim forms)"""
    if dims is None:
        axes = [d for d in range(x.rank) if x.shape[d] == 1]
    else:
        axes = sorted({ctx.axis(d, x.rank) for d in dims if x.shape[ctx.axis(d, x.rank)] == 1})
    if len(ctx.out_shape()) != x.rank - len(axes) or _squeezes_dynamic_unit_axis(ctx, x, dims):
        # The trace squeezed a dynamic axis it saw at size 1; at other sizes torch keeps it.
        raise ctx.unsupported(
            "squeeze of a dynamic axis that was traced at size 1 (torch squeezes it only at that size)",
            "trace with that axis longer than 1, or squeeze only static unit axes",
        )
    if not axes:
        return ctx.emit("copy", [x])
    return ctx.emit("squeeze", [x], {"axes": axes})


def _squeezes_dynamic_unit_axis(ctx: OpContext, x: NTensor, dims: list[int] | None) -> bool:
    """Whether the squeeze names a dynamic axis whose traced size is 1. torch.export's
    size-oblivious capture keeps such an axis (so the output rank does not tell), where
    the eager run it is checked against squeezes it."""
    traced = ctx.traced_shape(0)
    named = range(x.rank) if dims is None else [ctx.axis(d, x.rank) for d in dims]
    return any(not isinstance(x.shape[a], int) and traced[a] == 1 for a in named)


@handler("aten::unsqueeze", args="t i")
def unsqueeze(ctx: OpContext, x: NTensor, dim: int) -> NTensor:
    """aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    return ctx.emit("unsqueeze", [x], {"axes": [ctx.axis(dim, x.rank + 1)]})


def _broadcast(ctx: OpContext, x: NTensor, sizes: list[Size] | None = None) -> NTensor:
    out = ctx.out_shape()
    x = ctx.to_rank(x, len(out))
    kept: set[int] = set()  # dims that expand's -1 keeps: x's own, whatever their size
    if sizes is not None and len(sizes) == len(out):
        # The requested sizes keep the symbols the traced output shape may have lost.
        kept = {i for i, s in enumerate(sizes) if isinstance(s, int) and not isinstance(s, DimExpr) and s == -1}
        out = tuple(x.shape[i] if i in kept else s for i, s in enumerate(sizes))
    if all(i in kept or same_size(o, d) for i, (o, d) in enumerate(zip(out, x.shape))):
        return ctx.emit("copy", [x])
    if any(unknown(d) for d in out):
        # tract_core_broadcast takes the full target shape: an unknown size cannot be written.
        raise ctx.unsupported("expand to a size that depends on a dynamic axis in an unknown way")
    if ctx.strict and x.is_static() and all(isinstance(d, int) for d in out):
        # Strict NNEF has no broadcast op: tile the unit axes.
        return ctx.emit("tile", [x], {"repeats": [int(o) if i == 1 else 1 for i, o in zip(x.shape, out)]})
    return ctx.emit("tract_core_broadcast", [x], {"shape": list(out)})


@handler("aten::expand", args="t D *")
def expand(ctx: OpContext, x: NTensor, sizes: list[Size]) -> NTensor:
    """aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    return _broadcast(ctx, x, sizes)


@handler("aten::expand_as", "aten::broadcast_to", args="t *")
def expand_as(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::expand_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return _broadcast(ctx, x)


@handler("aten::repeat", args="t D")
def repeat(ctx: OpContext, x: NTensor, repeats: list[Size]) -> NTensor:
    """aten::repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    x = ctx.to_rank(x, len(repeats))
    return ctx.emit("tile", [x], {"repeats": repeats})


@handler("aten::cat", "aten::concat", "aten::concatenate", args="L i")
@torch_quantized("codes")
def cat(ctx: OpContext, tensors: list[NTensor], dim: int) -> NTensor:
    """aten::cat(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = ctx.out_dtype()
    rank = len(ctx.out_shape())
    # torch skips legacy empty 1-D tensors in cat.
    parts = [ctx.cast(t, dtype) for t in tensors if not (t.rank == 1 and t.shape[0] == 0 and rank != 1)]
    if len(parts) == 1:
        return ctx.emit("copy", parts)
    return ctx.emit("concat", [parts], {"axis": ctx.axis(dim, rank)})


@handler("aten::stack", args="L i")
@torch_quantized("codes")
def stack(ctx: OpContext, tensors: list[NTensor], dim: int) -> NTensor:
    """aten::stack(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = ctx.out_dtype()
    axis = ctx.axis(dim, len(ctx.out_shape()))
    parts = [ctx.cast(t, dtype) for t in tensors]
    return ctx.emit("stack", [parts], {"axis": axis})


@handler("aten::split", "aten::split_with_sizes", "aten::chunk", "aten::tensor_split", "aten::unsafe_chunk",
         "aten::unsafe_split", "aten::unsafe_split_with_sizes", args="t _ i")
def split(ctx: OpContext, x: NTensor, dim: int) -> list[NTensor]:
    """aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    return split_pieces(ctx, x, dim)


@handler("aten::unbind", args="t i")
def unbind(ctx: OpContext, x: NTensor, dim: int) -> list[NTensor]:
    """aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    return split_pieces(ctx, x, dim, squeeze_axis=True)
