"""JetMoE's routed experts in the dense form (llm/moe.py's, for JetMoE's own modules).

JetMoE routes twice per layer: its MLP (``JetMoeMoE``) and its attention's query and
output projections (``JetMoeMoA``, a mixture of attention heads) are each a set of experts
chosen per token by a top-k router. transformers groups the tokens per expert with a
``sort`` of the routing and splits them by counts read back as Python numbers, which a
trace would freeze to the example's routing. Here every expert runs on every token and
the results are combined with one-hot selections of the router's choices:

- ``moe_forward``: the MLP's outputs weighted by the routing gates (zero for the experts not
  picked), summed, plus the layer's bias;
- ``moa_map``: the queries of each token's k picked experts, ``[B, S, k, hidden]`` in the
  router's order, as ``JetMoeMoA.map`` returns them;
- ``moa_reduce``: each slot's output projection by the expert that made its query, weighted
  by its gate and summed over the slots, plus the bias, as ``JetMoeMoA.reduce``.

The router's choices (``top_k`` of its logits, in f32, gates by a softmax over them) are
computed as transformers computes them. Each costs ``num_experts / top_k`` times the
routed FLOPs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def is_jetmoe_moe(module: nn.Module) -> bool:
    """JetMoE's mixture-of-experts MLP (``JetMoeMoE``)."""
    return type(module).__name__ == "JetMoeMoE" and _has_parts(module)


def is_jetmoe_moa(module: nn.Module) -> bool:
    """JetMoE's mixture of attention heads (``JetMoeMoA``)."""
    return type(module).__name__ == "JetMoeMoA" and _has_parts(module)


def _has_parts(module: nn.Module) -> bool:
    parts = ("router", "input_linear", "output_linear")
    return all(isinstance(getattr(module, name, None), nn.Module) for name in parts)


def _route(router: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``tokens [T, H]`` -> the one-hot choices ``[T, k, E]``, the gates ``[T, k]`` (the
    softmax over the top-k logits) and the logits ``[T, E]``, as ``JetMoeTopKGating``."""
    logits = router.layer(tokens).float()
    top_logits, top_index = logits.topk(router.top_k, dim=1)
    gates = torch.softmax(top_logits, dim=1).type_as(tokens)
    choices = (top_index[..., None] == torch.arange(router.num_experts)).to(tokens.dtype)
    return choices, gates, logits


def _experts(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Every expert's linear on ``x``, ``[N, in]`` (the same for all) or ``[E, N, in]`` (one
    per expert): stacked ``weight [E, out, in]`` -> ``[E, N, out]``."""
    return (x if x.dim() == 3 else x[None]) @ weight.transpose(1, 2)


def moe_forward(self: Any, layer_input: torch.Tensor) -> torch.Tensor:
    """``JetMoeMoE.forward`` in the dense form (module docstring)."""
    batch, length, width = layer_input.shape
    tokens = layer_input.reshape(-1, width)
    choices, gates, _ = _route(self.router, tokens)
    routing = (choices * gates[..., None]).sum(1)  # [T, E]
    gate, up = _experts(self.input_linear.weight, tokens).chunk(2, dim=-1)
    out = _experts(self.output_linear.weight, self.activation(gate) * up)  # [E, T, H]
    summed = (out * routing.transpose(0, 1)[..., None]).sum(0)
    return summed.reshape(batch, length, self.input_size) + self.bias


def moa_map(self: Any, layer_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """``JetMoeMoA.map`` in the dense form: the picked experts' queries ``[B, S, k, hidden]``,
    the router's logits, and what ``moa_reduce`` needs (the choices and gates)."""
    batch, length, width = layer_input.shape
    tokens = layer_input.reshape(-1, width)
    choices, gates, logits = _route(self.router, tokens)
    queries = _experts(self.input_linear.weight, tokens)  # [E, T, hidden]
    picked = choices @ queries.transpose(0, 1)  # [T, k, E] @ [T, E, hidden] -> [T, k, hidden]
    return picked.reshape(batch, length, self.top_k, -1), logits, (choices, gates)


def moa_reduce(self: Any, layer_input: torch.Tensor, topo_info: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``JetMoeMoA.reduce`` in the dense form: ``layer_input [B, S, k, hidden]`` -> ``[B, S, H]``."""
    choices, gates = topo_info
    batch, length, slots, hidden = layer_input.shape
    out = _experts(self.output_linear.weight, layer_input.reshape(-1, hidden))  # [E, T*k, H]
    weights = (choices * gates[..., None]).reshape(-1, self.num_experts)  # [T*k, E]: the slot's expert and gate
    merged = (out * weights.transpose(0, 1)[..., None]).sum(0)  # [T*k, H]
    return merged.reshape(batch, length, slots, -1).sum(2) + self.bias
