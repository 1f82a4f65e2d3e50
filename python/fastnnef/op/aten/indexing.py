"""Indexing: slice/select/narrow, gathers (index_select, gather, index, embedding),
masked_fill/where, scatter, index_fill, flip, roll, tril/triu, cumsum, diff."""

from __future__ import annotations

import math
from typing import Any

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import add_dims, is_static, plus, unknown
from fastnnef.op.aten._common import Operand, operands, typed_scalar, wrap_negative
from fastnnef.op.aten._slices import index_bounds, single, slice_bound
from fastnnef.op.aten.scatter import legacy_scatter
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler


def _span(b: Size, e: Size, step: int) -> Size:
    """Length of ``b:e:step`` (for the declared output shape)."""
    if isinstance(b, int) and isinstance(e, int):  # a DimExpr is never an int
        return max(0, -(-(e - b) // step))
    if step == 1 and b == 0:
        return e
    if step == 1 and isinstance(b, int):
        return plus(e, -b)
    return DimExpr("?")


def _slice(
    ctx: OpContext, x: NTensor, axis: int, b: Size, e: Size, step: int, final: bool, traced_len: int,
) -> NTensor:
    if step != 1 and all(is_static(d) for d in (x.shape[axis], b, e)) and int(e) > int(b):
        piece = _strided(ctx, x, axis, int(b), int(e), step)
        return ctx.emit("copy", [piece]) if final else piece
    if step != 1 and not is_static(x.shape[axis]) and not ctx.strict:
        return _strided_gather(ctx, x, axis, b, e, step, final)
    attrs: dict[str, object] = {"axes": [axis], "begin": [b], "end": [e]}
    if step != 1:
        attrs["stride"] = [step]
    if final:
        return ctx.emit("slice", [x], attrs)
    shape = list(x.shape)
    shape[axis] = _span(b, e, step)
    if unknown(shape[axis]) and is_static(x.shape[axis]):
        shape[axis] = traced_len
    return ctx.tmp("slice", [x], attrs, shape=shape, suffix="slice")


def _strided(ctx: OpContext, x: NTensor, axis: int, b: int, e: int, step: int) -> NTensor:
    """``x[b:e:step]`` along a static axis without a strided slice: tract 0.23.9 cannot
    optimise one that follows a reshape ("Pulling Downsample over Reshape"). The window is
    padded to whole steps, split into ``[count, step]``, and its first column kept."""
    count = -(-(e - b) // step)
    window = ctx.tmp("slice", [x], {"axes": [axis], "begin": [b], "end": [e]}, suffix="window")
    missing = count * step - (e - b)
    if missing:
        pads = [Tuple((0, missing if d == axis else 0)) for d in range(x.rank)]
        shape = tuple(count * step if d == axis else n for d, n in enumerate(x.shape))
        window = ctx.tmp("pad", [window], {"padding": pads, "border": "constant", "value": 0.0},
                         dtype=x.dtype, shape=shape, suffix="whole")
    split = x.shape[:axis] + (count, step) + x.shape[axis + 1:]
    steps = ctx.tmp("reshape", [window], {"shape": [count, step], "axis_start": axis, "axis_count": 1},
                    dtype=x.dtype, shape=split, suffix="steps")
    first = ctx.tmp("slice", [steps], {"axes": [axis + 1], "begin": [0], "end": [1]}, suffix="first")
    return ctx.tmp("squeeze", [first], {"axes": [axis + 1]}, suffix="strided")


def _strided_gather(ctx: OpContext, x: NTensor, axis: int, b: Size, e: Size, step: int, final: bool) -> NTensor:
    """``x[b:e:step]`` along a dynamic axis as a gather of ``range(b, e, step)``: tract
    0.23.9 fails to load a strided slice that follows a reshape merging a dynamic axis
    ("Pulling Downsample over Reshape: Invalid axis"), and a dynamic axis cannot be padded
    to whole steps as ``_strided`` does."""
    length = _span(b, e, step)
    positions = ctx.tmp("tract_core_range", [b, e, step], dtype="i64", shape=(length,), suffix="steps")
    if final:
        return ctx.emit("tract_core_gather", [x, positions], {"axis": axis})
    shape = x.shape[:axis] + (length,) + x.shape[axis + 1:]
    return ctx.tmp("tract_core_gather", [x, positions], {"axis": axis}, shape=shape, suffix="strided")


@handler("aten::slice", args="t i D? D? i")
def slice_(ctx: OpContext, x: NTensor, dim: int, start: list[Size] | None, end: list[Size] | None,
           step: int) -> NTensor:
    """aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""  # noqa: E501
    axis = ctx.axis(dim, x.rank)
    n = x.shape[axis]
    traced = ctx.traced_shape(0)[axis]
    if step < 1:
        raise ctx.unsupported(f"slice step {step}", "torch only allows positive steps")
    b = slice_bound(ctx, single(start), n, traced, 0, "start")
    e = slice_bound(ctx, single(end), n, traced, n, "end")
    if isinstance(b, int) and isinstance(e, int):
        e = max(e, b)
    if b == 0 and e == n and step == 1:
        return ctx.emit("copy", [x])
    return _slice(ctx, x, axis, b, e, step, True, ctx.out_traced_shape()[axis])


@handler("aten::select", args="t i D")
def select(ctx: OpContext, x: NTensor, dim: int, index: list[Size]) -> NTensor:
    """aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    axis = ctx.axis(dim, x.rank)
    b, e = index_bounds(ctx, x, axis, index[0])
    piece = _slice(ctx, x, axis, b, e, 1, False, 1)
    return ctx.emit("squeeze", [piece], {"axes": [axis]})


@handler("aten::narrow", args="t i D D")
def narrow(ctx: OpContext, x: NTensor, dim: int, start: list[Size], length: list[Size]) -> NTensor:
    """aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    axis = ctx.axis(dim, x.rank)
    b, _ = index_bounds(ctx, x, axis, start[0])
    e = add_dims(b, length[0])  # a length may be the size of a dynamic axis
    if b == 0 and e == x.shape[axis]:
        return ctx.emit("copy", [x], shape=x.shape)
    return _slice(ctx, x, axis, b, e, 1, True, ctx.out_traced_shape()[axis])


# --- gathers ----------------------------------------------------------------------------
def _indices(ctx: OpContext, idx: NTensor) -> NTensor:
    if idx.dtype in FLOAT_DTYPES or idx.dtype == "bool":
        raise ctx.unsupported(
            f"indexing with a {idx.dtype} tensor",
            "boolean masks select a data-dependent number of elements, which a static graph "
            "cannot express: use torch.where / masked_fill, or integer indices",
        )
    return idx


@handler("aten::index_select", args="t i t")
def index_select(ctx: OpContext, x: NTensor, dim: int, index: NTensor) -> NTensor:
    """aten::index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    index = _indices(ctx, index)
    if index.rank == 0:  # torch treats a 0-d index as [index]
        index = ctx.tmp("unsqueeze", [index], {"axes": [0]}, suffix="idx")
    if ctx.strict:
        return _one_hot_gather(ctx, x, axis, index)
    return ctx.emit("tract_core_gather", [x, index], {"axis": axis})


@handler("aten::embedding", args="t t *")
def embedding(ctx: OpContext, weight: NTensor, indices: NTensor) -> NTensor:
    """aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""  # noqa: E501
    indices = _indices(ctx, indices)
    if ctx.strict:
        return _one_hot_gather(ctx, weight, 0, indices)
    attrs: dict[str, Any] = {"axis": 0}
    if ctx.is_packed(weight):
        # tract gathers Q4_0 rows directly but must be told the output type.
        attrs["datum_type"] = weight.dtype
    return ctx.emit("tract_core_gather", [weight, indices], attrs)


@handler("aten::gather", args="t i t b?")
def gather(ctx: OpContext, x: NTensor, dim: int, index: NTensor, _sparse: bool | None) -> NTensor:
    """aten::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    return ctx.emit("tract_core_gather_elements", [x, _indices(ctx, index)], {"axis": axis})


def _broadcast_shape(ctx: OpContext, shapes: list[tuple[Size, ...]]) -> tuple[Size, ...]:
    """torch's broadcast of index shapes (leading alignment); a dim of 1 yields to the other."""
    rank = max(len(s) for s in shapes)
    out: list[Size] = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ctx.unsupported(f"index tensors with shapes {shapes} that only broadcast at run time")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _index_nd(ctx: OpContext, x: NTensor, axes: list[int], idxs: list[NTensor]) -> NTensor:
    """x[i0, i1, ...] with index tensors on adjacent axes: broadcast the indices to one shape B,
    stack them on a last axis and gather_nd; torch puts B where the indexed axes were."""
    a, k = axes[0], len(axes)
    if axes != list(range(a, a + k)):
        raise ctx.unsupported(
            "advanced indexing with index tensors on non-adjacent axes",
            "index adjacent axes (x[:, i, j]) or one axis at a time",
        )
    idxs = [wrap_negative(ctx, ctx.cast(_indices(ctx, i), "i64"), x.shape[a + n], f"{n}") for n, i in enumerate(idxs)]
    bshape = _broadcast_shape(ctx, [i.shape for i in idxs])
    rank = len(bshape)
    idxs = [ctx.to_rank(i, rank) for i in idxs]
    # zeros of shape B (from the indices themselves: B may hold dynamic dims), added to each index.
    zero: NTensor | None = None
    for n, i in enumerate(idxs):
        term = ctx.tmp("mul", [i, typed_scalar(ctx, 0, "i64")], suffix=f"z{n}")
        zero = term if zero is None else ctx.tmp("add", [zero, term], suffix=f"zs{n}")
    assert zero is not None
    stacked = []
    for n, i in enumerate(idxs):
        b = ctx.tmp("add", [i, zero], suffix=f"b{n}")
        stacked.append(ctx.tmp("unsqueeze", [b], {"axes": [rank]}, suffix=f"u{n}"))
    nd = ctx.tmp("concat", [stacked], {"axis": rank}, suffix="nd")
    # gather_nd indexes the leading axes: move the indexed ones first, and B back to axis a.
    perm = list(range(a, a + k)) + list(range(a)) + list(range(a + k, x.rank))
    src = x
    if a:
        src = ctx.tmp("transpose", [x], {"axes": perm}, suffix="perm")
    rest = x.shape[:a] + x.shape[a + k :]
    gathered_shape = bshape + rest
    if not a:
        return ctx.emit("tract_core_gather_nd", [src, nd], {"batch_dims": 0})
    g = ctx.tmp("tract_core_gather_nd", [src, nd], {"batch_dims": 0}, dtype=x.dtype, shape=gathered_shape, suffix="gnd")
    back = list(range(rank, rank + a)) + list(range(rank)) + list(range(rank + a, len(gathered_shape)))
    return ctx.emit("transpose", [g], {"axes": back})


@handler("aten::index", args="t O")
def index(ctx: OpContext, x: NTensor, indices: list[NTensor | None]) -> NTensor:
    """aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    tensors = [(k, t) for k, t in enumerate(indices) if t is not None]
    if not tensors:
        raise ctx.unsupported("aten::index without index tensors")
    if len(tensors) > 1:
        return _index_nd(ctx, x, [k for k, _ in tensors], [t for _, t in tensors])
    axis, value = tensors[0]
    idx = _indices(ctx, value)
    if ctx.strict:
        return _one_hot_gather(ctx, x, axis, idx)
    return ctx.emit("tract_core_gather", [x, idx], {"axis": axis})


def _one_hot_gather(ctx: OpContext, x: NTensor, axis: int, idx: NTensor) -> NTensor:
    """Strict NNEF has no gather: ``x`` gathered along ``axis`` as a matmul with the one-hot
    rows of the indices (exact for float data: one 1.0 per row)."""
    ctx.static(x, [axis], "a gather in strict NNEF")
    if x.dtype not in FLOAT_DTYPES or idx.dtype != "i64":
        raise ctx.unsupported(
            f"a gather of {x.dtype} data with {idx.dtype} indices in strict NNEF (which has no "
            "gather; fastnnef writes it as a one-hot matmul of float data with i64 indices)",
            "export with TractNNEF",
        )
    n = int(x.shape[axis])
    ctx.static(idx, what="a gather in strict NNEF")
    lead = tuple(int(d) for d in idx.shape)
    if idx.rank != 1:  # one row of indices (tract 0.23.9 hangs optimising a batched one-hot matmul)
        idx = ctx.tmp("reshape", [idx], {"shape": [math.prod(lead)]}, dtype=idx.dtype, shape=(math.prod(lead),),
                      suffix="flat_idx")
    idx = wrap_negative(ctx, idx, n)
    positions = ctx.constant(torch.arange(n).reshape(1, n), f"positions_1x{n}")
    hot = ctx.tmp("eq", [ctx.tmp("unsqueeze", [idx], {"axes": [1]}, suffix="idx"), positions], suffix="hot")
    one, zero = typed_scalar(ctx, 1.0, x.dtype), typed_scalar(ctx, 0.0, x.dtype)
    rows = ctx.tmp("select", [hot, one, zero], dtype=x.dtype, shape=hot.shape, suffix="rows")  # [K, n]
    if axis == 0 and x.rank == 2:  # embedding: [K, n] @ [n, E] -> [I..., E]
        picked = ctx.tmp("matmul", [rows, x], {"transposeA": False, "transposeB": False}, suffix="picked")
        if len(lead) == 1:
            return ctx.emit("copy", [picked])
        return ctx.emit("reshape", [picked], {"shape": list(lead), "axis_start": 0, "axis_count": 1})
    if len(lead) != 1:
        raise ctx.unsupported(f"a gather with rank-{len(lead)} indices along axis {axis} in strict NNEF",
                              "index with a 1-D tensor, or export with TractNNEF")
    # Contract x's axis with the rows' last: x moved to [rest..., n] (rank >= 2 for matmul).
    rest = [d for d in range(x.rank) if d != axis]
    moved = x if axis == x.rank - 1 else ctx.tmp("transpose", [x], {"axes": rest + [axis]}, suffix="moved")
    flat = moved if moved.rank >= 2 else ctx.tmp("unsqueeze", [moved], {"axes": [0]}, suffix="row")
    picked = ctx.tmp("matmul", [flat, ctx.to_rank(rows, flat.rank)], {"transposeA": False, "transposeB": True},
                     suffix="picked")  # [rest..., k]
    if x.rank == 1:
        return ctx.emit("squeeze", [picked], {"axes": [0]})
    back = list(range(axis)) + [x.rank - 1] + list(range(axis, x.rank - 1))
    return ctx.emit("transpose", [picked], {"axes": back})


# --- selection --------------------------------------------------------------------------
def _as_bool(ctx: OpContext, t: NTensor) -> NTensor:
    if t.dtype == "bool":
        return t
    zero = 0.0 if t.dtype in FLOAT_DTYPES else 0
    return ctx.tmp("ne", [t, zero], suffix="mask")


def _select(ctx: OpContext, cond: NTensor, a: Operand, b: Operand) -> NTensor:
    dtype = ctx.out_dtype()
    rank = len(ctx.out_shape())
    cond = ctx.to_rank(_as_bool(ctx, cond), rank)
    a, b = (typed_scalar(ctx, v, dtype) if not isinstance(v, NTensor) else v for v in (a, b))
    a, b = operands(ctx, [a, b], dtype, rank)
    return ctx.emit("select", [cond, a, b])


@handler("aten::masked_fill", args="t t x")
def masked_fill(ctx: OpContext, x: NTensor, mask: NTensor, value: Operand) -> NTensor:
    """aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor  (also .Tensor)"""
    if isinstance(value, NTensor) and value.rank != 0:
        raise ctx.unsupported("masked_fill with a non 0-d value tensor", "torch requires a 0-d value")
    return _select(ctx, mask, value, x)


@handler("aten::where", args="t x? x?")
def where(ctx: OpContext, cond: NTensor, a: Operand | None, b: Operand | None) -> NTensor:
    """aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor  (also Scalar forms)"""
    if a is None or b is None:
        raise ctx.unsupported(
            "torch.where(condition) (nonzero): its output size depends on the data",
            "use the three-argument torch.where(condition, a, b)",
        )
    return _select(ctx, cond, a, b)


@handler("aten::index_fill", args="t i t x")
def index_fill(ctx: OpContext, x: NTensor, dim: int, index: NTensor, value: Operand) -> NTensor:
    """aten::index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    ctx.static(x, [axis], "index_fill")
    n = x.shape[axis]
    assert isinstance(n, int)
    index = _indices(ctx, index)
    if index.rank == 0:
        index = ctx.tmp("unsqueeze", [index], {"axes": [0]}, suffix="idx")
    # hit[p] = any(index == p): an [n, k] comparison of positions with the indices.
    positions = ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="pos")
    positions = ctx.tmp("unsqueeze", [positions], {"axes": [1]}, suffix="posc")
    idx = ctx.cast(index, "i64")
    idx = wrap_negative(ctx, idx, n)
    eq = ctx.tmp("eq", [positions, ctx.to_rank(idx, 2)], suffix="eq")
    hit = ctx.tmp("any_reduce", [eq], {"axes": [1]}, suffix="any")
    hit = ctx.tmp("squeeze", [hit], {"axes": [1]}, suffix="hit")
    trailing = x.rank - axis - 1
    if trailing:
        hit = ctx.tmp("unsqueeze", [hit], {"axes": list(range(1, trailing + 1))}, suffix="hitb")
    return _select(ctx, hit, value, x)


@handler("aten::scatter", args="t i t x s?")
def scatter(ctx: OpContext, x: NTensor, dim: int, index: NTensor, src: Operand, reduce: str | None) -> NTensor:
    """aten::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor  (also .value, and .reduce / .value_reduce with reduce='add'|'multiply')"""  # noqa: E501
    if reduce is not None:
        return legacy_scatter(ctx, x, dim, _indices(ctx, index), src, reduce)
    axis = ctx.axis(dim, x.rank)
    dtype = ctx.out_dtype()
    index = _indices(ctx, index)
    if isinstance(src, NTensor):
        if tuple(src.shape) != tuple(index.shape):
            ctx.static(src, what="scatter with a src larger than index")
            src = ctx.tmp("slice", [ctx.cast(src, dtype)], {
                "axes": list(range(src.rank)), "begin": [0] * src.rank, "end": list(index.shape),
            }, dtype=dtype, shape=index.shape, suffix="src")
        updates = ctx.cast(src, dtype)
    else:
        updates = ctx.tmp("tract_core_broadcast", [typed_scalar(ctx, src, dtype)], {"shape": list(index.shape)},
                          dtype=dtype, shape=index.shape, suffix="src")
    return ctx.emit("tract_core_scatter_elements", [ctx.cast(x, dtype), index, updates], {"axis": axis})


@handler("aten::index_put", args="t O t b")
def index_put(
    ctx: OpContext, x: NTensor, indices: list[NTensor | None], values: NTensor, accumulate: bool,
) -> NTensor:
    """aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    if accumulate:
        raise ctx.unsupported("index_put with accumulate=True", "use scatter_add / index_add")
    tensors = [(k, t) for k, t in enumerate(indices) if t is not None]
    if len(tensors) != 1:
        raise ctx.unsupported("index assignment with several index tensors", "assign one axis at a time")
    axis, idx = tensors[0]
    dtype = ctx.out_dtype()
    if idx.dtype == "bool" and axis == 0:  # x[mask] = v: a select where the mask covers leading dims
        if values.rank != 0:
            raise ctx.unsupported("x[mask] = tensor with elements", "assign a scalar, or use torch.where")
        mask = idx
        if mask.rank < x.rank:
            mask = ctx.tmp("unsqueeze", [mask], {"axes": list(range(mask.rank, x.rank))}, suffix="mask")
        return _select(ctx, mask, values, x)
    idx = _indices(ctx, idx)
    if idx.rank != 1:
        raise ctx.unsupported("index assignment with a multi-dimensional index tensor")
    ctx.static(x, [axis], "index assignment")
    n = x.shape[axis]
    target = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    v = ctx.to_rank(ctx.cast(values, dtype), x.rank)
    if tuple(v.shape) != tuple(target):
        v = ctx.tmp("tract_core_broadcast", [v], {"shape": list(target)}, suffix="values")
    idx = ctx.cast(idx, "i64")
    idx = wrap_negative(ctx, idx, n)
    idx = ctx.tmp("unsqueeze", [idx], {"axes": [1]}, suffix="nd")
    x = ctx.cast(x, dtype)
    if axis == 0:
        return ctx.emit("tract_core_scatter_nd", [x, idx, v])
    # scatter_nd indexes leading axes: move the indexed axis first and back.
    perm = [axis] + [d for d in range(x.rank) if d != axis]
    inverse = [perm.index(d) for d in range(x.rank)]
    xp = ctx.tmp("transpose", [x], {"axes": perm}, suffix="xp")
    vp = ctx.tmp("transpose", [v], {"axes": perm}, suffix="vp")
    out = ctx.tmp("tract_core_scatter_nd", [xp, idx, vp], suffix="scatter")
    return ctx.emit("transpose", [out], {"axes": inverse})


# --- reordering -------------------------------------------------------------------------
@handler("aten::flip", args="t I")
def flip(ctx: OpContext, x: NTensor, dims: list[int]) -> NTensor:
    """aten::flip(Tensor self, int[] dims) -> Tensor"""
    axes = sorted({ctx.axis(d, x.rank) for d in dims})
    if not axes:
        return ctx.emit("copy", [x])
    for k, axis in enumerate(axes):
        attrs = {"axis": axis, "stride": -1, "modulo": 0}
        if k == len(axes) - 1:
            return ctx.emit("tract_core_downsample", [x], attrs)
        x = ctx.tmp("tract_core_downsample", [x], attrs, suffix="flip")
    raise AssertionError("unreachable")


def _roll_axis(ctx: OpContext, x: NTensor, shift: int, axis: int) -> NTensor:
    ctx.static(x, [axis], "roll")
    n = x.shape[axis]
    assert isinstance(n, int)
    s = shift % n if n else 0
    if s == 0:
        return x
    tail = ctx.tmp("slice", [x], {"axes": [axis], "begin": [n - s], "end": [n]}, suffix="tail")
    head = ctx.tmp("slice", [x], {"axes": [axis], "begin": [0], "end": [n - s]}, suffix="head")
    return ctx.tmp("concat", [[tail, head]], {"axis": axis}, suffix="roll")


@handler("aten::roll", args="t I I")
def roll(ctx: OpContext, x: NTensor, shifts: list[int], dims: list[int]) -> NTensor:
    """aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    if not dims:  # roll the flattened tensor, then restore the shape
        ctx.static(x, what="roll without dims")
        flat = ctx.tmp("reshape", [x], {"shape": [-1]}, dtype=x.dtype, shape=(_volume(x),), suffix="flat")
        rolled = _roll_axis(ctx, flat, shifts[0], 0)
        return ctx.emit("reshape", [rolled], {"shape": list(x.shape)})
    if len(shifts) != len(dims):
        raise ctx.unsupported("roll with a different number of shifts and dims")
    for shift, dim in zip(shifts, dims):
        x = _roll_axis(ctx, x, shift, ctx.axis(dim, x.rank))
    return ctx.emit("copy", [x])


def _volume(x: NTensor) -> int:
    v = 1
    for d in x.shape:
        assert isinstance(d, int)
        v *= d
    return v


@handler("aten::tril", "aten::triu", args="t D")
def trilu(ctx: OpContext, x: NTensor, diagonals: list[Size]) -> NTensor:
    """aten::tril(Tensor self, int diagonal=0) -> Tensor  (and aten::triu; the diagonal may
    depend on dynamic axes, as a causal mask over a KV cache's does)"""
    (diagonal,) = diagonals
    if x.rank < 2:
        raise ctx.unsupported("tril/triu of a tensor with fewer than 2 dims")
    upper = ctx.kind.startswith("aten::triu")
    if ctx.strict and isinstance(diagonal, DimExpr):
        raise ctx.unsupported("tril/triu with a dynamic diagonal in strict NNEF")
    if ctx.strict:  # no trilu op: a constant mask of the (static) last two axes
        ctx.static(x, [x.rank - 2, x.rank - 1], "tril/triu in strict NNEF")
        rows, cols = int(x.shape[-2]), int(x.shape[-1])
        ones = torch.ones(rows, cols, dtype=torch.bool)
        mask = ctx.constant(ones.triu(int(diagonal)) if upper else ones.tril(int(diagonal)),
                            f"{'triu' if upper else 'tril'}_mask_{rows}x{cols}_{diagonal}")
        zero = 0.0 if x.dtype in FLOAT_DTYPES else 0
        return ctx.emit("select", [ctx.to_rank(mask, x.rank), x, typed_scalar(ctx, zero, x.dtype)])
    k = typed_scalar(ctx, diagonal, "i64") if isinstance(diagonal, DimExpr) else diagonal
    return ctx.emit("tract_core_trilu", [x, k], {"upper": upper})


@handler("aten::cumsum", args="t i n?", since="native_cumsum")
def cumsum(ctx: OpContext, x: NTensor, dim: int, _dtype: int | None) -> NTensor:
    """aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    axis = ctx.axis(dim, x.rank)
    return ctx.emit("tract_core_cumsum", [ctx.cast(x, ctx.out_dtype())],
                    {"axis": axis, "exclusive": False, "reverse": False})


@handler("aten::diff", args="t i i t? t?")
def diff(ctx: OpContext, x: NTensor, n: int, dim: int, prepend: NTensor | None, append: NTensor | None) -> NTensor:
    """aten::diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    dtype = ctx.out_dtype()
    if dtype == "bool":
        raise ctx.unsupported("diff of a bool tensor (torch computes a logical xor)", "cast to an int dtype first")
    if n < 1:
        raise ctx.unsupported(f"diff with n={n}", "torch requires n >= 1")
    axis = ctx.axis(dim, x.rank)
    parts = [ctx.to_rank(ctx.cast(t, dtype), x.rank) for t in (prepend, x, append) if t is not None]
    cur = ctx.cast(x, dtype)
    if len(parts) > 1:
        cur = ctx.tmp("concat", [parts], {"axis": axis}, suffix="cat")
    # diff^n: x[1:] - x[:-1] along the axis, n times.
    for i in range(n):
        length = cur.shape[axis]
        if unknown(length):
            raise ctx.unsupported("diff along a dynamic axis whose size expression is unknown")
        shape = list(cur.shape)
        shape[axis] = plus(length, -1)
        hi = ctx.tmp("slice", [cur], {"axes": [axis], "begin": [1], "end": [length]}, suffix=f"hi{i}")
        lo = ctx.tmp("slice", [cur], {"axes": [axis], "begin": [0], "end": [shape[axis]]}, suffix=f"lo{i}")
        if i == n - 1:
            return ctx.emit("sub", [hi, lo], shape=shape)
        cur = ctx.tmp("sub", [hi, lo], None, suffix=f"diff{i}")
    raise AssertionError("unreachable: n >= 1")
