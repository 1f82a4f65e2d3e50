"""The artefact's flat cache tensors as the cache object transformers uses, and back.

The artefact takes ``in_cache_key_{i}`` / ``in_cache_value_{i}`` ``[1, n_kv, P, hd]`` and
returns ``out_cache_*`` ``[1, n_kv, P+S, hd]``: the past followed by the new entries. A
``DynamicCache`` whose layers already hold the past does exactly that: each layer's
``update`` concatenates the new keys and values on the sequence axis. The layers are
filled per instance (no class of transformers is patched), and are plain ``DynamicLayer``
even for sliding-window layers: the artefact keeps every past entry, and the sliding
mask built by the wrapper hides those outside the window. Linear-attention and
state-space layers take and return their fixed-size states instead (llm/linear_attention.py,
llm/state_space.py), hybrid layers both; a layer that reuses another's keys and values (KV
sharing) takes and returns nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.llm.linear_attention import LinearStates
from fastnnef.llm.transformers_api import DynamicCache, DynamicLayer, dummy_cache_layer

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


#: What each of a layer's cache tensors is, by its name in the artefact's IO
#: (``in_cache_{name}_{i}``): the attribute of the layer's cache object that holds it.
CACHE_ATTRIBUTES = {"key": "keys", "value": "values", "conv": "conv", "recurrent": "recurrent"}


def cache_from_flat(flat: Sequence[torch.Tensor], layer_names: Sequence[Sequence[str]]) -> DynamicCache:
    """A cache holding the flat tensors as its past, layer by layer: ``layer_names[i]`` names
    layer i's tensors (``wrapper.layer_cache_names``), e.g. ``("key", "value")``. An empty
    past (P = 0) is a zero-length tensor on the sequence axis. A layer with keys and values
    is a ``DynamicLayer``; one with convolution or recurrent states only (gated delta nets,
    state-space layers) a ``LinearStates``, which their forwards read and replace; one that
    has both (a hybrid layer) a ``DynamicLayer`` that also holds the states; one with
    nothing gets transformers' ``DummyLayer``, as the model's own cache gives a layer that
    reuses another's keys and values."""
    given = iter(flat)
    layers: list[Any] = []
    for names in layer_names:
        if not names:
            layers.append(dummy_cache_layer())
            continue
        tensors = {name: next(given) for name in names}
        if "key" not in tensors:
            layers.append(LinearStates(tensors["conv"], tensors.get("recurrent")))
            continue
        layer = DynamicLayer()
        # What lazy_initialization sets up, without the empty torch.tensor([]) it starts
        # from: the first update then concatenates onto the given past.
        layer.dtype, layer.device = tensors["key"].dtype, tensors["key"].device
        layer.is_initialized = True
        for name, tensor in tensors.items():
            setattr(layer, CACHE_ATTRIBUTES[name], tensor)
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    cache.layer_class_to_replicate = None  # every layer is given: never add one lazily
    return cache


def flat_from_cache(cache: DynamicCache, layer_names: Sequence[Sequence[str]]) -> list[torch.Tensor]:
    """The flat tensors after the forward, in the order of ``layer_names``: each layer's
    past plus the new entries, its states after the forward."""
    if len(cache.layers) != len(layer_names):
        raise T2NErrorNotImplemented(
            f"the model used {len(cache.layers)} cache layers where its config has {len(layer_names)}: "
            "its cache layout is not one the exporter knows"
        )
    return [getattr(layer, CACHE_ATTRIBUTES[name]) for layer, names in zip(cache.layers, layer_names)
            for name in names]
