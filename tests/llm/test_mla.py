"""Multi-head latent attention without tracing: the cache layout read from the config is
what the model's attention caches, and ``traceable_mla``'s ``expand_kv`` gives transformers'
values bit for bit, for the export only. (Whole models are exported and checked against
Hugging Face's generation in test_architectures.py.)"""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.cache_utils import DynamicCache

from fastnnef.llm.architectures import kv_layout, refusal
from fastnnef.llm.cache import cache_kwarg
from fastnnef.llm.mla import is_mla_attention, traceable_mla
from fastnnef.llm.moe import dense_experts, is_zero_experts
from fastnnef.llm.wrapper import KVCacheLM
from tests.llm.tiny import CONFIGS, build

MLA = sorted(name for name in CONFIGS if getattr(CONFIGS[name](), "kv_lora_rank", None))


def test_the_mla_configs_are_the_expected_families() -> None:
    assert {name.split("-")[0] for name in MLA} == {"axk1", "deepseek_v2", "deepseek_v3", "glm4_moe_lite",
                                                     "longcat_flash", "minicpm3", "youtu"}


@pytest.mark.parametrize("name", MLA)
def test_layout_is_what_the_attention_caches(name: str) -> None:
    model = build(name)
    layout = kv_layout(model.config)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([[3, 5, 7, 9]]), use_cache=True, **{cache_kwarg(model): cache})
    assert len(cache.layers) == layout.n_layers
    for index, layer in enumerate(cache.layers):
        keys, values = layout.key_value_shapes(index, 4)
        assert (tuple(layer.keys.shape), tuple(layer.values.shape)) == (keys, values)
    config = model.config
    assert set(zip(layout.kv_heads, layout.key_dims, layout.value_dims)) == {
        (1, config.kv_lora_rank, config.qk_rope_head_dim)}
    empty = KVCacheLM(model, layout).empty_cache(torch.float32)
    assert [tuple(t.shape) for t in empty[:2]] == [(1, 1, 0, config.kv_lora_rank), (1, 1, 0, config.qk_rope_head_dim)]


class RemoteDeepseekV3Config(transformers.DeepseekV3Config):
    """A config class from outside transformers, as a checkpoint's own code defines."""


def test_remote_code_mla_is_refused() -> None:
    """Remote code may cache MLA otherwise (the original DeepSeek code caches per-head keys
    and values): only transformers' own implementations are laid out."""
    assert refusal(CONFIGS["deepseek_v3"]()) is None
    remote = RemoteDeepseekV3Config(**CONFIGS["deepseek_v3"]().to_dict())
    reason = refusal(remote)
    assert reason is not None and "the checkpoint's own code" in reason and "remove auto_map" in reason


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v2"])
def test_traceable_expand_kv_is_exact_and_undone(name: str) -> None:
    model = build(name)
    attentions = [m for m in model.modules() if is_mla_attention(m)]
    assert len(attentions) == model.config.num_hidden_layers
    config = model.config
    latent, rotary = torch.randn(1, 1, 5, config.kv_lora_rank), torch.randn(1, 1, 5, config.qk_rope_head_dim)
    expected = [m.expand_kv(latent, rotary) for m in attentions]
    with traceable_mla(model) as switched:
        assert switched == len(attentions)
        got = [m.expand_kv(latent, rotary) for m in attentions]
    for (key, value), (want_key, want_value) in zip(got, expected):
        assert torch.equal(key, want_key) and torch.equal(value, want_value)
    assert all("expand_kv" not in vars(m) for m in attentions)  # the class's method again


def test_zero_computation_experts_dense_form() -> None:
    """LongCat-Flash's MoE block computes the same in the dense form, for tokens routed to
    zero-computation experts (the token itself) as for the others."""
    model = build("longcat_flash")
    block = next(m for m in model.modules() if is_zero_experts(getattr(m, "experts", None) or torch.nn.Module()))
    torch.manual_seed(1)
    hidden = torch.randn(1, 24, model.config.hidden_size)
    _, _, chosen = block.router(hidden)
    assert (chosen >= block.experts.num_routed_experts).any() and (chosen < block.experts.num_routed_experts).any()
    with torch.no_grad():
        expected = block(hidden)
        with dense_experts(block) as switched:
            got = block(hidden)
    assert switched == 1
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
