"""Phi-3.5-MoE's long-rope scale as a graph ``select`` on the key count (P+S).

``PhimoeRotaryEmbedding.forward`` multiplies cos and sin by ``long_mscale`` past the
original maximum position and by ``short_mscale`` before it, chosen by a Python ``if`` on
``max(position_ids) + 1``, a tensor's value: ``torch.export`` refuses that branch (a guard
on a data-dependent value) and the tracer freezes it. ``scale_selected`` gives those
modules, for one call, a forward that computes the same cos and sin with the scale picked
by ``torch.where`` on the same comparison, as transformers' own long-rope frequency update
picks its frequencies. The model's classes are untouched (an instance ``forward``, removed
on exit).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

# Matched by name: importing transformers' model module would reach into its internals
# (only llm/transformers_api.py does) and load Phi-3.5-MoE's modeling for every export.
_ROTARY_CLASS = "PhimoeRotaryEmbedding"


def long_rope_modules(model: nn.Module) -> list[nn.Module]:
    """The rotary embeddings of ``model`` whose scale is picked by a Python branch."""
    return [m for m in model.modules() if type(m).__name__ == _ROTARY_CLASS]


def _forward(module: Any, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rope = module.config.rope_parameters
    inv_freq, mscale = module.rope_init_fn(module.config)
    if rope["rope_type"] != "default":
        past_original = torch.max(position_ids) + 1 > rope["original_max_position_embeddings"]
        mscale = torch.where(past_original, rope["long_mscale"], rope["short_mscale"])
    freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * mscale).to(x.dtype), (emb.sin() * mscale).to(x.dtype)


@contextmanager
def scale_selected(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Within the block, ``modules`` pick their scale in the graph (module docstring)."""
    for module in modules:
        module.__dict__["forward"] = lambda x, position_ids, _m=module: _forward(_m, x, position_ids)
    try:
        yield
    finally:
        for module in modules:
            module.__dict__.pop("forward", None)
