"""The module that is traced: ``input_ids`` and the flat past cache in, logits and the grown
cache out, with positions and masks computed in the graph from the real sizes.

Inputs: ``input_ids [1, S]`` (int64), then ``in_cache_key_{i}``, ``in_cache_value_{i}``
``[1, n_kv, P, hd]`` per layer (``KVLayout``: keys and values may differ in width, as
multi-head latent attention's do). Outputs: ``outputs`` (logits ``[1, N, V]``), then
``out_cache_key_{i}``, ``out_cache_value_{i}`` ``[1, n_kv, P+S, hd]``. A linear-attention
(gated delta net) layer takes ``in_cache_conv_{i}``, ``in_cache_recurrent_{i}`` and returns
``out_cache_conv_{i}``, ``out_cache_recurrent_{i}`` instead: fixed-size states, no P axis
(llm/linear_attention.py); so does a state-space layer (Mamba, Mamba2: both states; LFM2's
short convolutions: the convolution state only; llm/state_space.py), and a hybrid layer
(attention beside Mamba2, Falcon-H1) takes its keys and values, then its states. A model
without keys and values (Mamba) has no P at all. A layer that reuses another layer's keys
and values (KV sharing, ``KVLayout.shared``), or has no token mixer (Nemotron-H's MoE
layers), has no cache input or output; the others keep their index.

Everything that depends on S and P is built from the tensors' sizes, so the traced graph
is symbolic in both and one artefact serves prompt processing (P = 0) and generation
(S = 1):

- positions are ``P .. P+S-1`` (the true past length, whatever the architecture does
  with its cache object);
- the mask is additive ``[1, 1, S, P+S]``: query i (absolute position P+i) sees key j
  when ``j <= P+i``, and for a sliding-window layer only when also ``j > P+i - window``
  (transformers' rule), for a chunked layer (Llama 4) only keys of the query's own
  chunk. Models with several layer types get one mask per type (none for
  linear-attention and state-space layers, which see only their states).

Multimodal decoders (``fastnnef.multimodal``) give the wrapper ``extra_inputs``: graph
inputs after the cache (the modality embeddings and what places them) that turn
``input_ids`` into the embeddings and positions the model is fed (and may widen what the
masks let see, e.g. image tokens seeing each other), and may add outputs after the cache.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import Any, Protocol

import torch
from torch import nn

from fastnnef.fx_graph.repeats import RepeatPlan, StateAccess
from fastnnef.llm.alibi import alibi_lengths, alibi_modules
from fastnnef.llm.architectures import CHUNKED_ATTENTION, KVLayout
from fastnnef.llm.cache import CACHE_ATTRIBUTES, cache_from_flat, cache_kwarg, flat_from_cache
from fastnnef.llm.linear_attention import (
    LINEAR_ATTENTION,
    GatedDeltaNetOps,
    gated_delta_net_forward,
    is_gated_delta_net_config,
    linear_attention_modules,
    linear_layout,
)
from fastnnef.llm.long_rope import long_rope_modules, scale_selected
from fastnnef.llm.state_space import StateSpaceOps, state_space_forward, state_space_mixers
from fastnnef.llm.transformers_api import DynamicCache

# transformers' cache layer types of layers that keep states (the mask of a layer that
# keeps states only is None: it sees only its states).
HYBRID = "hybrid"
STATE_LAYER_TYPES = (LINEAR_ATTENTION, "conv", HYBRID)
STATE_ONLY_LAYER_TYPES = (LINEAR_ATTENTION, "conv")

KV_STATES = ("key", "value")
LINEAR_STATES = ("conv", "recurrent")
# torch >= 2.6 says when torch.export captures (older ones: never, and every layer is captured).
_exporting = getattr(torch.compiler, "is_exporting", lambda: False)


def layer_cache_names(n_layers: int, linear_layers: Collection[int] = (), shared_layers: Collection[int] = (),
                      states: Mapping[int, tuple[str, ...]] | None = None) -> list[tuple[str, ...]]:
    """Each layer's cache tensors, by kind: keys and values, a gated delta net's two states
    (``linear_layers``), nothing for a shared layer, or what ``states`` gives the layer
    (state-space layers; hybrid layers: keys and values, then their states)."""
    states = states or {}
    return [() if i in shared_layers else states[i] if i in states else LINEAR_STATES if i in linear_layers
            else KV_STATES for i in range(n_layers)]


def io_names(n_layers: int, linear_layers: Collection[int] = (), shared_layers: Collection[int] = (),
             states: Mapping[int, tuple[str, ...]] | None = None) -> tuple[list[str], list[str]]:
    """The artefact's input and output names (the reference's conventions). Layers keep
    their index in the names; a shared layer (no cache of its own) has none."""
    cache = [f"cache_{kind}_{i}"
             for i, kinds in enumerate(layer_cache_names(n_layers, linear_layers, shared_layers, states))
             for kind in kinds]
    return ["input_ids"] + [f"in_{c}" for c in cache], ["outputs"] + [f"out_{c}" for c in cache]


def dynamic_axes(n_layers: int, linear_layers: Collection[int] = (), shared_layers: Collection[int] = (),
                 states: Mapping[int, tuple[str, ...]] | None = None) -> dict[str, dict[int, str]]:
    """S on ``input_ids`` axis 1, P on axis 2 of every input key and value (convolution and
    recurrent states have a fixed shape)."""
    kv = [f"in_cache_{kind}_{i}"
          for i, kinds in enumerate(layer_cache_names(n_layers, linear_layers, shared_layers, states))
          for kind in kinds if kind in KV_STATES]
    return {"input_ids": {1: "S"}, **{name: {2: "P"} for name in kv}}


def assertions(max_positions: int | None, has_past: bool = True) -> list[str]:
    """The reference's five ``tract_assert`` lines, in its order (S+P strictly below the
    model's maximum position count, a line left out for a model without one: BLOOM; the
    two scenario lines let tract specialize). A model without any key/value cache (only
    state-space layers) has no P: S alone is bounded, by ``max_positions`` where the
    config has one."""
    if not has_past:
        return ["tract_assert S >= 1"] + ([f"tract_assert S < {max_positions}"] if max_positions is not None else [])
    bound = [f"tract_assert S+P < {max_positions}"] if max_positions is not None else []
    return ["tract_assert P >= 0", "tract_assert S >= 1", *bound, "tract_assert tg: S==1", "tract_assert pp: P==0"]


def decoder_layers(lm: nn.Module, n_layers: int) -> nn.ModuleList | None:
    """The model's decoder layers: its list of ``n_layers`` modules holding the most
    weights (``model.layers``, ``transformer.h``...), or None."""
    lists = [m for m in lm.modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    if not lists:
        return None
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def attention_masks(
    past: int, new: int, windows: dict[str, Any], dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Additive masks ``[1, 1, S, P+S]`` per layer type (0 where visible, dtype's min
    elsewhere); ``past`` and ``new`` are sizes read from tensors, so traced symbolically."""
    key_pos = torch.arange(past + new)                    # [P+S]
    query_pos = torch.arange(past, past + new)            # [S]
    distance = query_pos[:, None] - key_pos[None, :]      # [S, P+S]: how far back each key is
    zero = torch.zeros((), dtype=dtype)
    hidden = torch.full((), torch.finfo(dtype).min, dtype=dtype)
    masks: dict[str, torch.Tensor] = {}
    for kind, window in windows.items():
        if window is None:
            visible = distance >= 0
        elif kind == CHUNKED_ATTENTION:
            # 0 <= distance <= the query's offset in its chunk: the keys of its own chunk
            # up to itself, as one comparison (below).
            offset = query_pos[:, None] % window
            visible = (2 * distance - offset).abs() <= offset
        else:
            # 0 <= distance < window as ONE comparison: tract's optimizer reasons about
            # every comparison of ranges once per scenario (tg:, pp:), and the
            # conjunction of two took it 10 to 40 s on a 2-layer model.
            visible = (2 * distance - (window - 1)).abs() <= window - 1
        masks[kind] = torch.where(visible, zero, hidden)[None, None]
    return masks


