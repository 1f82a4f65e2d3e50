"""Transformer fast paths: what nn.MultiheadAttention and nn.TransformerEncoderLayer trace
to in eval mode without grad (aten::_native_multi_head_attention,
aten::_transformer_encoder_layer_fwd), and the nested tensors nn.TransformerEncoder builds
from a ``src_key_padding_mask`` (aten::_nested_tensor_from_mask ... aten::to_padded_tensor).

Each fused op is written out as the projections, attention, layer norms and feed-forward it
computes. The attention itself is ``tract_transformers_sdpa`` where the target reifies SDPA
and no weights are returned, else matmul/softmax (whose probabilities are the weights).

A nested tensor has no fixed shape in the trace (its items have different lengths). Here it
travels padded, as ``[B, S, E + 1]``: the data with one extra trailing channel that is 1 for
a real token and 0 for padding. The encoder layers read that channel as their key padding
mask and carry it on; ``to_padded_tensor`` drops it and writes the padding value there.
"""

from __future__ import annotations

import math

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import typed_scalar
from fastnnef.op.aten._masks import bool_to_bias, mask_for_sdpa
from fastnnef.op.aten._moments import normalize
from fastnnef.op.context import FLOAT_DTYPES, OpContext
from fastnnef.op.registry import handler

# torch's mask_type: how the mask given to the fused attention lines up with the scores
# [B, H, L, S] (unit axes inserted so that it broadcasts).
_MASK_AXES = {0: [0, 1], 1: [1, 2], 2: []}  # [L, S], [B, S] (key padding), [B, H, L, S]


def _nested(ctx: OpContext, index: int) -> NTensor | None:
    """The padded ``[B, S, E + 1]`` form of input ``index`` if it is a nested tensor (the
    trace records no shape for those), else ``None``."""
    if index >= ctx.n_inputs or ctx.is_tensor(index):
        return None
    return ctx.arg(index, "v")  # bound by _nested_tensor_from_mask


def _unnest(ctx: OpContext, nested: NTensor) -> tuple[NTensor, NTensor]:
    """(data [B, S, E], validity [B, S, 1]) of a padded nested tensor."""
    width = int(nested.shape[-1]) - 1
    axis = nested.rank - 1
    data = ctx.tmp("slice", [nested], {"axes": [axis], "begin": [0], "end": [width]}, suffix="data")
    valid = ctx.tmp("slice", [nested], {"axes": [axis], "begin": [width], "end": [width + 1]}, suffix="valid")
    return data, valid


def _linear(ctx: OpContext, x: NTensor, w: NTensor, b: NTensor | None, tag: str) -> NTensor:
    """``x @ w^T + b`` on ``[B, L, E_in]``."""
    y = ctx.tmp("matmul", [x, ctx.to_rank(ctx.cast(w, x.dtype), x.rank)],
                {"transposeA": False, "transposeB": True}, suffix=tag)
    if b is None:
        return y
    return ctx.tmp("add", [y, ctx.to_rank(ctx.cast(b, x.dtype), x.rank)], suffix=f"{tag}_bias")


def _rows(ctx: OpContext, w: NTensor, begin: int, end: int, tag: str) -> NTensor:
    """Rows ``begin:end`` of a packed q/k/v weight or bias (tract folds them at load)."""
    return ctx.tmp("slice", [w], {"axes": [0], "begin": [begin], "end": [end]}, suffix=tag)


