"""Tiny random-weight checkpoints of every supported architecture, built from configs
(nothing is downloaded): 2 layers, hidden size 32 to 64, a vocabulary of 128.

``initializer_range`` is raised from transformers' 0.02 so that random models produce
varied greedy continuations (at 0.02 they repeat one token, which would make a
generation comparison weak)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# Gated-delta-net hybrids in the published checkpoints' layer order, which transformers
# derives from full_attention_interval: three linear-attention layers, then a full one
# (linear first, so the past length is not read from layer 0); 4 value heads over 2 key
# heads (grouped), a convolution of 4 taps. The "-every_2" variants put full attention
# every other layer (linear, full, linear, full: linear layers after a full one).
_GATED_DELTA_NET: dict[str, Any] = dict(
    num_hidden_layers=4, full_attention_interval=4, linear_num_value_heads=4, linear_num_key_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
)
# Pure state-space models: 2 Mamba layers of 64 channels (expand 2) over a state of 8, a
# convolution of 4 taps with a bias.
_MAMBA: dict[str, Any] = dict(
    num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, conv_kernel=4, use_conv_bias=True,
    vocab_size=VOCAB, initializer_range=INIT, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    tie_word_embeddings=False,
)
# The Mamba2 layers of the hybrids (Bamba, Granite 4.0-H): 4 heads of 16 in 2 groups, a
# state of 8, a convolution of 4 taps.
_MAMBA2_HYBRID: dict[str, Any] = dict(
    mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
    mamba_chunk_size=4,
)
_EVERY_2: dict[str, Any] = dict(_GATED_DELTA_NET, full_attention_interval=2)
# Qwen3.5's multimodal rotary embedding on text: 4 rotated frequency pairs (half of head_dim
# 16), interleaved over sections of 2, 1 and 1. (The default sections, 11+11+10 pairs,
# would leave a tiny head's sections empty.)
_MROPE: dict[str, Any] = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                              mrope_section=[2, 1, 1], mrope_interleaved=True)

_QWEN3_5_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32)


def _qwen3_5_text(**extra: Any) -> dict[str, Any]:
    return dict(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
        max_position_embeddings=64, initializer_range=INIT, head_dim=16, rope_parameters=_MROPE, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, **_GATED_DELTA_NET, **extra,
    )


# Gemma 4's text decoder: global layers with other head widths (16) and counts (1: keys
# serve as values) than the sliding ones (8, 2), the last two layers reusing the keys and
# values of the last earlier layer of their type (no cache of their own), per-layer input
# embeddings, final logit soft-capping.
_GEMMA4_TEXT: dict[str, Any] = dict(
    num_hidden_layers=4, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
    head_dim=8, global_head_dim=16, attention_k_eq_v=True, num_global_key_value_heads=1, vocab_size=VOCAB,
    max_position_embeddings=64, initializer_range=INIT, sliding_window=4, num_kv_shared_layers=2,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, final_logit_softcapping=30.0,
    bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
)
# Its mixture of experts beside the MLP (4 experts, 2 per token), without KV sharing or
# per-layer inputs.
_GEMMA4_MOE: dict[str, Any] = dict(
    _GEMMA4_TEXT, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
    hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16,
)


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
    "gemma3_text": lambda: _decoder(
        transformers.Gemma3TextConfig, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "gemma3": lambda: transformers.Gemma3Config(
        text_config=dict(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=VOCAB, max_position_embeddings=64, initializer_range=INIT, head_dim=8, sliding_window=4,
            query_pre_attn_scalar=8, layer_types=["sliding_attention", "full_attention"], bos_token_id=1,
            eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
            patch_size=8,
        ),
        mm_tokens_per_image=4, image_token_index=VOCAB - 1, boi_token_index=VOCAB - 2, eoi_token_index=VOCAB - 3,
        initializer_range=INIT, tie_word_embeddings=False,
    ),
    "gemma4_text": lambda: transformers.Gemma4TextConfig(**_GEMMA4_TEXT),
    "gemma4_text-moe": lambda: transformers.Gemma4TextConfig(**_GEMMA4_MOE),
    # A multimodal checkpoint (vision tower beside the decoder): the text decoder alone.
    "gemma4": lambda: transformers.Gemma4Config(
        text_config=_GEMMA4_TEXT, vision_config=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            head_dim=8, patch_size=4,
        ), audio_config=None, image_token_id=VOCAB - 1, boi_token_id=VOCAB - 2, eoi_token_id=VOCAB - 3,
        initializer_range=INIT, tie_word_embeddings=False,
    ),
    "qwen3_moe": lambda: _decoder(
        transformers.Qwen3MoeConfig, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    ),
    "gpt_oss": lambda: _decoder(
        transformers.GptOssConfig, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], swiglu_limit=1.0, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        },
    ),
    "olmo": lambda: _decoder(transformers.OlmoConfig, clip_qkv=1.0),
    "olmo2": lambda: _decoder(transformers.Olmo2Config),
    "olmoe": lambda: _decoder(transformers.OlmoeConfig, num_experts=4, num_experts_per_tok=2, clip_qkv=1.0),
    "granite": lambda: _decoder(
        transformers.GraniteConfig, embedding_multiplier=3.0, logits_scaling=2.0, residual_multiplier=0.5,
        attention_multiplier=0.2,
    ),
    "granitemoe": lambda: _decoder(
        transformers.GraniteMoeConfig, num_local_experts=4, num_experts_per_tok=2, embedding_multiplier=3.0,
        logits_scaling=2.0, residual_multiplier=0.5, attention_multiplier=0.2,
    ),
    "smollm3": lambda: _decoder(transformers.SmolLM3Config, no_rope_layer_interval=2),
    "glm": lambda: _decoder(transformers.GlmConfig, head_dim=8),
    "glm4": lambda: _decoder(transformers.Glm4Config, head_dim=8),
    "stablelm": lambda: _decoder(transformers.StableLmConfig, qk_layernorm=True, use_qkv_bias=True),
    "starcoder2": lambda: _decoder(transformers.Starcoder2Config, sliding_window=4),
    "cohere": lambda: _decoder(transformers.CohereConfig, logit_scale=0.5, use_qk_norm=False),
    "helium": lambda: _decoder(transformers.HeliumConfig, head_dim=8),
    "exaone4": lambda: _decoder(
        transformers.Exaone4Config, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
    ),
    "ernie4_5": lambda: _decoder(transformers.Ernie4_5Config, head_dim=8),
    "gptj": lambda: transformers.GPTJConfig(
        n_layer=2, n_embd=32, n_head=4, rotary_dim=4, vocab_size=VOCAB, n_positions=64, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    ),
    "falcon": lambda: transformers.FalconConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=64,
        initializer_range=INIT, bos_token_id=1, eos_token_id=2, new_decoder_architecture=True, num_kv_heads=2,
    ),
    "phi3-longrope": lambda: _decoder(
        transformers.Phi3Config, num_key_value_heads=4, original_max_position_embeddings=16, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 5.0, 8.0],
        },
    ),
    "olmo3": lambda: _decoder(
        transformers.Olmo3Config, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
    ),
    "cohere2": lambda: _decoder(
        transformers.Cohere2Config, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
    ),
    "seed_oss": lambda: _decoder(transformers.SeedOssConfig, head_dim=8),
    "apertus": lambda: _decoder(transformers.ApertusConfig),
    "arcee": lambda: _decoder(transformers.ArceeConfig),
    "hunyuan_v1_dense": lambda: _decoder(transformers.HunYuanDenseV1Config, head_dim=8),
    "nemotron": lambda: _decoder(transformers.NemotronConfig, head_dim=8),
    "persimmon": lambda: _decoder(transformers.PersimmonConfig, num_key_value_heads=None),
    "diffllama": lambda: _decoder(transformers.DiffLlamaConfig),
    "glm4_moe": lambda: _decoder(
        transformers.Glm4MoeConfig, head_dim=8, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        first_k_dense_replace=1, n_group=1, topk_group=1,
    ),
    "ernie4_5_moe": lambda: _decoder(
        transformers.Ernie4_5_MoeConfig, head_dim=8, moe_num_experts=4, moe_k=2, moe_intermediate_size=32,
        moe_layer_start_index=0,
    ),
    "codegen": lambda: transformers.CodeGenConfig(
        n_layer=2, n_embd=32, n_head=4, rotary_dim=4, vocab_size=VOCAB, n_positions=64, n_ctx=64,
        initializer_range=INIT, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    ),
    "gpt_bigcode": lambda: transformers.GPTBigCodeConfig(
        n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2,
    ),
    "opt": lambda: transformers.OPTConfig(
        num_hidden_layers=2, hidden_size=32, ffn_dim=64, num_attention_heads=4, vocab_size=VOCAB,
        max_position_embeddings=64, word_embed_proj_dim=32, init_std=INIT, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    ),
    "phimoe": lambda: _decoder(
        transformers.PhimoeConfig, num_local_experts=4, num_experts_per_tok=2, original_max_position_embeddings=16,
        rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 5.0, 8.0], "short_mscale": 1.0,
            "long_mscale": 1.0,
        },
    ),
    "qwen3_next": lambda: _decoder(
        transformers.Qwen3NextConfig, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, **_GATED_DELTA_NET,
    ),
    "qwen3_next-every_2": lambda: _decoder(
        transformers.Qwen3NextConfig, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, **_EVERY_2,
    ),
    "qwen3_5_text": lambda: _decoder(transformers.Qwen3_5TextConfig, head_dim=16, rope_parameters=_MROPE,
                                     **_GATED_DELTA_NET),
    "qwen3_5_text-every_2": lambda: _decoder(transformers.Qwen3_5TextConfig, head_dim=16, rope_parameters=_MROPE,
                                             **_EVERY_2),
    "qwen3_5_moe_text": lambda: _decoder(
        transformers.Qwen3_5MoeTextConfig, head_dim=16, rope_parameters=_MROPE, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, **_GATED_DELTA_NET,
    ),
    # Qwen3.5's published checkpoints are multimodal (a vision tower beside the text decoder).
    "qwen3_5": lambda: transformers.Qwen3_5Config(text_config=_qwen3_5_text(), vision_config=_QWEN3_5_VISION,
                                                  tie_word_embeddings=False),
    "qwen3_5_moe": lambda: transformers.Qwen3_5MoeConfig(
        text_config=_qwen3_5_text(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                  shared_expert_intermediate_size=32),
        vision_config=_QWEN3_5_VISION, tie_word_embeddings=False,
    ),
    # State-space and short-convolution layers (llm/state_space.py).
    "lfm2": lambda: _decoder(transformers.Lfm2Config, num_hidden_layers=3,
                             layer_types=["conv", "full_attention", "conv"], conv_bias=True),
    "mamba": lambda: transformers.MambaConfig(**_MAMBA),
    "falcon_mamba": lambda: transformers.FalconMambaConfig(**_MAMBA),
    "mamba2": lambda: transformers.Mamba2Config(**{**_MAMBA, "num_heads": 4, "head_dim": 16, "n_groups": 2,
                                                   "chunk_size": 4}),
    "lfm2_moe": lambda: _decoder(
        transformers.Lfm2MoeConfig, num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"],
        num_dense_layers=1, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    ),
    # Hybrids: a Mamba2 layer (4 heads of 16 in 2 groups, a state of 8), then attention.
    "bamba": lambda: _decoder(transformers.BambaConfig, attn_layer_indices=[1], **_MAMBA2_HYBRID),
    "granitemoehybrid": lambda: _decoder(
        transformers.GraniteMoeHybridConfig, layer_types=["mamba", "attention"], num_local_experts=4,
        num_experts_per_tok=2, shared_intermediate_size=48, **_MAMBA2_HYBRID,
    ),
    "nemotron_h": lambda: _decoder(
        transformers.NemotronHConfig, num_hidden_layers=3, layers_block_type=["mamba", "attention", "moe"],
        head_dim=8, ssm_state_size=8, mamba_num_heads=4, mamba_head_dim=16, n_groups=2, conv_kernel=4, expand=2,
        chunk_size=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=32,
    ),
    # Attention and Mamba2 side by side in each layer, with Falcon-H1's multipliers.
    "falcon_h1": lambda: _decoder(
        transformers.FalconH1Config, mamba_d_ssm=64, ssm_multipliers=[0.5, 1.5, 0.8, 1.2, 0.9], ssm_in_multiplier=0.7,
        attention_in_multiplier=0.9, key_multiplier=1.1, mlp_multipliers=[0.8, 1.2], **_MAMBA2_HYBRID,
    ),
    # Mamba2 layers, the second with Zamba2's shared attention block before it (hybrid).
    "zamba2": lambda: _decoder(
        transformers.Zamba2Config, layers_block_type=["mamba", "hybrid"], mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2, mamba_ngroups=2, n_mamba_heads=4, chunk_size=4, num_mem_blocks=1,
    ),
    "jamba": lambda: _decoder(
        transformers.JambaConfig, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
        expert_layer_offset=1, num_experts=4, num_experts_per_tok=2, mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2,
    ),
    # ALiBi position biases: BLOOM's from a padding mask (no max_position_embeddings), MPT's
    # sliced from a table of max_seq_len.
    "bloom": lambda: transformers.BloomConfig(
        n_layer=2, hidden_size=32, n_head=4, vocab_size=VOCAB, initializer_range=INIT, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    ),
    "mpt": lambda: transformers.MptConfig(
        n_layers=2, d_model=32, n_heads=4, vocab_size=VOCAB, max_seq_len=64, initializer_range=INIT,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ),
    # 4 experts, 2 per token, weights renormalized (p=1); grouped attention, clipped qkv.
    "dbrx": lambda: transformers.DbrxConfig(
        d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=VOCAB, initializer_range=INIT,
        attn_config=dict(kv_n_heads=2, clip_qkv=2.0, rope_theta=10000.0),  # transformers reads it there
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2, moe_normalize_expert_weights=1.0),
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    ),
    # Experts in the MLP and in the attention (query and output projections), 4, 2 per token.
    "jetmoe": lambda: transformers.JetMoeConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=32, kv_channels=8, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, vocab_size=VOCAB, max_position_embeddings=64,
        initializer_range=INIT, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    ),
    # Llama 4's text decoder: chunked local layers (chunks of 4) with rotary, a global layer
    # without rotary, a sigmoid-routed MoE with a shared expert on every layer. Attention
    # temperature tuning (of the layers without rotary) is off: it exports and generates
    # exactly too, but tract's optimizer then takes 80 s to load even this tiny model.
    "llama4_text": lambda: _decoder(
        transformers.Llama4TextConfig, num_hidden_layers=4, head_dim=8, intermediate_size_mlp=64,
        num_local_experts=4, num_experts_per_tok=1, attention_chunk_size=4, attn_temperature_tuning=False,
    ),
    # Multi-head latent attention (_mla): MoE families with 3 layers, the first dense.
    "deepseek_v3": lambda: _mla(
        transformers.DeepseekV3Config, q_lora_rank=24, n_group=4, topk_group=2, norm_topk_prob=True,
        routed_scaling_factor=2.5, first_k_dense_replace=1, **_MLA_MOE,
    ),
    "deepseek_v3-no_q_lora-yarn": lambda: _mla(
        transformers.DeepseekV3Config, q_lora_rank=None, n_group=1, topk_group=1, norm_topk_prob=False,
        routed_scaling_factor=2.5, rope_interleave=False, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        }, first_k_dense_replace=1, **_MLA_MOE,
    ),
    "deepseek_v2": lambda: _mla(transformers.DeepseekV2Config, q_lora_rank=None, topk_method="greedy",
                                routed_scaling_factor=1.5, n_shared_experts=2, first_k_dense_replace=1, **_MLA_MOE),
    "deepseek_v2-grouped": lambda: _mla(
        transformers.DeepseekV2Config, q_lora_rank=16, topk_method="group_limited_greedy", n_group=4, topk_group=2,
        first_k_dense_replace=1, **_MLA_MOE,
    ),
    "glm4_moe_lite": lambda: _mla(transformers.Glm4MoeLiteConfig, **_MLA_MOE),  # mlp_layer_types: dense first
    "axk1": lambda: _mla(transformers.AXK1Config, n_group=1, topk_group=1, first_k_dense_replace=1, **_MLA_MOE),
    "minicpm3": lambda: _mla(transformers.MiniCPM3Config, num_hidden_layers=2, dim_model_base=32),
    "youtu": lambda: _mla(transformers.YoutuConfig, num_hidden_layers=2),
    # 2 layers of 2 attention sublayers each (num_hidden_layers counts sublayers); 4 routed
    # and 2 zero-computation experts.
    "longcat_flash": lambda: _mla(
        transformers.LongcatFlashConfig, num_hidden_layers=4, head_dim=8, ffn_hidden_size=96, moe_topk=2,
        n_routed_experts=4, zero_expert_num=2, expert_ffn_hidden_size=32, routed_scaling_factor=2.0,
    ),
}
# Configs whose checkpoint is a multimodal model, not what AutoModelForCausalLM builds.
MULTIMODAL_CLASSES = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}


def _mla(cls: Any, **extra: Any) -> Any:
    """A decoder with multi-head latent attention: 3 layers (unless ``extra`` says), and a
    value head width (12) other than the key's (8 + 8)."""
    base: dict[str, Any] = dict(
        num_hidden_layers=3, hidden_size=64, intermediate_size=96, num_key_value_heads=4, kv_lora_rank=16,
        q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12,
    )
    return _decoder(cls, **{**base, **extra})