class ExtraInputs(Protocol):
    """Graph inputs after the cache that decide what the model is fed (see the module
    docstring): ``count`` tensors, the last inputs of the wrapper's forward."""

    @property
    def count(self) -> int: ...

    def feed(
        self, model: Any, input_ids: torch.Tensor, past: int, extras: tuple[torch.Tensor, ...],
        masks: dict[str, torch.Tensor],
    ) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        """The model's keywords replacing ``input_ids``/``position_ids`` (``inputs_embeds``,
        ``position_ids``; ``attention_masks``: replaces ``masks``, per layer type), and the
        outputs the graph returns after the cache."""
        ...


class KVCacheLM(nn.Module):
    """Wraps a Hugging Face causal LM for export (see the module docstring).

    ``num_logits_to_keep``: logits for the last N positions; 0 keeps all of them.
    ``extra_inputs``: inputs after the cache (multimodal decoders), or None.
    """

    def __init__(self, lm: Any, layout: KVLayout, num_logits_to_keep: int = 1,
                 extra_inputs: ExtraInputs | None = None):
        super().__init__()
        # Named as in torch_to_nnef_llm's wrapper, so weights get the same labels
        # (model.model.layers.0.self_attn.q_proj.weight, model.lm_head.weight).
        self.model = lm
        self.compute_dtype: torch.dtype = lm.dtype
        self.layout = layout
        self.num_logits_to_keep = num_logits_to_keep
        # Models whose forward slices hidden states before the LM head save the vocab
        # projection of every other position; others are sliced after.
        self._lm_slices = "logits_to_keep" in inspect.signature(lm.forward).parameters
        self._cache_kwarg = cache_kwarg(lm)
        text = lm.config.get_text_config(decoder=True)
        self.linear = linear_layout(text, layout.layer_types) if is_gated_delta_net_config(text) else None
        self.linear_layers: tuple[int, ...] = self.linear.layers if self.linear else ()
        # The gated-delta-net layers' token mixers, and the modules their exported forward
        # calls (see linear_attention.py); the wrapper holds the latter, not the model.
        self._linear_mixers = linear_attention_modules(lm, self.linear_layers) if self.linear else {}
        self.linear_attention = nn.ModuleDict({str(i): GatedDeltaNetOps() for i in self.linear_layers})
        # State-space and short-convolution layers (state_space.py), alone or beside
        # attention in a hybrid layer: their mixers, and the scan module each one calls.
        ssm_layers = tuple(i for i, kind in enumerate(layout.layer_types)
                           if kind in STATE_LAYER_TYPES and i not in self.linear_layers)
        self._ssm_mixers = state_space_mixers(lm, ssm_layers) if ssm_layers else {}
        self.state_space = nn.ModuleDict({str(i): StateSpaceOps() for i in ssm_layers})
        # Layers whose states are not a slice of a longer run's (test bundles: bundles.py).
        self.state_layers = tuple(sorted(self.linear_layers + ssm_layers))
        states = {i: (KV_STATES if layout.layer_types[i] == HYBRID else ()) + mixer.mixer.states
                  for i, mixer in self._ssm_mixers.items()}
        # Layers that see only their states take no mask (None); a hybrid layer's state-space
        # half takes the linear-attention one (Falcon-H1), and LFM2 looks its layers' masks
        # up by type: such models get masks per layer type even when all layers are alike.
        # (Mamba models take one mask, None, which Mamba2's model passes on as it is.)
        hybrid = HYBRID in layout.layer_types
        self._state_mask_kinds = [kind for kind in STATE_ONLY_LAYER_TYPES
                                  if kind in layout.layer_types or (hybrid and kind == LINEAR_ATTENTION)]
        self._mask_per_type = layout.mixed or hybrid or "conv" in layout.layer_types
        self.layer_names = layer_cache_names(layout.n_layers, self.linear_layers, layout.shared, states)
        self._states = states
        # ALiBi models (BLOOM, MPT): their biases built for the real key count (llm/alibi.py).
        self._alibi = alibi_modules(lm)
        # Phi-3.5-MoE: its long-rope scale picked in the graph, not by a Python branch (llm/long_rope.py).
        self._long_rope = long_rope_modules(lm)
        # The past length P is read from the first layer's keys (its place among the cache
        # inputs); a model without keys and values (state-space layers only) has no P.
        inputs = self.io_names()[0]
        self._first_key = next((inputs.index(name) - 1 for name in inputs if name.startswith("in_cache_key_")), None)
        self._past_inputs = [inputs.index(name) - 1 for name in self.dynamic_axes() if name != "input_ids"]
        self.extra_inputs = extra_inputs

    def forward(self, input_ids: torch.Tensor, *flat_cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
        extras: tuple[torch.Tensor, ...] = ()
        if self.extra_inputs is not None and self.extra_inputs.count:
            split = len(flat_cache) - self.extra_inputs.count
            flat_cache, extras = flat_cache[:split], flat_cache[split:]
        new = input_ids.shape[1]
        past = flat_cache[self._first_key].shape[2] if self._first_key is not None else 0
        if _exporting():
            # Every cache input has the one past length P (the artefact's symbol): said
            # before the layers run, their inputs have one size, not one symbol per input
            # until each layer's attention ties it to the mask's (alike layers are then
            # captured once: fx_graph/repeats.py).
            for index in self._past_inputs:
                torch._check(flat_cache[index].shape[2] == past)
        masks: dict[str, Any] = attention_masks(past, new, self.layout.windows, self.compute_dtype)
        fed: dict[str, Any] = {"input_ids": input_ids, "position_ids": torch.arange(past, past + new)[None]}
        extra_outputs: tuple[torch.Tensor, ...] = ()
        if self.extra_inputs is not None:
            fed, extra_outputs = self.extra_inputs.feed(self.model, input_ids, past, extras, masks)
            masks = fed.pop("attention_masks", masks)
        masks.update({kind: None for kind in self._state_mask_kinds})
        mask: torch.Tensor | dict[str, Any] | None = masks if self._mask_per_type else next(iter(masks.values()))
        cache = cache_from_flat(flat_cache, self.layer_names)
        kwargs: dict[str, Any] = {self._cache_kwarg: cache}
        if self._lm_slices:
            kwargs["logits_to_keep"] = self.num_logits_to_keep
        ops = {i: self.linear_attention[str(i)] for i in self.linear_layers}
        ssm_ops = {i: self.state_space[str(i)] for i in self._ssm_mixers}
        with (gated_delta_net_forward(self._linear_mixers, ops),  # type: ignore[arg-type]
              state_space_forward(self._ssm_mixers, ssm_ops),  # type: ignore[arg-type]
              alibi_lengths(self._alibi, past, new), scale_selected(self._long_rope)):
            out = self.model(attention_mask=mask, use_cache=True, return_dict=True, **fed, **kwargs)
        logits = out.logits
        if not self._lm_slices and self.num_logits_to_keep:
            logits = logits[:, -self.num_logits_to_keep :]
        return (logits, *flat_from_cache(cache, self.layer_names), *extra_outputs)

    def empty_cache(self, dtype: torch.dtype, positions: int = 0) -> list[torch.Tensor]:
        """The past of a prompt: ``[1, n_kv, 0, hd]`` per key, ``[1, n_kv, 0, value hd]`` per
        value (the layer's own); zero states for a linear-attention or state-space layer;
        nothing for a shared one. ``positions``: a past of that many positions, of zeros
        (the shapes of a cache, for a capture that reads no value)."""
        shapes: list[tuple[int, ...]] = []
        for i, names in enumerate(self.layer_names):
            if "key" in names:
                shapes += self.layout.key_value_shapes(i, positions)
            if i in self._ssm_mixers:
                shapes += self._ssm_mixers[i].shapes
            elif self.linear is not None and i in self.linear_layers:
                shapes += [self.linear.conv_shape, self.linear.recurrent_shape]
        return [torch.zeros(shape, dtype=dtype) for shape in shapes]

    def repeat_plan(self) -> RepeatPlan | None:
        """The decoder layers for ``layers_captured_once`` (fx_graph/repeats.py): layers
        with keys and values, told apart by their layer type (a sliding-window layer is
        not a full-attention one); layers with states or none of their own are captured
        as usual. Each layer's state is its entry of the cache object."""
        layers = decoder_layers(self.model, self.layout.n_layers)
        if layers is None:
            return None
        kinds = [self.layout.layer_types[i] if tuple(names) == KV_STATES else None
                 for i, names in enumerate(self.layer_names)]
        return RepeatPlan(list(layers), kinds, self._layer_state)

    def _layer_state(self, index: int, held: Any) -> StateAccess | None:
        """Layer ``index``'s keys and values in the cache object ``held``, as a getter and
        a setter; None for any other object."""
        if not isinstance(held, DynamicCache) or index >= len(held.layers):
            return None
        layer = held.layers[index]
        attributes = [CACHE_ATTRIBUTES[name] for name in self.layer_names[index]]

        def put(tensors: list[torch.Tensor]) -> None:
            for attribute, tensor in zip(attributes, tensors):
                setattr(layer, attribute, tensor)

        return (lambda: [getattr(layer, a) for a in attributes]), put

    @property
    def has_past(self) -> bool:
        """Whether the artefact has a P axis (a key/value cache)."""
        return self._first_key is not None

    def io_names(self) -> tuple[list[str], list[str]]:
        return io_names(self.layout.n_layers, self.linear_layers, self.layout.shared, self._states)

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        return dynamic_axes(self.layout.n_layers, self.linear_layers, self.layout.shared, self._states)
