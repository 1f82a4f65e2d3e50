"""transformers' internals that fastnnef relies on, reached from this module only (its
public API, ``transformers.Auto*``, ``GenerationConfig`` and ``transformers.utils.logging``,
is used where needed): the cache classes a traced model's cache is rebuilt with, the
per-layer cache types, ``from_pretrained``'s checkpoint conversion mapping, and two model
helpers the multimodal exporters trace or check with. A transformers release that moves
one of them breaks this file alone; tests/llm/test_transformers_api.py checks that no other
module reaches into transformers' submodules.

Names that only some releases have are imported when first asked for, as the callers did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import DynamicCache as DynamicCache  # the cache object the traced forward takes
from transformers.cache_utils import DynamicLayer as DynamicLayer  # one layer's keys and values


def dummy_cache_layer() -> Any:
    """transformers' ``DummyLayer``: the cache layer of a layer that reuses another's keys
    and values (only releases with KV sharing have it)."""
    from transformers.cache_utils import DummyLayer

    return DummyLayer()


def layer_types_and_kwargs(text_config: Any) -> tuple[Any, Any]:
    """Each layer's cache type and the keywords its cache layer is built with, as
    transformers decides them (``cache_utils.get_layer_types_and_kwargs``)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    return get_layer_types_and_kwargs(text_config)


def conversion_mapping(model: Any) -> tuple[list[Any], list[Any], Callable[..., Any]] | None:
    """``from_pretrained``'s checkpoint key mapping for ``model``: its renamings, its
    converters and the function applying them (``rename_source_key``); None when this
    transformers has no such mapping."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:
        return None
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    return renamings, converters, rename_source_key


def merge_operations() -> tuple[type, type, Callable[[str], Any]]:
    """The converter operations fastnnef composes offloaded tensors by (``MergeModulelist``,
    ``Concatenate``) and the key order ``from_pretrained`` merges in (``dot_natural_key``)."""
    from transformers.core_model_loading import Concatenate, MergeModulelist, dot_natural_key

    return MergeModulelist, Concatenate, dot_natural_key


def bidirectional_mask(config: Any, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """transformers' own bidirectional attention mask (``masking_utils``), as its encoders build it."""
    from transformers.masking_utils import create_bidirectional_mask

    return create_bidirectional_mask(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask)


def qwen2_5_vl_vision_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                             sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2.5-VL's rotary embedding of its vision tower (``modeling_qwen2_5_vl``)."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision

    return apply_rotary_pos_emb_vision(q, k, cos, sin)
