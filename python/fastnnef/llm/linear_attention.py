"""Gated-delta-net layers (``linear_attention`` in Qwen3-Next, Qwen3.5, Qwen3.5-MoE): their
states as cache tensors, and the forward the wrapper runs them with.

Such a layer keeps no key/value cache but two fixed-size states, which the artefact takes
and returns beside the other layers' keys and values (names as the reference's):

- ``in_cache_conv_{i}`` / ``out_cache_conv_{i}`` ``[1, conv_dim, k]``: the last ``k`` inputs of
  the layer's short causal convolution (``conv_dim = 2 * key heads * key dim + value heads *
  value dim``, ``k = linear_conv_kernel_dim``);
- ``in_cache_recurrent_{i}`` / ``out_cache_recurrent_{i}`` ``[1, value heads, key dim, value
  dim]``: the gated delta rule's state.

Neither has a P axis: an empty past (a prompt) is zeros of that shape, as transformers' own
prompt path assumes (zero left context for the convolution, zero initial state for the rule).

transformers' forward of these layers branches on the sequence length (a chunked rule and a
padded convolution for prompts, a recurrent step for single tokens) and loops over it in
Python: traced, it would be frozen to the example's length. ``gated_delta_net_forward``
replaces it per module instance, for the duration of one wrapper call, by the same
computation written around two modules that tracing keeps whole
(op/custom_extractors/gdn.py): one ``tract_transformers_causal_conv1d_update`` and one
``tract_transformers_gdn_recurrent`` per layer, any S, from the given states. Projections,
gates and the gated norm are the module's own (``Qwen3NextGatedDeltaNet``'s fused
``in_proj_qkvz``/``in_proj_ba`` through its ``fix_query_key_value_ordering``, or Qwen3.5's
separate ``in_proj_qkv``/``in_proj_z``/``in_proj_b``/``in_proj_a``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.op.custom_extractors.gdn import (
    GATED_DELTA_NET_FEATURE,
    CausalConvUpdateReified,
    GatedDeltaNetRecurrentReified,
)

LINEAR_ATTENTION = "linear_attention"
# What the gated-delta-net state shapes are read from (the Qwen3-Next / Qwen3.5 config fields).
GDN_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")
_SILU = ("silu", "swish")
__all__ = ["GATED_DELTA_NET_FEATURE", "GDN_FIELDS", "LINEAR_ATTENTION", "GatedDeltaNetOps", "LinearLayout",
           "LinearStates", "gated_delta_net_forward", "gdn_config_refusal", "is_gated_delta_net_config",
           "linear_attention_modules", "linear_layout"]


@dataclass(frozen=True)
class LinearLayout:
    """The linear-attention layers of a model and the shapes of their two states."""

    layers: tuple[int, ...]
    conv_shape: tuple[int, int, int]  # [1, conv_dim, kernel]
    recurrent_shape: tuple[int, int, int, int]  # [1, value heads, key dim, value dim]


def gdn_config_refusal(text_config: Any) -> str | None:
    """Why this config's linear-attention layers are not gated delta nets the exporter
    handles, or None."""
    missing = [f for f in GDN_FIELDS if not isinstance(getattr(text_config, f, None), int)]
    if missing:
        return (f"its linear-attention layers are not gated delta nets of the Qwen3-Next / Qwen3.5 kind (the config "
                f"lacks {', '.join(missing)}): their state is not one the exporter lays out")
    key_dim, value_dim = text_config.linear_key_head_dim, text_config.linear_value_head_dim
    if key_dim != value_dim:
        return (f"its gated delta net has key heads of {key_dim} and value heads of {value_dim} dimensions; "
                "tract_transformers_gdn_recurrent needs them equal")
    if text_config.linear_num_value_heads % text_config.linear_num_key_heads:
        return "its gated delta net's value heads are not a multiple of its key heads"
    return None


def is_gated_delta_net_config(text_config: Any) -> bool:
    """Whether the config's linear-attention layers are gated delta nets (it names one of
    their fields); other linear-attention layers are state-space ones (llm/state_space.py)."""
    return any(getattr(text_config, f, None) is not None for f in GDN_FIELDS)


def linear_layout(text_config: Any, layer_types: tuple[str, ...]) -> LinearLayout | None:
    """The linear-attention layout of a config whose layers are ``layer_types``, or None
    when it has no linear-attention layer."""
    layers = tuple(i for i, kind in enumerate(layer_types) if kind == LINEAR_ATTENTION)
    if not layers:
        return None
    reason = gdn_config_refusal(text_config)
    if reason is not None:
        raise T2NErrorNotImplemented(f"this {text_config.model_type} model cannot be exported: {reason}")
    if len(layers) == len(layer_types):
        raise T2NErrorNotImplemented(
            "every layer of this model is a linear-attention layer: the artefact's past length P is read from "
            "the key/value cache of an attention layer, and there is none"
        )
    c = text_config
    conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    return LinearLayout(
        layers=layers, conv_shape=(1, conv_dim, c.linear_conv_kernel_dim),
        recurrent_shape=(1, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim),
    )


@dataclass
class LinearStates:
    """One linear-attention layer's entry in the wrapper's cache object: its states before
    the forward, replaced by those after it."""

    conv: torch.Tensor
    recurrent: torch.Tensor | None = None  # None for a layer with a convolution state only (llm/state_space.py)


class GatedDeltaNetOps(nn.Module):
    """The two modules one layer's forward calls (kept whole by the trace, see the module
    docstring); held by the wrapper, so that the model's own module tree is untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = CausalConvUpdateReified()
        self.rule = GatedDeltaNetRecurrentReified()


