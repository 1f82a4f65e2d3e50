"""Mixture-of-experts blocks in a form tracing can follow.

transformers' expert modules (``MixtralExperts``, ``Qwen2MoeExperts``, ...) loop over the
experts the current batch routes to: ``torch.jit.trace`` would freeze that loop to the
example's routing. Its ``batched_mm`` implementation gathers one weight matrix per
(token, expert) pair, which a long prompt cannot afford in memory.

The dense form computed here is exact and shape-static: every expert runs on every
token, and the outputs are summed with each token's routing weights (zero for the
experts the router did not pick). It costs ``num_experts / top_k`` times the expert
FLOPs of the sparse form.

``dense_experts(model)`` swaps it in per module instance (an instance attribute shadows
the class's ``forward``) and restores the modules on exit: no class or global registry
of transformers is touched, so other models and threads are unaffected.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn


def _is_experts(module: nn.Module) -> bool:
    """An experts module of transformers' ``use_experts_implementation`` family: 3-D
    stacked weights and the layout flags the decorator sets."""
    return (
        hasattr(module, "has_gate") and hasattr(module, "is_transposed") and hasattr(module, "num_experts")
        and isinstance(getattr(module, "down_proj", None), torch.Tensor)
    )


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: Any, transposed: bool) -> torch.Tensor:
    """Each expert's linear: ``x [E or 1, T, in]`` (1: the same tokens for every expert),
    stacked ``weight [E, out, in]`` (``[E, in, out]`` when transposed) -> ``[E, T, out]``."""
    out = x @ (weight if transposed else weight.transpose(1, 2))
    return out if bias is None else out + bias[:, None, :]


def dense_experts_forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """``hidden_states [T, H]``, the router's ``top_k_index``/``top_k_weights [T, k]`` ->
    ``[T, H]``, the weighted sum of the routed experts' outputs (see the module docstring)."""
    experts = torch.arange(self.num_experts)
    # [T, E]: the routing weight of each expert for each token (0 when not routed).
    routing = ((top_k_index[..., None] == experts).to(top_k_weights.dtype) * top_k_weights[..., None]).sum(1)
    bias = self.has_bias
    if self.has_gate:
        up = _linear(hidden_states[None], self.gate_up_proj, self.gate_up_proj_bias if bias else None, self.is_transposed)
        inner = self._apply_gate(up)
    else:
        up = _linear(hidden_states[None], self.up_proj, self.up_proj_bias if bias else None, self.is_transposed)
        inner = self.act_fn(up)
    out = _linear(inner, self.down_proj, self.down_proj_bias if bias else None, self.is_transposed)
    if self.has_post_expert_norm:
        out = self.post_expert_norm(out)
    weighted = out * routing.transpose(0, 1)[..., None].to(out.dtype)  # [E, T, H]
    return weighted.sum(0).to(hidden_states.dtype)


@contextmanager
def dense_experts(model: nn.Module) -> Iterator[int]:
    """Within the block, every experts module of ``model`` computes the dense form; yields
    how many modules were switched."""
    switched = [m for m in model.modules() if _is_experts(m)]
    for module in switched:
        module.forward = types.MethodType(dense_experts_forward, module)  # type: ignore[method-assign]
    try:
        yield len(switched)
    finally:
        for module in switched:
            del module.forward  # back to the class's forward
