"""Tiny random-weight checkpoints of every supported architecture, built from configs
(nothing is downloaded): 2 layers, hidden size 32 to 64, a vocabulary of 128.

``initializer_range`` is raised from transformers' 0.02 so that random models produce
varied greedy continuations (at 0.02 they repeat one token, which would make a
generation comparison weak)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
import transformers

VOCAB = 128
INIT = 0.3


def _decoder(cls: Any, **extra: Any) -> Any:
    base: dict[str, Any] = dict(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    )
    base.update(extra)
    return cls(**base)


CONFIGS: dict[str, Callable[[], Any]] = {
    "llama": lambda: _decoder(transformers.LlamaConfig),
    "mistral": lambda: _decoder(transformers.MistralConfig, sliding_window=None),
    "mistral-window": lambda: _decoder(transformers.MistralConfig, sliding_window=4),
    "qwen2": lambda: _decoder(transformers.Qwen2Config),
    "qwen3": lambda: _decoder(transformers.Qwen3Config, head_dim=16),
    "phi3": lambda: _decoder(transformers.Phi3Config, num_key_value_heads=4),
    "phi": lambda: _decoder(transformers.PhiConfig, num_key_value_heads=4, partial_rotary_factor=0.5),
    "gemma": lambda: _decoder(transformers.GemmaConfig, head_dim=8),
    "gemma2": lambda: _decoder(
        transformers.Gemma2Config, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
    ),
    "gpt2": lambda: transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2,
    ),
    "gpt_neox": lambda: _decoder(transformers.GPTNeoXConfig, rotary_pct=0.5, num_key_value_heads=None),
    "mixtral": lambda: _decoder(transformers.MixtralConfig, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": lambda: _decoder(
        transformers.Qwen2MoeConfig, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, decoder_sparse_step=1,
    ),
}


def build(name: str, dtype: torch.dtype = torch.float32) -> Any:
    """The tiny model ``name`` with seeded random weights, in eval mode."""
    torch.manual_seed(0)
    config = CONFIGS[name]()
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def save(name: str, directory: Path, dtype: torch.dtype = torch.float32) -> Path:
    """``save_pretrained`` of the tiny model: a local checkpoint (config.json + safetensors)."""
    build(name, dtype).save_pretrained(directory)
    return directory