def _heads(ctx: OpContext, x: NTensor, heads: int, tag: str) -> NTensor:
    """[B, L, E] -> [B, H, L, E/H]."""
    b, length, e = x.shape
    split = ctx.tmp("reshape", [x], {"shape": [heads, int(e) // heads], "axis_start": 2, "axis_count": 1},
                    dtype=x.dtype, shape=(b, length, heads, int(e) // heads), suffix=f"{tag}_split")
    return ctx.tmp("transpose", [split], {"axes": [0, 2, 1, 3]}, suffix=f"{tag}_heads")


def _layer_norm(ctx: OpContext, x: NTensor, w: NTensor, b: NTensor, eps: float, tag: str) -> NTensor:
    centered, inv = normalize(ctx, x, [x.rank - 1], eps)
    y = ctx.tmp("mul", [centered, inv], suffix=f"{tag}_normed")
    y = ctx.tmp("mul", [y, ctx.to_rank(ctx.cast(w, x.dtype), x.rank)], suffix=f"{tag}_scaled")
    return ctx.tmp("add", [y, ctx.to_rank(ctx.cast(b, x.dtype), x.rank)], suffix=tag)


def _blocked_bias(ctx: OpContext, mask: NTensor, mask_type: int | None, dtype: str) -> NTensor:
    """torch's fused attention blocks a key where the mask is True, or non-zero for a float
    mask (it converts float masks to bool): an additive bias lined up with [B, H, L, S]."""
    if mask_type is None:
        mask_type = 2 if mask.rank == 4 else -1
    if mask_type not in _MASK_AXES or mask.rank != 4 - len(_MASK_AXES[mask_type]):
        raise ctx.unsupported(f"a rank-{mask.rank} attention mask with mask_type={mask_type}",
                              "pass a [L, S] attn_mask or a [B, S] key_padding_mask")
    allowed = ctx.tmp("not", [mask], suffix="allowed") if mask.dtype == "bool" else \
        ctx.tmp("eq", [mask, 0.0 if mask.dtype in FLOAT_DTYPES else 0], suffix="allowed")
    bias = bool_to_bias(ctx, allowed, dtype)
    axes = _MASK_AXES[mask_type]
    return ctx.tmp("unsqueeze", [bias], {"axes": axes}, suffix="bias4") if axes else bias


def _attention(
    ctx: OpContext, query: NTensor, key: NTensor, value: NTensor, heads: int, qkv_w: NTensor, qkv_b: NTensor,
    out_w: NTensor, out_b: NTensor, bias: NTensor | None, need_weights: bool,
) -> tuple[NTensor, NTensor | None]:
    """Multi-head attention on batch-first ``[B, L, E]`` inputs: (output [B, L, E], weights
    [B, H, L, S] when ``need_weights``)."""
    e = int(query.shape[-1])
    dtype = query.dtype
    if query is key and key is value:  # self-attention: one projection, then split
        qkv = _linear(ctx, query, qkv_w, qkv_b, "qkv")
        q, k, v = (ctx.tmp("slice", [qkv], {"axes": [2], "begin": [i * e], "end": [(i + 1) * e]}, suffix=n)
                   for i, n in enumerate("qkv"))
    else:
        q, k, v = (_linear(ctx, x, _rows(ctx, qkv_w, i * e, (i + 1) * e, f"w_{n}"),
                           _rows(ctx, qkv_b, i * e, (i + 1) * e, f"b_{n}"), n)
                   for i, (n, x) in enumerate(zip("qkv", (query, key, value))))
    inner = "f32" if dtype == "f16" and ctx.caps.force_attention_inner_in_f32 else dtype
    q, k, v = (_heads(ctx, ctx.cast(t, inner), heads, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    scale = 1.0 / math.sqrt(e // heads)
    weights: NTensor | None = None
    if ctx.caps.reify_sdpa and not need_weights:
        args = [q, k, v] + ([mask_for_sdpa(ctx, bias, q.shape[2], k.shape[2])] if bias is not None else [])
        attrs = {"scale": scale, "datum_type": inner, "acc_datum_type": inner, "is_causal": False}
        attended = ctx.tmp("tract_transformers_sdpa", args, attrs, dtype=inner, shape=q.shape, suffix="sdpa")
    else:
        scores = ctx.tmp("matmul", [q, k], {"transposeA": False, "transposeB": True}, suffix="scores")
        scores = ctx.tmp("mul", [scores, scale], suffix="scaled")
        if bias is not None:
            scores = ctx.tmp("add", [scores, bias], suffix="masked")
        weights = ctx.tmp("softmax", [scores], {"axes": [3]}, suffix="probs")
        attended = ctx.tmp("matmul", [weights, v], {"transposeA": False, "transposeB": False}, suffix="attended")
    merged = ctx.tmp("transpose", [attended], {"axes": [0, 2, 1, 3]}, suffix="merged")
    b, length = merged.shape[:2]
    merged = ctx.tmp("reshape", [merged], {"shape": [e], "axis_start": 2, "axis_count": 2},
                     dtype=inner, shape=(b, length, e), suffix="merged_flat")
    out = _linear(ctx, ctx.cast(merged, dtype), out_w, out_b, "out_proj")
    return out, (ctx.cast(weights, dtype) if weights is not None else None)


def _output(ctx: OpContext, t: NTensor, out: int = 0) -> NTensor:
    """``t``, computed by the helpers above, as node output ``out`` (an identity tract
    removes at load)."""
    return ctx.emit("copy", [t], out=out)


@handler("aten::_native_multi_head_attention", args="t t t i i t t t t t? b b i?")
def native_multi_head_attention(
    ctx: OpContext, query: NTensor, key: NTensor, value: NTensor, embed_dim: int, heads: int,
    qkv_w: NTensor, qkv_b: NTensor, out_w: NTensor, out_b: NTensor, mask: NTensor | None,
    need_weights: bool, average: bool, mask_type: int | None,
) -> list[NTensor | None]:
    """aten::_native_multi_head_attention(Tensor query, Tensor key, Tensor value, int embed_dim, int num_head, Tensor qkv_weight, Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, Tensor? mask=None, bool need_weights=True, bool average_attn_weights=True, int? mask_type=None) -> (Tensor, Tensor)"""  # noqa: E501
    if query.rank != 3 or embed_dim % heads:
        raise ctx.unsupported(f"a rank-{query.rank} query with {embed_dim} channels in {heads} heads")
    ctx.static(query, [2], "multi-head attention (the head split)")
    dtype = query.dtype
    bias = _blocked_bias(ctx, mask, mask_type, dtype) if mask is not None else None
    out, weights = _attention(ctx, query, key, value, heads, qkv_w, qkv_b, out_w, out_b, bias, need_weights)
    if not need_weights or weights is None:
        return [_output(ctx, out), None]
    if average:
        weights = ctx.tmp("mean_reduce", [weights], {"axes": [1]}, suffix="mean_heads")
        return [_output(ctx, out), ctx.emit("squeeze", [weights], {"axes": [1]}, out=1)]
    return [_output(ctx, out), _output(ctx, weights, 1)]


@handler("aten::_transformer_encoder_layer_fwd", args="_ i i t t t t b b f t t t t t t t t t? i?")
def transformer_encoder_layer(
    ctx: OpContext, embed_dim: int, heads: int, qkv_w: NTensor, qkv_b: NTensor, out_w: NTensor, out_b: NTensor,
    use_gelu: bool, norm_first: bool, eps: float, norm1_w: NTensor, norm1_b: NTensor, norm2_w: NTensor,
    norm2_b: NTensor, ffn1_w: NTensor, ffn1_b: NTensor, ffn2_w: NTensor, ffn2_b: NTensor,
    mask: NTensor | None, mask_type: int | None,
) -> NTensor:
    """aten::_transformer_encoder_layer_fwd(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, Tensor norm_weight_1, Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, Tensor ffn_bias_1, Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask=None, int? mask_type=None) -> Tensor"""  # noqa: E501
    nested = _nested(ctx, 0)
    valid: NTensor | None = None
    if nested is not None:
        src, valid = _unnest(ctx, nested)
        # Padding keys are blocked: the validity channel is the key padding mask.
        padding = ctx.tmp("eq", [ctx.tmp("squeeze", [valid], {"axes": [2]}, suffix="valid_bs"), 0.0],
                          suffix="padding")
        mask, mask_type = padding, 1
    else:
        src = ctx.arg(0, "t")
    if src.rank != 3 or embed_dim % heads:
        raise ctx.unsupported(f"a rank-{src.rank} input with {embed_dim} channels in {heads} heads")
    ctx.static(src, [2], "the encoder layer (the head split)")
    bias = _blocked_bias(ctx, mask, mask_type, src.dtype) if mask is not None else None

    def attend(x: NTensor) -> NTensor:
        return _attention(ctx, x, x, x, heads, qkv_w, qkv_b, out_w, out_b, bias, False)[0]

    def feed_forward(x: NTensor) -> NTensor:
        hidden = _linear(ctx, x, ffn1_w, ffn1_b, "ffn1")
        if use_gelu:  # exact gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
            erf = ctx.tmp("tract_core_erf", [ctx.tmp("mul", [hidden, 1.0 / math.sqrt(2.0)], suffix="gelu_in")],
                          suffix="gelu_erf")
            cdf = ctx.tmp("mul", [ctx.tmp("add", [erf, 1.0], suffix="gelu_1p"), 0.5], suffix="gelu_cdf")
            hidden = ctx.tmp("mul", [hidden, cdf], suffix="gelu")
        else:
            hidden = ctx.tmp("relu", [hidden], suffix="relu")
        return _linear(ctx, hidden, ffn2_w, ffn2_b, "ffn2")

    x = src
    if norm_first:
        x = ctx.tmp("add", [src, attend(_layer_norm(ctx, src, norm1_w, norm1_b, eps, "norm1"))], suffix="res1")
        x = ctx.tmp("add", [x, feed_forward(_layer_norm(ctx, x, norm2_w, norm2_b, eps, "norm2"))], suffix="res2")
    else:
        x = _layer_norm(ctx, ctx.tmp("add", [src, attend(src)], suffix="res1"), norm1_w, norm1_b, eps, "norm1")
        x = _layer_norm(ctx, ctx.tmp("add", [x, feed_forward(x)], suffix="res2"), norm2_w, norm2_b, eps, "norm2")
    if valid is None:
        return _output(ctx, x)
    return ctx.tmp("concat", [[x, valid]], {"axis": 2}, suffix="nested")


@handler("aten::_nested_tensor_from_mask", args="t t b?")
def nested_tensor_from_mask(ctx: OpContext, t: NTensor, mask: NTensor, _check: bool | None) -> NTensor:
    """aten::_nested_tensor_from_mask(Tensor t, Tensor mask, bool mask_check=True) -> Tensor
    (item i = t[i, :n_i], where mask [B, S] holds n_i leading Trues)"""
    if t.rank != 3 or mask.rank != 2:
        raise ctx.unsupported(f"a nested tensor from a rank-{t.rank} tensor and a rank-{mask.rank} mask",
                              "nn.TransformerEncoder builds them from [B, S, E] and [B, S]")
    valid = ctx.tmp("unsqueeze", [ctx.cast(mask, t.dtype)], {"axes": [2]}, suffix="valid")
    return ctx.tmp("concat", [[t, valid]], {"axis": 2}, suffix="nested")


@handler("aten::to_padded_tensor", args="_ f D?")
def to_padded_tensor(ctx: OpContext, padding: float, size: list[Size] | None) -> NTensor:
    """aten::to_padded_tensor(Tensor self, float padding, SymInt[]? output_size=None) -> Tensor"""
    nested = _nested(ctx, 0)
    if nested is None:
        raise ctx.unsupported("to_padded_tensor of a tensor that is not nested")
    data, valid = _unnest(ctx, nested)
    if size is not None and list(size) != list(data.shape):
        raise ctx.unsupported(f"padding a nested tensor to {size} instead of its padded shape {list(data.shape)}",
                              "pad to the size of the tensor the nested tensor was made from")
    keep = ctx.tmp("ne", [valid, 0.0], suffix="keep")
    return ctx.emit("select", [keep, data, typed_scalar(ctx, padding, data.dtype)])
