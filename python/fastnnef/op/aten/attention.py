"""Attention: aten::scaled_dot_product_attention, reified as ``tract_transformers_sdpa``
(tract > 0.22.0 by default, ``reify_sdpa_operator``) or decomposed into matmul/softmax."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fastnnef.dim import DimExpr, Size
from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.shapes import unknown
from fastnnef.op.aten._common import torch_dtype
from fastnnef.op.aten._masks import MIN_SCORE, bool_to_bias, mask_for_sdpa
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


def _broadcast_dims(a: Sequence[Size], b: Sequence[Size]) -> tuple[Size, ...]:
    """torch broadcasting of two equal-rank batch shapes (a 1 yields to the other)."""
    return tuple(y if isinstance(x, int) and not isinstance(x, DimExpr) and x == 1 else x for x, y in zip(a, b))


def _causal_bias(ctx: OpContext, rows: int, cols: int, dtype: str) -> NTensor:
    """torch's causal mask (top-left aligned: key j visible to query i iff j <= i) as a
    constant additive [rows, cols] tensor; shared by every node with the same shape."""
    data = torch.zeros(rows, cols, dtype=torch_dtype(dtype))
    data.masked_fill_(torch.ones(rows, cols, dtype=torch.bool).triu(1), MIN_SCORE[dtype])
    return ctx.constant(data, f"causal_mask_{rows}x{cols}_{dtype}")


def _static(d: Size) -> bool:
    return isinstance(d, int) and not isinstance(d, DimExpr)


def _repeat_heads(ctx: OpContext, t: NTensor, groups: int, suffix: str) -> NTensor:
    """[B, Hk, S, E] -> [B, Hk*groups, S, E], each head repeated ``groups`` times in a row
    (torch's ``repeat_interleave(groups, dim=-3)``, as enable_gqa does)."""
    b, hk, s, e = t.shape
    t5 = ctx.tmp("unsqueeze", [t], {"axes": [2]}, suffix=f"{suffix}_g")
    tiled = ctx.tmp("tile", [t5], {"repeats": [1, 1, groups, 1, 1]}, suffix=f"{suffix}_tile")
    heads = hk * groups
    return ctx.tmp("reshape", [tiled], {"shape": [heads], "axis_start": 1, "axis_count": 2},
                   dtype=t.dtype, shape=(b, heads, s, e), suffix=f"{suffix}_rep")


@handler("aten::scaled_dot_product_attention", args="t t t t? f b f? b?")
def scaled_dot_product_attention(
    ctx: OpContext, q: NTensor, k: NTensor, v: NTensor, mask: NTensor | None, dropout_p: float,
    is_causal: bool, scale: float | None, enable_gqa: bool | None,
) -> NTensor:
    """aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""  # noqa: E501
    if dropout_p != 0.0:
        raise ctx.unsupported(
            f"dropout_p={dropout_p} (attention dropout is random, even in eval mode)",
            "pass dropout_p=0.0 at inference, e.g. `dropout_p=self.p if self.training else 0.0`",
        )
    out_dtype = ctx.out_dtype()
    force_f32 = ctx.caps.force_attention_inner_in_f32
    inner = "f32" if force_f32 and out_dtype == "f16" else out_dtype
    if inner not in MIN_SCORE:
        raise ctx.unsupported(f"attention in {inner}", "attention needs float query/key/value")
    ctx.static(q, [q.rank - 1], "the default attention scale 1/sqrt(E)")
    if scale is None:
        scale = 1.0 / math.sqrt(int(q.shape[-1]))
    groups = 1
    if enable_gqa and q.rank >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if not (_static(hq) and _static(hk)) or int(hq) % int(hk):
            raise ctx.unsupported(f"enable_gqa with {hq} query heads and {hk} key/value heads",
                                  "query heads must be a static multiple of key/value heads")
        groups = int(hq) // int(hk)
    rows, cols = q.shape[-2], k.shape[-2]
    if ctx.caps.reify_sdpa and _reifiable(q, k, v, groups, is_causal, rows, cols, mask is not None):
        return _reified(ctx, q, k, v, mask, is_causal, scale, inner, out_dtype)
    return _decomposed(ctx, q, k, v, mask, is_causal, scale, inner, out_dtype, groups)


def _reifiable(
    q: NTensor, k: NTensor, v: NTensor, groups: int, is_causal: bool, rows: Size, cols: Size, masked: bool,
) -> bool:
    """What tract_transformers_sdpa accepts: equal ranks 3 or 4, equal batch sizes, GQA
    only on rank 4, a causal mask it aligns like torch (square, or static to build), and a
    mask it can be given as [.., rows, cols]."""
    if not (q.rank == k.rank == v.rank and q.rank in (3, 4)):
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0]) or (q.rank == 3 and groups != 1):
        return False
    if q.rank == 4 and groups == 1 and not (q.shape[1] == k.shape[1] == v.shape[1]):
        return False
    if masked and any(unknown(d) for d in (rows, cols)):
        return False
    return not is_causal or rows == cols or (_static(rows) and _static(cols))


def _reified(
    ctx: OpContext, q: NTensor, k: NTensor, v: NTensor, mask: NTensor | None, is_causal: bool,
    scale: float, inner: str, out_dtype: str,
) -> NTensor:
    """One ``tract_transformers_sdpa`` (q, k, v[, mask] positional; scale always given).
    With f32 inner and ``upcast_reified_sdpa_inputs_to_f32`` (default), the op runs on f32
    inputs and its output is cast back; otherwise it gets f16 inputs and accumulates in f32."""
    upcast = inner != out_dtype and ctx.caps.upcast_reified_sdpa_inputs_to_f32
    io_dtype = inner if upcast else out_dtype
    q, k, v = (ctx.cast(t, io_dtype) for t in (q, k, v))
    args = [q, k, v]
    rows, cols = q.shape[-2], k.shape[-2]
    if is_causal and rows != cols:
        # tract aligns its causal mask bottom-right (KV cache); torch top-left.
        mask, is_causal = _causal_bias(ctx, int(rows), int(cols), inner), False
    elif mask is not None:
        mask = bool_to_bias(ctx, mask, inner) if mask.dtype == "bool" else ctx.cast(mask, inner)
    if mask is not None:
        args.append(mask_for_sdpa(ctx, ctx.to_rank(mask, q.rank), rows, cols))
    attrs = {"scale": float(scale), "datum_type": io_dtype, "acc_datum_type": inner, "is_causal": is_causal}
    if io_dtype == out_dtype:
        return ctx.emit("tract_transformers_sdpa", args, attrs)
    out = ctx.tmp("tract_transformers_sdpa", args, attrs, dtype=io_dtype, shape=ctx.out_shape(), suffix="f32")
    return ctx.emit("tract_core_cast", [out], {"to": out_dtype})


def _decomposed(
    ctx: OpContext, q: NTensor, k: NTensor, v: NTensor, mask: NTensor | None, is_causal: bool,
    scale: float, inner: str, out_dtype: str, groups: int,
) -> NTensor:
    """softmax(q·kᵀ·scale + bias)·v in ``inner``, cast back to the output dtype."""
    rank = max(q.rank, k.rank, v.rank)
    q, k, v = (ctx.to_rank(ctx.cast(t, inner), rank) for t in (q, k, v))
    if groups > 1:
        k, v = _repeat_heads(ctx, k, groups, "k"), _repeat_heads(ctx, v, groups, "v")
    batch = _broadcast_dims(q.shape[:-2], k.shape[:-2])
    rows, cols = q.shape[-2], k.shape[-2]
    scores_shape = batch + (rows, cols)
    scores = ctx.tmp("matmul", [q, k], {"transposeA": False, "transposeB": True}, suffix="scores")
    scores = ctx.tmp("mul", [scores, float(scale)], suffix="scaled")
    bias: NTensor | None = None
    if is_causal and _static(rows) and _static(cols):
        bias = _causal_bias(ctx, int(rows), int(cols), inner)
    elif is_causal:
        every = ctx.tmp("eq", [scores, scores], suffix="every")
        visible = ctx.tmp("tract_core_trilu", [every, 0], {"upper": False}, suffix="causal")
        bias = bool_to_bias(ctx, visible, inner)
    elif mask is not None:
        bias = bool_to_bias(ctx, mask, inner) if mask.dtype == "bool" else ctx.cast(mask, inner)
    if bias is not None:
        scores = ctx.tmp("add", [scores, ctx.to_rank(bias, len(scores_shape))], suffix="masked")
    probs = ctx.tmp("softmax", [scores], {"axes": [len(scores_shape) - 1]}, suffix="probs")
    attrs = {"transposeA": False, "transposeB": False}
    if inner == out_dtype:
        return ctx.emit("matmul", [probs, v], attrs)
    out = ctx.tmp("matmul", [probs, v], attrs, suffix="out")
    return ctx.emit("tract_core_cast", [out], {"to": out_dtype})