# The MoE of the MLA families: 8 routed experts, 2 per token (and the config's shared ones).
_MLA_MOE: dict[str, Any] = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)


# Configs of families refused up front (architectures.refusal): only their config.json
# is written, as the refusal comes before any weight is read.
REFUSED: dict[str, Callable[[], Any]] = {
    "deepseek_v32": lambda: _mla(
        transformers.DeepseekV32Config, num_hidden_layers=2, index_n_heads=2, index_head_dim=8, index_topk=4,
    ),
    # Value heads wider than key heads: tract_transformers_gdn_recurrent shares one width.
    "qwen3_next": lambda: _decoder(
        transformers.Qwen3NextConfig, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, **{**_GATED_DELTA_NET, "linear_value_head_dim": 16},
    ),
    # Bidirectional attention over the whole sequence: not a causal decoder.
    "gemma4_text": lambda: transformers.Gemma4TextConfig(**{**_GEMMA4_TEXT, "use_bidirectional_attention": "all"}),
    "recurrent_gemma": lambda: transformers.RecurrentGemmaConfig(
        num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=4, lru_width=32,
        attention_window_size=8, vocab_size=VOCAB,
    ),
    "minimax": lambda: _decoder(transformers.MiniMaxConfig, head_dim=8, num_local_experts=4),
    # Gemma 3n's text decoder (tract fails to load its export): AltUp (2 streams), LAuReL,
    # per-layer inputs, KV sharing of the last 2 layers, activation sparsity on the first.
    "gemma3n_text": lambda: _decoder(
        transformers.Gemma3nTextConfig, num_hidden_layers=4, head_dim=8, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, altup_num_inputs=2, laurel_rank=4,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0], intermediate_size=[64] * 4, final_logit_softcapping=30.0,
    ),
    "phimoe": lambda: _decoder(
        transformers.PhimoeConfig, num_local_experts=4, num_experts_per_tok=2, original_max_position_embeddings=16,
        rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
            "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 5.0, 8.0], "short_mscale": 1.0,
            "long_mscale": 1.2,
        },
    ),
}


def model_type_of(name: str) -> str:
    """The model_type a config name tests (``mistral-window`` tests ``mistral``)."""
    return name.split("-")[0]


def build(name: str, dtype: torch.dtype = torch.float32) -> Any:
    """The tiny model ``name`` with seeded random weights, in eval mode."""
    torch.manual_seed(0)
    config = CONFIGS[name]()
    if name in MULTIMODAL_CLASSES:
        return getattr(transformers, MULTIMODAL_CLASSES[name])(config).to(dtype).eval()
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def save(name: str, directory: Path, dtype: torch.dtype = torch.float32) -> Path:
    """``save_pretrained`` of the tiny model: a local checkpoint (config.json + safetensors)."""
    build(name, dtype).save_pretrained(directory)
    return directory
