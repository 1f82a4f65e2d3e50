"""Slicing helpers shared by the families that read or write through a slice or a select
(indexing.py reads, inplace.py writes back at the same positions, shape.py and layout.py
split): torch's begin/end/index made into the bounds tract's ``slice`` needs, and a split
into the traced pieces."""

from __future__ import annotations

from fastnnef.dim import DimExpr, Size, dmin, is_negative
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import plus, unknown
from fastnnef.op.context import OpContext

# torch writes "to the end" as INT64_MAX; anything this large means the same.
TO_END = 2**62


def slice_bound(ctx: OpContext, v: Size | None, n: Size, traced: int, default: Size, what: str) -> Size:
    """A torch begin/end as tract needs it: non-negative and within the axis, since tract's
    slice computes the length from the raw values (it only clamps the read window)."""
    if v is None:
        return default
    if isinstance(v, DimExpr):  # an expression of a dynamic size: in range by construction
        if is_negative(v):  # x[:, -x.size(1):] counts from the end
            if unknown(n):
                raise ctx.unsupported(f"{what} {v} from the end of an axis whose dynamic size is unknown")
            return n + v
        return v
    if not isinstance(n, DimExpr):
        return min(max(v + n if v < 0 else v, 0), n)
    if v >= TO_END:
        if unknown(n):
            raise ctx.unsupported(
                f"slicing to the end of an axis whose dynamic size expression is unknown ({what})",
                "slice before the op that reshaped this axis, or keep it static",
            )
        return n
    if v < 0:
        if unknown(n):
            raise ctx.unsupported(f"negative {what} {v} on a dynamic axis of unknown size")
        return plus(n, v)
    if v > traced:
        if unknown(n):
            raise ctx.unsupported(
                f"{what} {v} is past the traced size {traced} of a dynamic axis of unknown size",
                "torch clamps it at run time: use x[..., start:] or a size expression",
            )
        return dmin(n, v)  # torch clamps a bound to the axis: at run time here
    return v


def index_bounds(ctx: OpContext, x: NTensor, axis: int, index: Size) -> tuple[Size, Size]:
    """[begin, end) of the single position ``index`` along ``axis``."""
    n = x.shape[axis]
    if isinstance(index, DimExpr):
        return index, plus(index, 1)
    if not isinstance(n, DimExpr):
        if not -n <= index < n:
            raise ctx.unsupported(f"index {index} out of range for size {n}")
        index %= n
        return index, index + 1
    if index >= 0:
        return index, index + 1
    if unknown(n):
        raise ctx.unsupported(f"negative index {index} on a dynamic axis of unknown size")
    return plus(n, index), plus(n, index + 1)


def single(v: list[Size] | None) -> Size | None:
    """The one dim of an optional ``SymInt?`` read as a list (``D?``)."""
    return None if v is None else v[0]


def split_pieces(ctx: OpContext, x: NTensor, dim: int, squeeze_axis: bool = False) -> list[NTensor]:
    """Slice ``x`` along ``dim`` into the traced output pieces (one NNEF slice each)."""
    axis = ctx.axis(dim, x.rank)
    ctx.static(x, [axis], "split")
    out: list[NTensor] = []
    begin = 0
    for k in range(ctx.n_outputs):
        size = 1 if squeeze_axis else ctx.out_traced_shape(k)[axis]
        shape = list(x.shape)
        shape[axis] = size
        if squeeze_axis:
            piece = ctx.tmp("slice", [x], {"axes": [axis], "begin": [begin], "end": [begin + 1]}, suffix="slice")
            out.append(ctx.emit("squeeze", [piece], {"axes": [axis]}, out=k))
        else:
            out.append(ctx.emit("slice", [x], {"axes": [axis], "begin": [begin], "end": [begin + size]}, out=k))
        begin += size
    return out


# unsafe_* are the same ops without view tracking (LSTMCell/GRUCell decompose to unsafe_chunk).
