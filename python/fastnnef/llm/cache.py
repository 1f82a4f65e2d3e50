"""The artefact's flat cache tensors as the cache object transformers uses, and back.

The artefact takes ``in_cache_key_{i}`` / ``in_cache_value_{i}`` ``[1, n_kv, P, hd]`` and
returns ``out_cache_*`` ``[1, n_kv, P+S, hd]``: the past followed by the new entries. A
``DynamicCache`` whose layers already hold the past does exactly that: each layer's
``update`` concatenates the new keys and values on the sequence axis. The layers are
filled per instance (no class of transformers is patched), and are plain ``DynamicLayer``
even for sliding-window layers: the artefact keeps every past entry, and the sliding
mask built by the wrapper hides those outside the window. Linear-attention layers take
and return their two fixed-size states instead (llm/linear_attention.py); a layer that
reuses another's keys and values (KV sharing) takes and returns nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.llm.linear_attention import LinearStates

# The keyword a causal LM's ``forward`` takes its cache object by: transformers 5.24 renamed
# ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40).
CACHE_KWARGS = ("cache", "past_key_values")


def cache_kwarg(model: Any) -> str:
    """The name under which ``model.forward`` takes its cache, read from its signature
    (``inspect.signature`` follows the deprecation decorator to the real parameters), so
    releases before and after the rename, and remote code of either era, all work."""
    parameters = inspect.signature(model.forward).parameters
    for name in CACHE_KWARGS:
        if name in parameters:
            return name
    raise T2NErrorNotImplemented(
        f"{type(model).__name__}.forward takes no cache argument ({' or '.join(CACHE_KWARGS)}): "
        "the LLM exporter needs a model that returns its grown KV cache"
    )


def cache_from_flat(flat: Sequence[torch.Tensor], linear_layers: Collection[int] = (),
                    shared_layers: Collection[int] = ()) -> DynamicCache:
    """A cache holding ``flat = (key_0, value_0, key_1, value_1, ...)`` as its past (an
    empty past, P = 0, is a zero-length tensor on the sequence axis). The layers in
    ``linear_layers`` take ``(conv_i, recurrent_i)`` instead, held as ``LinearStates``
    (llm/linear_attention.py reads and replaces them); those in ``shared_layers`` take
    nothing: they get transformers' ``DummyLayer``, as the model's own cache gives a layer
    that reuses another's keys and values."""
    pairs = iter(zip(flat[0::2], flat[1::2]))
    layers: list[Any] = []
    for index in range(len(flat) // 2 + len(shared_layers)):
        if index in shared_layers:
            from transformers.cache_utils import DummyLayer  # only releases with KV sharing have it

            layers.append(DummyLayer())
            continue
        first, second = next(pairs)
        if index in linear_layers:
            layers.append(LinearStates(first, second))
            continue
        layer = DynamicLayer()
        # What lazy_initialization sets up, without the empty torch.tensor([]) it starts
        # from: the first update then concatenates onto the given past.
        layer.dtype, layer.device = first.dtype, first.device
        layer.keys, layer.values = first, second
        layer.is_initialized = True
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    cache.layer_class_to_replicate = None  # every layer is given: never add one lazily
    return cache


def flat_from_cache(cache: DynamicCache, n_layers: int, shared_layers: Collection[int] = ()) -> list[torch.Tensor]:
    """``(key_0, value_0, ...)`` after the forward: each layer's past plus the new entries
    (a linear-attention layer's states after the forward; nothing for a shared layer)."""
    if len(cache.layers) != n_layers:
        raise T2NErrorNotImplemented(
            f"the model used {len(cache.layers)} cache layers where its config has {n_layers}: "
            "its cache layout is not one the exporter knows"
        )
    flat: list[torch.Tensor] = []
    for index, layer in enumerate(cache.layers):
        if index in shared_layers:
            continue
        if isinstance(layer, LinearStates):
            flat += [layer.conv, layer.recurrent]
        else:
            flat += [layer.keys, layer.values]
    return flat
