"""The wrapper's masks and names, without tracing: masks equal transformers' own mask
functions (causal, sliding window, chunked) at any past length P and new-token count S."""

from __future__ import annotations

import pytest
import torch
from transformers.masking_utils import (
    causal_mask_function,
    chunked_causal_mask_function,
    sliding_window_causal_mask_function,
)

from fastnnef.llm.architectures import CHUNKED_ATTENTION, kv_layout
from fastnnef.llm.wrapper import assertions, attention_masks, dynamic_axes, io_names
from tests.llm.tiny import CONFIGS


@pytest.mark.parametrize("past, new", [(0, 1), (0, 7), (5, 1), (3, 4), (9, 6)])
@pytest.mark.parametrize("window", [None, 1, 2, 4])
def test_masks_match_transformers(past: int, new: int, window: int) -> None:
    masks = attention_masks(past, new, {"full": None, "sliding": window}, torch.float32)
    sliding = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    for kind, rule in (("full", causal_mask_function), ("sliding", sliding)):
        mask = masks[kind]
        assert mask.shape == (1, 1, new, past + new)
        for i in range(new):
            for j in range(past + new):
                visible = bool(rule(0, 0, torch.tensor(past + i), torch.tensor(j)))
                assert (mask[0, 0, i, j] == 0).item() == visible, (kind, i, j)
                if not visible:
                    assert mask[0, 0, i, j] == torch.finfo(torch.float32).min


@pytest.mark.parametrize("past, new", [(0, 1), (0, 9), (5, 1), (3, 4), (9, 6)])
@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_chunked_masks_match_transformers(past: int, new: int, chunk: int) -> None:
    """Llama 4's chunked layers: a query sees the keys of its own chunk up to itself."""
    mask = attention_masks(past, new, {CHUNKED_ATTENTION: chunk}, torch.float32)[CHUNKED_ATTENTION]
    rule = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.int64))
    for i in range(new):
        for j in range(past + new):
            visible = bool(rule(0, 0, torch.tensor(past + i), torch.tensor(j)))
            assert (mask[0, 0, i, j] == 0).item() == visible, (i, j)


def test_position_bounds_of_alibi_families() -> None:
    """BLOOM's config bounds no position (no S+P assertion); MPT's by max_seq_len."""
    assert kv_layout(CONFIGS["bloom"]()).max_positions is None
    assert "tract_assert S+P" not in " ".join(assertions(None))
    assert kv_layout(CONFIGS["mpt"]()).max_positions == 64


def test_mask_dtype() -> None:
    (mask,) = attention_masks(2, 3, {"full": None}, torch.float16).values()
    assert mask.dtype == torch.float16 and mask.min() == torch.finfo(torch.float16).min


def test_names_axes_and_assertions() -> None:
    assert io_names(2) == (
        ["input_ids", "in_cache_key_0", "in_cache_value_0", "in_cache_key_1", "in_cache_value_1"],
        ["outputs", "out_cache_key_0", "out_cache_value_0", "out_cache_key_1", "out_cache_value_1"],
    )
    assert dynamic_axes(1) == {"input_ids": {1: "S"}, "in_cache_key_0": {2: "P"}, "in_cache_value_0": {2: "P"}}
    assert assertions(4096) == ["tract_assert P >= 0", "tract_assert S >= 1", "tract_assert S+P < 4096",
                                "tract_assert tg: S==1", "tract_assert pp: P==0"]


def test_linear_attention_states_names_and_axes() -> None:
    """Linear-attention layers take and return conv and recurrent states (the reference's
    names), without the P axis."""
    inputs, outputs = io_names(3, linear_layers=(0, 2))
    assert inputs == ["input_ids", "in_cache_conv_0", "in_cache_recurrent_0", "in_cache_key_1", "in_cache_value_1",
                      "in_cache_conv_2", "in_cache_recurrent_2"]
    assert outputs == ["outputs"] + [name.replace("in_", "out_", 1) for name in inputs[1:]]
    assert dynamic_axes(3, linear_layers=(0, 2)) == {"input_ids": {1: "S"}, "in_cache_key_1": {2: "P"},
                                                     "in_cache_value_1": {2: "P"}}


def test_state_space_names_axes_and_assertions() -> None:
    """State-space layers (their own state names: LFM2's convolution state alone), a hybrid
    layer (keys and values, then its states) and a layer without a cache (Nemotron-H's
    MoE layers); P only on keys and values, and none at all without them."""
    states = {0: ("conv",), 1: ("key", "value", "conv", "recurrent")}
    inputs, outputs = io_names(3, shared_layers=(2,), states=states)
    assert inputs == ["input_ids", "in_cache_conv_0", "in_cache_key_1", "in_cache_value_1", "in_cache_conv_1",
                      "in_cache_recurrent_1"]
    assert outputs == ["outputs"] + [name.replace("in_", "out_", 1) for name in inputs[1:]]
    assert dynamic_axes(3, shared_layers=(2,), states=states) == {
        "input_ids": {1: "S"}, "in_cache_key_1": {2: "P"}, "in_cache_value_1": {2: "P"}}
    assert dynamic_axes(2, states={0: ("conv", "recurrent"), 1: ("conv", "recurrent")}) == {"input_ids": {1: "S"}}
    assert assertions(None, has_past=False) == ["tract_assert S >= 1"]
    assert assertions(64, has_past=False) == ["tract_assert S >= 1", "tract_assert S < 64"]


def test_shared_layers_have_no_cache_and_others_keep_their_index() -> None:
    """KV sharing (Gemma 4): the last two layers reuse the keys and values of layers 0 and
    1 and keep no cache, so the artefact has none for them; the global layers cache one
    head of width 16, the sliding ones two of width 8 (the config's per-layer values)."""
    from fastnnef.llm.architectures import kv_layout
    from fastnnef.llm.wrapper import KVCacheLM
    from tests.llm.tiny import build

    model = build("gemma4_text")
    layout = kv_layout(model.config)
    assert layout.shared == (2, 3)
    assert (layout.kv_heads, layout.key_dims, layout.value_dims) == ((2, 1, 2, 1), (8, 16, 8, 16), (8, 16, 8, 16))
    wrapper = KVCacheLM(model, layout)
    inputs, outputs = wrapper.io_names()
    assert inputs == ["input_ids", "in_cache_key_0", "in_cache_value_0", "in_cache_key_1", "in_cache_value_1"]
    assert outputs == ["outputs"] + [name.replace("in_", "out_", 1) for name in inputs[1:]]
    assert [tuple(t.shape) for t in wrapper.empty_cache(torch.float32)] == [(1, 2, 0, 8), (1, 2, 0, 8),
                                                                          (1, 1, 0, 16), (1, 1, 0, 16)]
    with torch.no_grad():
        _, *cache = wrapper(torch.tensor([[3, 5, 7]]), *wrapper.empty_cache(torch.float32))
    assert [tuple(t.shape) for t in cache] == [(1, 2, 3, 8), (1, 2, 3, 8), (1, 1, 3, 16), (1, 1, 3, 16)]