def _projections(self: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``hidden [b, S, H]`` -> the convolution's input ``[b, S, conv_dim]`` (queries, keys,
    values), the norm's gate ``z [b, S, hv, dv]``, and ``b``, ``a [b, S, hv]``."""
    batch, new = hidden.shape[:2]
    if hasattr(self, "in_proj_qkvz"):  # Qwen3-Next: fused, grouped per key head
        query, key, value, z, b, a = self.fix_query_key_value_ordering(self.in_proj_qkvz(hidden),
                                                                       self.in_proj_ba(hidden))
        widths = (self.key_dim, self.key_dim, self.value_dim)
        mixed = torch.cat([x.reshape(batch, new, width) for x, width in zip((query, key, value), widths)], dim=-1)
        return mixed, z, b, a
    z = self.in_proj_z(hidden).reshape(batch, new, self.num_v_heads, self.head_v_dim)
    return self.in_proj_qkv(hidden), z, self.in_proj_b(hidden), self.in_proj_a(hidden)


def _exported_forward(self: Any, hidden_states: torch.Tensor, cache: Any = None, attention_mask: Any = None,
                      ops: GatedDeltaNetOps | None = None, cache_params: Any = None, **kwargs: Any) -> torch.Tensor:
    """A gated-delta-net module's forward from the states in ``cache`` (see the module
    docstring); the states after it replace them there. The decoder layers of transformers
    5.23 pass the cache as ``cache_params`` (5.24 renamed it ``cache``)."""
    assert ops is not None  # bound by gated_delta_net_forward
    cache = cache if cache is not None else cache_params
    if cache is None:
        raise T2NErrorNotImplemented(
            f"{type(self).__name__} (layer {self.layer_idx}) was called without the cache object (as cache= or "
            "cache_params=): this transformers release passes the linear-attention states otherwise"
        )
    states: LinearStates = cache.layers[self.layer_idx]
    batch, new = hidden_states.shape[:2]
    mixed, z, b, a = _projections(self, hidden_states)
    conv_out, states.conv = ops.conv(mixed.transpose(1, 2), states.conv, self.conv1d.weight.squeeze(1))
    query, key, value = torch.split(conv_out.transpose(1, 2), [self.key_dim, self.key_dim, self.value_dim], dim=-1)
    # Sizes spelled out, not -1: the trace keeps S symbolic through them.
    query = query.reshape(batch, new, self.num_k_heads, self.head_k_dim)
    key = key.reshape(batch, new, self.num_k_heads, self.head_k_dim)
    value = value.reshape(batch, new, self.num_v_heads, self.head_v_dim)
    beta = b.sigmoid()
    # In f32 as transformers computes it (A_log.exp() may overflow f16).
    g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
    core, states.recurrent = ops.rule(query, key, value, g, beta, states.recurrent)
    core = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
    return self.out_proj(core.reshape(batch, new, self.value_dim))


def _is_gated_delta_net(module: nn.Module) -> bool:
    projections = ("in_proj_qkvz", "in_proj_ba") if hasattr(module, "in_proj_qkvz") else (
        "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
    modules = (*projections, "conv1d", "norm", "out_proj")
    return all(isinstance(getattr(module, name, None), nn.Module) for name in modules) \
        and all(hasattr(module, name) for name in ("A_log", "dt_bias", "layer_idx", "key_dim", "value_dim",
                                                   "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"))


def _check(module: nn.Module, path: str) -> None:
    """Raise when ``module`` (a linear-attention layer's mixer) is not one this forward computes."""
    if not _is_gated_delta_net(module):
        raise T2NErrorNotImplemented(
            f"{path} ({type(module).__name__}) is a linear-attention layer but not a gated delta net of the "
            "Qwen3-Next / Qwen3.5 kind: the LLM exporter does not know how to export it"
        )
    conv: Any = module.conv1d
    if conv.bias is not None or str(getattr(module, "activation", "silu")) not in _SILU:
        raise T2NErrorNotImplemented(
            f"{path}: tract_transformers_causal_conv1d_update is a bias-free convolution followed by SiLU; this "
            f"layer's has bias={conv.bias is not None} and activation {getattr(module, 'activation', None)!r}"
        )


def linear_attention_modules(model: nn.Module, layers: tuple[int, ...]) -> dict[int, nn.Module]:
    """The token mixer of each linear-attention layer of ``model`` (by ``layer_idx``),
    checked; raises when one is missing or not a gated delta net."""
    found: dict[int, nn.Module] = {}
    for path, module in model.named_modules():
        if getattr(module, "layer_type", None) == LINEAR_ATTENTION and hasattr(module, "layer_idx"):
            _check(module, path)
            found[int(module.layer_idx)] = module
    missing = sorted(set(layers) - set(found))
    if missing:
        raise T2NErrorNotImplemented(
            f"layers {missing} are linear-attention layers in the config, but the model has no gated delta net "
            "module for them that the LLM exporter knows"
        )
    return found


@contextmanager
def gated_delta_net_forward(modules: Mapping[int, nn.Module], ops: Mapping[int, GatedDeltaNetOps]) -> Iterator[None]:
    """Within the block, each module of ``modules`` computes ``_exported_forward`` with the
    ops of its layer (an instance attribute shadows the class's ``forward``; removed on exit)."""
    for layer, module in modules.items():
        module.forward = functools.partial(_exported_forward, module, ops=ops[layer])
    try:
        yield
    finally:
        for module in modules.values():
            del module.forward  # back to the class's forward
