"""Attention masks shared by attention.py (scaled_dot_product_attention) and
transformer.py (the fused encoder layers): a bool mask as an additive bias, and a mask
broadcast to the shape tract's sdpa reads."""

from __future__ import annotations

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor
from fastnnef.op.context import OpContext

# The most negative finite value per compute dtype: masked scores get it added. Finite (not
# -inf) so that 0 * bias stays 0 when a bool mask is turned into an additive one; tract's
# own causal mask uses the same value.
MIN_SCORE = {"f16": -65504.0, "f32": -3.4028234663852886e38, "f64": -1.7976931348623157e308}


def bool_to_bias(ctx: OpContext, mask: NTensor, dtype: str) -> NTensor:
    """True (attend) -> 0, False -> the dtype's minimum, as an additive mask.

    With a dynamic shape, the bias is broadcast to its own shape once more: tract 0.23.9's
    optimized FlashSDPA refuses at run time ("incompatible shapes") a mask computed by
    elementwise ops from a broadcast (a bool mask expanded to [1, 1, S, S], as transformers
    builds one under torch.export), and takes it when a broadcast is its last op."""
    blocked = ctx.tmp("not", [mask], suffix="blocked")
    as_float = ctx.cast(blocked, dtype)
    bias = ctx.tmp("mul", [as_float, MIN_SCORE[dtype]], suffix="bias")
    if mask.is_static():
        return bias
    return ctx.tmp("tract_core_broadcast", [bias], {"shape": list(mask.shape)}, suffix="bias_full")


def mask_for_sdpa(ctx: OpContext, mask: NTensor, rows: Size, cols: Size) -> NTensor:
    """tract's sdpa reads its mask as [B or 1, H or 1, rows, cols] exactly (it does not
    broadcast the last two axes), while torch broadcasts them: a key padding mask is
    [B, 1, 1, cols] (nn.MultiheadAttention, cross-attention). Broadcast those two."""
    if tuple(mask.shape[-2:]) == (rows, cols):
        return mask
    return ctx.tmp("tract_core_broadcast", [mask], {"shape": list(mask.shape[:-2]) + [rows, cols]},
                   suffix="mask_full")
