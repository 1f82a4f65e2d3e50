"""Lookups: take, take_along_dim, embedding_bag, bucketize, searchsorted, histc; and the ops whose
output size depends on the data (nonzero, masked_select, unique...), refused with what to
use instead.

Searches count, for each value, the sorted boundaries below it (a comparison against every
boundary, summed), which is exact for sorted boundaries and needs no loop.
"""

from __future__ import annotations

import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import broadcast_dim, volume
from fastnnef.op.aten._common import Operand, promote, typed_scalar, wrap_negative
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler


def _index(ctx: OpContext, idx: NTensor) -> NTensor:
    if idx.dtype in FLOAT_DTYPES or idx.dtype == "bool":
        raise ctx.unsupported(f"indexing with a {idx.dtype} tensor", "use an integer index tensor")
    return ctx.cast(idx, "i64")


def _flat(ctx: OpContext, x: NTensor, suffix: str) -> NTensor:
    if x.rank == 1:
        return x
    return ctx.tmp("reshape", [x], {"shape": [-1]}, dtype=x.dtype, shape=(volume(x.shape),), suffix=suffix)


@handler("aten::take", args="t t")
def take(ctx: OpContext, x: NTensor, index: NTensor) -> NTensor:
    """aten::take(Tensor self, Tensor index) -> Tensor"""
    flat = _flat(ctx, x, "flat")
    idx = wrap_negative(ctx, _index(ctx, index), flat.shape[0])
    return ctx.emit("tract_core_gather", [flat, idx], {"axis": 0})


@handler("aten::take_along_dim", args="t t i?")
def take_along_dim(ctx: OpContext, x: NTensor, indices: NTensor, dim: int | None) -> NTensor:
    """aten::take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"""
    if dim is None:  # both flattened
        flat = _flat(ctx, x, "flat")
        idx = wrap_negative(ctx, _index(ctx, _flat(ctx, indices, "iflat")), flat.shape[0])
        return ctx.emit("tract_core_gather", [flat, idx], {"axis": 0})
    if x.rank != indices.rank:
        raise ctx.unsupported(f"take_along_dim of a rank-{x.rank} tensor with rank-{indices.rank} indices",
                              "torch needs the same number of dims")
    axis = ctx.axis(dim, x.rank)
    idx = wrap_negative(ctx, _index(ctx, indices), x.shape[axis])
    # torch broadcasts self and indices on every axis but the gathered one.
    common = [None if d == axis else broadcast_dim(x.shape[d], idx.shape[d], "take_along_dim") for d in range(x.rank)]
    x_shape = tuple(x.shape[d] if d == axis else common[d] for d in range(x.rank))
    i_shape = tuple(idx.shape[d] if d == axis else common[d] for d in range(x.rank))
    if x_shape != tuple(x.shape):
        x = ctx.tmp("tract_core_broadcast", [x], {"shape": list(x_shape)}, suffix="xb")
    if i_shape != tuple(idx.shape):
        idx = ctx.tmp("tract_core_broadcast", [idx], {"shape": list(i_shape)}, suffix="ib")
    return ctx.emit("tract_core_gather_elements", [x, idx], {"axis": axis})


# --- embedding_bag ----------------------------------------------------------------------
_MODES = {0: "sum", 1: "mean", 2: "max"}


