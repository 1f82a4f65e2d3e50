"""Multi-head latent attention (MLA) in a form the export can follow.

transformers' MLA attention (DeepSeek-V2/V3 and the families built on its attention, which
all share one ``expand_kv``) caches the compressed latents (see
``architectures.kv_layout``) and expands the whole past into per-head keys and values at
every step with ``expand_kv``. That method writes the keys into an empty tensor with
``copy_`` and broadcasts the rotary key shared by all heads with ``expand``. Traced as it
is, the broadcast fails twice:

- when the rotary key comes out of complex-valued rotary embeddings (DeepSeek-V2), the
  exporter cannot tell how ``expand``'s size relates to the dynamic axes;
- tract 0.23.9's optimizer fails on the attention's matmul when the query is a
  concatenation (no-interleave rotary, ``rope_interleave=False``) and the key a
  concatenation with a broadcast or tiled part (its ``concat_then_einsum`` pass splits the
  matmul, and the declutter of the split part fails a rank check).

``traceable_mla(model)`` swaps in, per module instance, an ``expand_kv`` that computes
the same values, bit for bit: the rotary key reaches every head by adding zeros of shape
``[1, heads, 1, 1]`` (a broadcast of the addition, not of the tensor), and the keys are the
concatenation of the per-head and rotary parts. The modules are restored on exit; no
class of transformers is touched.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn


def is_mla_attention(module: nn.Module) -> bool:
    """transformers' MLA attention: it expands cached latents with ``kv_b_proj``."""
    return callable(getattr(module, "expand_kv", None)) and isinstance(getattr(module, "kv_b_proj", None), nn.Module)


def traceable_expand_kv(self: Any, kv_nope: torch.Tensor, k_rot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv_nope [B, 1, T, kv_lora_rank]``, ``k_rot [B, 1, T, qk_rope_head_dim]`` -> keys
    ``[B, heads, T, qk_nope_head_dim + qk_rope_head_dim]`` and values
    ``[B, heads, T, v_head_dim]``, as transformers' ``expand_kv`` (module docstring)."""
    batch, _, length, _ = kv_nope.shape
    heads = self.config.num_attention_heads
    expanded = self.kv_b_proj(kv_nope).view(batch, length, heads, self.qk_nope_head_dim + self.v_head_dim)
    k_nope, values = torch.split(expanded.transpose(1, 2), [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
    k_rot = k_rot + torch.zeros((1, heads, 1, 1), dtype=k_rot.dtype)
    return torch.cat([k_nope, k_rot], dim=-1), values


@contextmanager
def traceable_mla(model: nn.Module) -> Iterator[int]:
    """Within the block, every MLA attention module of ``model`` expands its latents with
    ``traceable_expand_kv``; yields how many modules were switched."""
    switched = [m for m in model.modules() if is_mla_attention(m)]
    for module in switched:
        module.expand_kv = types.MethodType(traceable_expand_kv, module)  # type: ignore[assignment]
    try:
        yield len(switched)
    finally:
        for module in switched:
            del module.expand_kv  # back to the class's method