@handler("aten::embedding_bag", "aten::_embedding_bag", args="t t t b i b t? b i?")
def embedding_bag(
    ctx: OpContext, weight: NTensor, indices: NTensor, offsets: NTensor, _scale_grad: bool, mode: int,
    _sparse: bool, per_sample_weights: NTensor | None, include_last_offset: bool, padding_idx: int | None,
) -> list[NTensor | None]:
    """aten::embedding_bag.padding_idx(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, bool include_last_offset, int? padding_idx) -> (Tensor, Tensor, Tensor, Tensor)"""  # noqa: E501
    if mode not in _MODES:
        raise ctx.unsupported(f"embedding_bag mode {mode}")
    if indices.rank != 1 or offsets.rank != 1:
        raise ctx.unsupported("embedding_bag with indices or offsets that are not 1-D",
                              "pass 1-D indices with offsets, or 2-D indices through F.embedding_bag")
    ctx.static(offsets, what="embedding_bag (the number of bags)")
    bags = int(offsets.shape[0]) - (1 if include_last_offset else 0)
    dtype = ctx.out_dtype()
    indices = _index(ctx, indices)
    attrs: dict[str, object] = {"axis": 0}
    if ctx.is_packed(weight):
        attrs["datum_type"] = weight.dtype
    rows = ctx.cast(ctx.tmp("tract_core_gather", [weight, indices], attrs, suffix="rows"), dtype)  # [N, D]
    # bag[p] = (number of offsets <= p) - 1; members[b, p] = bag[p] == b. A position at or
    # past the last offset with include_last_offset gets bag == bags, which no row matches.
    n = indices.shape[0]
    positions = ctx.tmp("unsqueeze", [ctx.tmp("tract_core_range", [0, n, 1], dtype="i64", shape=(n,), suffix="pos")],
                        {"axes": [0]}, suffix="posr")
    started = ctx.tmp("le", [ctx.tmp("unsqueeze", [ctx.cast(offsets, "i64")], {"axes": [1]}, suffix="offc"), positions],
                      suffix="started")
    started_n = ctx.tmp("tract_core_cast", [started], {"to": "i64"}, suffix="startn")
    count = ctx.tmp("sum_reduce", [started_n], {"axes": [0]}, suffix="count")
    bag = ctx.tmp("sub", [count, typed_scalar(ctx, 1, "i64")], suffix="bag")  # [1, N]
    members = ctx.tmp("eq", [bag, ctx.constant(torch.arange(bags).unsqueeze(1), label=f"bag_ids_{bags}")],
                      suffix="members")  # [B, N]
    if padding_idx is not None and padding_idx >= 0:  # padding entries belong to no bag
        kept = ctx.tmp("ne", [indices, typed_scalar(ctx, padding_idx, "i64")], suffix="kept")
        members = ctx.tmp("and", [members, ctx.tmp("unsqueeze", [kept], {"axes": [0]}, suffix="keptr")], suffix="used")
    how = _MODES[mode]
    if per_sample_weights is not None:
        if how != "sum":
            raise ctx.unsupported(f"embedding_bag per_sample_weights with mode {how!r}",
                                  "torch allows them in sum mode only")
        psw = ctx.tmp("unsqueeze", [ctx.cast(per_sample_weights, dtype)], {"axes": [1]}, suffix="psw")
        rows = ctx.tmp("mul", [rows, psw], suffix="weighted")
    zero = typed_scalar(ctx, 0, dtype)
    if how == "max":
        # Non-members read -inf, so they never win; an empty bag is 0, as in torch.
        picked = ctx.tmp("select", [ctx.tmp("unsqueeze", [members], {"axes": [2]}, suffix="m3"),
                                    ctx.tmp("unsqueeze", [rows], {"axes": [0]}, suffix="r3"),
                                    typed_scalar(ctx, float("-inf"), dtype)], suffix="picked")
        best = ctx.tmp("squeeze", [ctx.tmp("max_reduce", [picked], {"axes": [1]}, suffix="max")], {"axes": [1]},
                       suffix="best")
        filled = ctx.tmp("any_reduce", [members], {"axes": [1]}, suffix="filled")
        return [ctx.emit("select", [filled, best, zero]), None, None, None]
    weights = ctx.tmp("select", [members, typed_scalar(ctx, 1, dtype), zero], dtype=dtype, shape=members.shape,
                      suffix="weights")
    total = ctx.tmp("matmul", [weights, rows], {"transposeA": False, "transposeB": False}, suffix="sum")
    if how == "sum":
        return [ctx.emit("copy", [total]), None, None, None]
    sizes = ctx.tmp("sum_reduce", [weights], {"axes": [1]}, suffix="sizes")
    sizes = ctx.tmp("max", [sizes, typed_scalar(ctx, 1, dtype)], suffix="nonzero")  # an empty bag is 0
    return [ctx.emit("div", [total, sizes]), None, None, None]


# --- sorted searches --------------------------------------------------------------------
def _search(ctx: OpContext, seq: NTensor, values: Operand, right: bool) -> NTensor:
    """For each value, the number of ``seq`` entries below it (or not above it, ``right``);
    ``seq`` is [..., K] sorted on its last axis, ``values`` [..., M] (or a number)."""
    dtype = promote([seq, values])
    seq = ctx.cast(seq, dtype)
    v: Operand
    if isinstance(values, NTensor):
        v = ctx.tmp("unsqueeze", [ctx.cast(values, dtype)], {"axes": [values.rank]}, suffix="vals")  # [..., M, 1]
        if seq.rank > 1:  # one sorted row per leading index: [..., 1, K]
            seq = ctx.tmp("unsqueeze", [seq], {"axes": [seq.rank - 1]}, suffix="rows")
        seq = ctx.to_rank(seq, v.rank)
        v = ctx.to_rank(v, seq.rank)
    else:
        v = typed_scalar(ctx, values, dtype) if dtype not in FLOAT_DTYPES else float(values)
    below = ctx.tmp("le" if right else "lt", [seq, v], suffix="below")
    counts = ctx.tmp("sum_reduce", [ctx.tmp("tract_core_cast", [below], {"to": "i64"}, suffix="belown")],
                     {"axes": [below.rank - 1]}, suffix="count")
    squeezed = ctx.tmp("squeeze", [counts], {"axes": [below.rank - 1]}, suffix="pos")
    out = ctx.out_dtype()
    return ctx.emit("copy", [squeezed]) if out == "i64" else ctx.emit("tract_core_cast", [squeezed], {"to": out})


@handler("aten::bucketize", args="x t b b")
def bucketize(ctx: OpContext, x: Operand, boundaries: NTensor, _out_int32: bool, right: bool) -> NTensor:
    """aten::bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor  (also .Scalar)"""  # noqa: E501
    if boundaries.rank != 1:
        raise ctx.unsupported("bucketize with boundaries that are not 1-D", "torch needs 1-D boundaries")
    return _search(ctx, boundaries, x, right)


@handler("aten::searchsorted", args="t x b b s? t?")
def searchsorted(ctx: OpContext, seq: NTensor, x: Operand, _out_int32: bool, right: bool, side: str | None,
                 sorter: NTensor | None) -> NTensor:
    """aten::searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor  (also .Scalar)"""  # noqa: E501
    if sorter is not None:  # the sequence in sorted order
        seq = ctx.tmp("tract_core_gather_elements", [seq, _index(ctx, sorter)], {"axis": seq.rank - 1}, suffix="sorted")
    if isinstance(x, NTensor) and seq.rank > 1 and x.rank != seq.rank:
        raise ctx.unsupported("searchsorted with values and a sorted sequence of different ranks",
                              "torch needs the same leading dims (or a 1-D sequence)")
    return _search(ctx, seq, x, right or side == "right")


@handler("aten::histc", args="t i f f")
def histc(ctx: OpContext, x: NTensor, bins: int, low: float, high: float) -> NTensor:
    """aten::histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    # Mixture-of-experts layers count the tokens routed to each expert this way.
    if low == high:
        raise ctx.unsupported("histc over the range of its data (min == max)", "give min and max explicitly")
    dtype = ctx.out_dtype()
    v = ctx.cast(_flat(ctx, x, "flat"), dtype)  # [N]
    # torch's bin: (x - min) / (max - min) * bins truncated, the max itself in the last bin;
    # values outside [min, max] are not counted.
    lo, hi = typed_scalar(ctx, low, dtype), typed_scalar(ctx, high, dtype)
    offset = ctx.tmp("sub", [v, lo], suffix="offset")
    scaled = ctx.tmp("mul", [ctx.tmp("div", [offset, typed_scalar(ctx, high - low, dtype)], suffix="unit"),
                             typed_scalar(ctx, float(bins), dtype)], suffix="scaled")
    index = ctx.tmp("min", [ctx.tmp("floor", [scaled], suffix="floor"), typed_scalar(ctx, float(bins - 1), dtype)],
                    suffix="bin")
    inside = ctx.tmp("and", [ctx.tmp("ge", [v, lo], suffix="above"), ctx.tmp("le", [v, hi], suffix="below")],
                     suffix="inside")
    every = ctx.constant(torch.arange(bins, dtype=ctx.out_torch_dtype()).reshape(1, bins), suffix="bins")
    column = ctx.tmp("unsqueeze", [index], {"axes": [1]}, suffix="col")  # [N, 1]
    hit = ctx.tmp("and", [ctx.tmp("eq", [column, every], suffix="eq"),
                          ctx.tmp("unsqueeze", [inside], {"axes": [1]}, suffix="incol")], suffix="hit")
    counts = ctx.tmp("sum_reduce", [ctx.tmp("tract_core_cast", [hit], {"to": dtype}, suffix="ones")], {"axes": [0]},
                     suffix="counts")
    return ctx.emit("squeeze", [counts], {"axes": [0]})


# --- data-dependent sizes ---------------------------------------------------------------
_INSTEAD = {
    "aten::nonzero": "use a mask (x != 0) with torch.where",
    "aten::nonzero_numpy": "use a mask (x != 0) with torch.where",
    "aten::argwhere": "use a mask (x != 0) with torch.where",
    "aten::masked_select": "use torch.where(mask, x, fill) to keep the shape",
    "aten::_unique": "compute it outside the model, or count a known number of classes (one_hot + sum)",
    "aten::_unique2": "compute it outside the model, or count a known number of classes (one_hot + sum)",
    "aten::unique_dim": "compute it outside the model",
    "aten::unique_consecutive": "compute it outside the model",
    "aten::unique_dim_consecutive": "compute it outside the model",
}


@handler(*_INSTEAD, args="*")
def data_dependent(ctx: OpContext) -> NTensor:
    """aten::nonzero(Tensor self) -> Tensor  (refused, as masked_select, argwhere, unique*: output sizes that depend on the data)"""  # noqa: E501
    raise ctx.unsupported(
        "its output size depends on the values of its input, which an exported graph cannot express",
        _INSTEAD[ctx.kind],
    )

