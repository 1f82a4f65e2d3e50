"""Which Hugging Face causal LMs the exporter attempts, which are tested, and what it
reads from their config.

There is no whitelist: any ``model_type`` that ``AutoModelForCausalLM`` builds is
exported by the same generic wrapper (``wrapper.py``), and verification decides (an f32
export must generate exactly Hugging Face's greedy tokens in tract, or it fails).

- ``TESTED`` is the one table of families known to work: each is exported in
  tests/llm/test_architectures.py from a tiny random config (tests/llm/tiny.py) and its
  16 greedy tokens in tract equal Hugging Face's ``generate``; README.md's table is
  generated from it (``families_markdown``), and a test keeps the two equal. A family
  outside it is attempted; with ``no_verify`` it is exported with a warning that it is
  unverified.
- ``refusal`` names what is known not to work, before anything is loaded: layers the
  wrapper does not handle (``REFUSED_LAYER_TYPES``: the indexer keys of
  ``indexed_attention``; gated delta nets whose heads tract's op cannot run), multi-head
  latent attention from a checkpoint's own code (its cache layout is unknown), configs of
  a family known to export wrongly (``REFUSED_CONFIGS``, RecurrentGemma's RG-LRU layers
  among them); ``architecture_of`` also names a config field the cache layout needs and
  lacks. ``linear_attention`` layers are gated delta nets (llm/linear_attention.py) when
  the config names their fields, else state-space layers, as ``conv`` and ``hybrid`` ones
  are (llm/state_space.py, which refuses a mixer module it does not know).

``KVLayout`` is read from the config: the cache shapes ``[1, n_kv_heads, P, head_dim]``
(keys) and ``[1, n_kv_heads, P, value_head_dim]`` (values) of each layer (its own, where
``per_layer_config`` makes them differ: Gemma 4's global layers), each layer's attention
window (transformers' own per-layer table, so gemma2's alternating sliding/full layers and
windowed Mistral are honoured), and the layers that keep no cache because they reuse
another layer's keys and values (KV sharing: Gemma 4's last layers). Multi-head latent attention
(``kv_lora_rank``: DeepSeek-V2/V3 and the families built on its attention) caches
something else than per-head keys and values: see ``kv_layout``. Its ``layer_types`` also
name the ``linear_attention`` layers, which have no key/value cache and no window (their
layout: llm/linear_attention.py ``linear_layout``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.llm.linear_attention import LINEAR_ATTENTION, gdn_config_refusal, is_gated_delta_net_config
from fastnnef.llm.transformers_api import layer_types_and_kwargs

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
# Llama 4's local layers: a query sees the keys of its own chunk of attention_chunk_size
# positions (transformers gives the chunk size as the layer's sliding_window).
CHUNKED_ATTENTION = "chunked_attention"
ATTENTION_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION, CHUNKED_ATTENTION)

# Layer types (transformers' config.layer_types) whose state is not a key/value cache:
# their recurrent or convolution state would need extra cache inputs the wrapper lacks.
# (linear_attention layers are gated delta nets when the config says so: see refusal.)
# (conv, hybrid and non-gated-delta-net linear_attention layers are state-space layers:
# llm/state_space.py lays out their states, and refuses a module it does not know.)
REFUSED_LAYER_TYPES = {
    "mamba": "Mamba layers keep a recurrent state, not a key/value cache",
    "indexed_attention": "sparse attention layers (DeepSeek sparse attention's lightning indexer) keep indexer keys "
                         "besides the key/value cache",
}

# Multi-head latent attention: the config's compressed key/value rank, and the width of
# the rotary key shared by all heads.
MLA_FIELD = "kv_lora_rank"
MLA_ROPE_FIELD = "qk_rope_head_dim"


@dataclass(frozen=True)
class Architecture:
    """A ``config.model_type`` and what is known of it: ``tested`` families are in
    ``TESTED`` (the README's table); others are attempted and left to verification."""

    model_type: str
    family: str  # the model families it covers, for docs and messages
    exercised: str = ""  # what its tiny test exercises beyond a plain decoder
    tested: bool = True
    # A config field F: Hugging Face's generation drops the cache and re-processes the whole
    # sequence once, when it reaches F + 1 tokens (phi3's long-rope switch from short to long
    # factors, which re-rotates the past keys). Runtimes must do the same with the artefact.
    recompute_past_field: str = ""

    def recompute_length(self, config: Any) -> int | None:
        """The sequence length at which generation re-processes everything with an empty
        cache (see ``recompute_past_field``), or None."""
        value = getattr(config, self.recompute_past_field, None) if self.recompute_past_field else None
        return int(value) + 1 if isinstance(value, int) else None


TESTED: dict[str, Architecture] = {
    a.model_type: a
    for a in (
        Architecture("llama", "Llama 2/3, SmolLM, TinyLlama"),
        Architecture("mistral", "Mistral 7B", "with and without a sliding window"),
        Architecture("qwen2", "Qwen2, Qwen2.5", "q/k/v biases"),
        Architecture("qwen3", "Qwen3", "q/k RMSNorm"),
        Architecture("phi3", "Phi-3, Phi-3.5, Phi-4-mini", "long-rope (short and long factors)",
                     recompute_past_field="original_max_position_embeddings"),
        Architecture("phimoe", "Phi-3.5-MoE", "long-rope with scales, mixture of experts",
                     recompute_past_field="original_max_position_embeddings"),
        Architecture("phi", "Phi-1, Phi-1.5, Phi-2", "partial rotary, parallel block"),
        Architecture("gemma", "Gemma"),
        Architecture("gemma2", "Gemma 2", "alternating sliding/global layers, soft-capping"),
        Architecture("gemma3_text", "Gemma 3 1B, 270M (text-only checkpoints)", "sliding/global layers"),
        Architecture("gemma3", "Gemma 3 4B and larger (multimodal checkpoints)", "the text decoder alone"),
        Architecture("gemma4_text", "Gemma 4 (text-only checkpoints)",
                     "sliding/global layers of different head widths and counts, keys as values, KV sharing across "
                     "the last layers, per-layer input embeddings, logit soft-capping; a mixture of experts beside "
                     "the MLP (routed in its dense form)"),
        Architecture("gemma4", "Gemma 4 (multimodal checkpoints)",
                     "the text decoder alone: KV sharing, per-layer input embeddings, global layers of other widths"),
        Architecture("gpt2", "GPT-2, DistilGPT-2", "learned positions, Conv1D"),
        Architecture("gpt_neox", "GPT-NeoX, Pythia", "partial rotary"),
        Architecture("gptj", "GPT-J", "interleaved partial rotary, parallel block"),
        Architecture("codegen", "CodeGen", "interleaved partial rotary, fused qkv"),
        Architecture("gpt_bigcode", "StarCoder, SantaCoder (GPTBigCode)", "multi-query attention"),
        Architecture("opt", "OPT", "learned positions with offset"),
        Architecture("falcon", "Falcon", "new decoder architecture, parallel block"),
        Architecture("mixtral", "Mixtral", "mixture of experts"),
        Architecture("qwen2_moe", "Qwen1.5-MoE, Qwen2-MoE", "mixture of experts, shared expert"),
        Architecture("qwen3_moe", "Qwen3-MoE", "mixture of experts"),
        Architecture("gpt_oss", "GPT-OSS", "attention sinks, sliding window, clamped SwiGLU experts, YaRN"),
        Architecture("olmo", "OLMo", "clipped q/k/v"),
        Architecture("olmo2", "OLMo 2", "post-norms, q/k RMSNorm"),
        Architecture("olmo3", "OLMo 3", "sliding/global layers"),
        Architecture("olmoe", "OLMoE", "mixture of experts"),
        Architecture("granite", "Granite 3", "embedding, attention, residual and logit multipliers"),
        Architecture("granitemoe", "Granite 3 MoE", "multipliers, mixture of experts"),
        Architecture("smollm3", "SmolLM3", "layers without rotary embedding"),
        Architecture("glm", "GLM-4 (glm)", "partial interleaved rotary"),
        Architecture("glm4", "GLM-4-0414 (glm4)", "post-norms"),
        Architecture("glm4_moe", "GLM-4.5 (glm4_moe)", "mixture of experts, dense first layer"),
        Architecture("stablelm", "StableLM", "q/k LayerNorm per head, partial rotary"),
        Architecture("starcoder2", "StarCoder2", "sliding window, biases"),
        Architecture("cohere", "Command-R (cohere)", "parallel block, logit scale"),
        Architecture("cohere2", "Command-R7B (cohere2)", "sliding/global layers, rotary on sliding layers only"),
        Architecture("helium", "Helium"),
        Architecture("exaone4", "EXAONE 4", "sliding/global layers, q/k RMSNorm"),
        Architecture("ernie4_5", "ERNIE 4.5"),
        Architecture("ernie4_5_moe", "ERNIE 4.5 MoE", "mixture of experts"),
        Architecture("seed_oss", "Seed-OSS"),
        Architecture("apertus", "Apertus", "xIELU activation, q/k RMSNorm"),
        Architecture("arcee", "Arcee (AFM)", "ReLU² MLP"),
        Architecture("hunyuan_v1_dense", "Hunyuan (dense)", "q/k RMSNorm"),
        Architecture("nemotron", "Nemotron", "partial rotary, LayerNorm1P"),
        Architecture("persimmon", "Persimmon", "q/k LayerNorm, partial rotary"),
        Architecture("diffllama", "DiffLlama", "differential attention"),
        Architecture("qwen3_next", "Qwen3-Next",
                     "gated delta net layers (grouped) in the published order (three linear, then full attention) "
                     "and every other layer, mixture of experts, shared expert"),
        Architecture("qwen3_5", "Qwen3.5 (multimodal checkpoints)",
                     "the text decoder alone: gated delta net layers (three linear, then full attention), interleaved "
                     "multimodal rotary"),
        Architecture("qwen3_5_moe", "Qwen3.5-MoE (multimodal checkpoints)",
                     "the text decoder alone: gated delta net layers (three linear, then full attention), mixture of "
                     "experts"),
        Architecture("qwen3_5_text", "Qwen3.5 (text-only checkpoints)",
                     "gated delta net layers in the published order (three linear, then full attention) and every "
                     "other layer"),
        Architecture("qwen3_5_moe_text", "Qwen3.5-MoE (text-only checkpoints)",
                     "gated delta net layers (three linear, then full attention), mixture of experts"),
        # State-space and short-convolution layers: their states as cache IO (llm/state_space.py).
        Architecture("lfm2", "LFM2 (Liquid)",
                     "gated short convolutions (convolution states) and attention layers; f16, Q4_0"),
        Architecture("lfm2_moe", "LFM2-MoE (Liquid)",
                     "gated short convolutions, mixture of experts after a dense layer"),
        Architecture("mamba", "Mamba",
                     "selective scan (tract_core_scan), convolution and recurrent states, no attention; f16, Q4_0"),
        Architecture("falcon_mamba", "Falcon-Mamba", "Mamba with RMS norms on dt, B and C"),
        Architecture("mamba2", "Mamba2",
                     "multi-head selective scan, B and C in groups, gated RMS norm, no attention; f16, Q4_0"),
        Architecture("bamba", "Bamba", "Mamba2 and attention layers; Q4_0"),
        Architecture("granitemoehybrid", "Granite 4.0-H (granitemoehybrid)",
                     "Mamba2 and attention layers, mixture of experts, shared expert"),
        Architecture("nemotron_h", "Nemotron-H", "Mamba2, attention and MoE-only layers"),
        Architecture("falcon_h1", "Falcon-H1", "attention and Mamba2 side by side in every layer, µP multipliers; f16"),
        Architecture("zamba2", "Zamba2", "Mamba2 layers, a shared attention block before a hybrid layer"),
        Architecture("jamba", "Jamba",
                     "Mamba (with dt, B, C norms) and attention layers, mixture of experts; f16, Q4_0"),
        Architecture("bloom", "BLOOM", "ALiBi biases, no maximum position (no S+P bound)"),
        Architecture("mpt", "MPT", "ALiBi biases (a table of max_seq_len), fused qkv"),
        Architecture("dbrx", "DBRX", "mixture of experts (row-stacked expert matrices, p-norm renormalized routing), "
                                     "clipped qkv"),
        Architecture("jetmoe", "JetMoE", "mixtures of experts in the MLP and in the attention's query and output "
                                         "projections"),
        Architecture("llama4_text", "Llama 4 (text-only checkpoints)",
                     "chunked attention, layers without rotary, complex rotary, sigmoid-routed experts with a shared "
                     "expert"),
        # Multi-head latent attention: the cache holds the latent and the rotary key (kv_layout).
        Architecture("deepseek_v2", "DeepSeek-V2, DeepSeek-V2-Lite, DeepSeek-Coder-V2",
                     "multi-head latent attention, complex rotary, with and without q LoRA, shared experts after a "
                     "dense layer, greedy (tract_moe_ffn) and group-limited routing"),
        Architecture("deepseek_v3", "DeepSeek-V3, DeepSeek-R1",
                     "multi-head latent attention, with and without q LoRA, interleaved and YaRN rotary, sigmoid "
                     "routing (tract_moe_ffn) and renormalized group-limited routing, dense first layer"),
        Architecture("glm4_moe_lite", "GLM-4 MoE Lite (glm4_moe_lite)",
                     "multi-head latent attention, mixture of experts"),
        Architecture("axk1", "A.X K1 (SK Telecom)", "multi-head latent attention, mixture of experts"),
        Architecture("minicpm3", "MiniCPM3", "multi-head latent attention, embedding and residual scales"),
        Architecture("youtu", "Youtu-LLM", "multi-head latent attention"),
        Architecture("longcat_flash", "LongCat-Flash",
                     "multi-head latent attention (two per layer), shortcut MoE with zero-computation experts"),
    )
}


def tested_list() -> str:
    return ", ".join(sorted(TESTED))


def families_markdown() -> str:
    """README.md's table of tested families, generated from ``TESTED``."""
    rows = ["| `model_type` | models | what its test exercises |", "|---|---|---|"]
    rows += [f"| `{a.model_type}` | {a.family} | {a.exercised or 'a plain decoder'} |"
             for a in sorted(TESTED.values(), key=lambda a: a.model_type)]
    return "\n".join(rows)


def architecture_of(config: Any) -> Architecture:
    """The table entry for ``config.model_type`` (an untested one when absent); raises
    ``T2NErrorNotImplemented`` with the reason for a family known not to work, and
    ``T2NErrorInvalidArgument`` naming a config field the cache layout needs and lacks."""
    model_type = str(getattr(config, "model_type", None) or "")
    if not model_type:
        raise T2NErrorInvalidArgument("config.json has no model_type: it is not a Hugging Face model config")
    reason = refusal(config)
    if reason is not None:
        raise T2NErrorNotImplemented(
            f"model_type {model_type!r} cannot be exported by the LLM exporter: {reason}. Tested families: "
            f"{tested_list()}"
        )
    kv_layout(config)  # every field the cache layout needs, named when missing
    return TESTED.get(model_type) or Architecture(model_type, model_type, tested=False)


def _phimoe_mscales(config: Any) -> str | None:
    rope = getattr(config, "rope_parameters", None) or {}
    short, long = rope.get("short_mscale"), rope.get("long_mscale")
    if short != long:
        return (f"its rotary embedding picks short_mscale={short} or long_mscale={long} with a Python branch on the "
                "sequence length, which a traced graph freezes to one of them")
    return None


def _bidirectional(config: Any) -> str | None:
    if getattr(config, "use_bidirectional_attention", None) == "all":
        return ("use_bidirectional_attention='all' makes every token see the ones after it: the model is not a causal "
                "decoder, and the exported masks (and the KV cache) are causal")
    return None


def _recurrent_gemma(config: Any) -> str | None:
    return ("its recurrent layers (RG-LRU: a gated linear recurrence whose input scale resets at position 0) are not "
            "among the state-space layers the exporter lays out (Mamba, Mamba2, short convolutions); tract could run "
            "them as a tract_core_scan, but no forward of the exporter computes them yet")


def _altup_gate(config: Any) -> str | None:
    return ("tract cannot load the exported graph: its optimizer fails on the matrix product of the per-layer input "
            "gate after AltUp's stream selection (EinSum declutter: input facts of the wrong rank)")


def _lightning_attention(config: Any) -> str | None:
    if LINEAR_ATTENTION in (getattr(config, "layer_types", None) or ()):
        return ("its linear_attention layers are lightning attention (a key-value state per head, decayed per block "
                "of tokens), for which tract has no op and whose state the exporter does not lay out")
    return None


# Families of which some configs are known to export wrongly: model_type -> the reason
# for a given config, or None.
REFUSED_CONFIGS: dict[str, Callable[[Any], str | None]] = {
    "phimoe": _phimoe_mscales, "gemma4_text": _bidirectional, "gemma4": _bidirectional,
    "recurrent_gemma": _recurrent_gemma, "minimax": _lightning_attention, "gemma3n_text": _altup_gate,
    "gemma3n": _altup_gate,
}


def refusal(config: Any) -> str | None:
    """Why the generic wrapper cannot export this config, or None when it is attempted."""
    text = config.get_text_config(decoder=True)
    specific = REFUSED_CONFIGS.get(getattr(config, "model_type", ""))
    if specific is not None and specific(text) is not None:
        return specific(text)
    # Remote code is imported as transformers_modules.<checkpoint>..., not transformers.models...
    if getattr(text, MLA_FIELD, None) and not type(text).__module__.startswith("transformers."):
        return (f"its multi-head latent attention ({MLA_FIELD}) is the checkpoint's own code (trust_remote_code), "
                "whose cache the exporter does not know: it lays out the cache of transformers' own "
                "implementations (remove auto_map from config.json to use them, where transformers has this "
                "model_type)")
    layer_types, _ = cache_layer_types(text)
    for layer, kind in enumerate(layer_types):
        if kind in REFUSED_LAYER_TYPES:
            return f"layer {layer} is a {kind!r} layer: {REFUSED_LAYER_TYPES[kind]}"
    if LINEAR_ATTENTION in layer_types and is_gated_delta_net_config(text):
        return gdn_config_refusal(text)
    return None


@dataclass(frozen=True)
class KVLayout:
    """What the artefact's cache inputs look like, and which positions each layer sees.

    Shapes are per layer: a heterogeneous config (transformers' ``per_layer_config``,
    Gemma 4's wider global layers) gives each layer its own head count and widths. A
    layer in ``shared`` keeps no cache: it attends to the keys and values another layer
    of its type computed in the same forward (Gemma 4's ``num_kv_shared_layers``), so the
    artefact has no cache input or output for it."""

    n_layers: int
    kv_heads: tuple[int, ...]  # per layer: cached key/value heads
    key_dims: tuple[int, ...]  # per layer: width of each cached key
    value_dims: tuple[int, ...]  # per layer: width of each cached value (multi-head latent attention: not the key's)
    layer_types: tuple[str, ...]  # FULL_ATTENTION, SLIDING_ATTENTION or LINEAR_ATTENTION, per layer
    windows: dict[str, int | None]  # layer type -> attention window or chunk size (None: all the past)
    max_positions: int | None  # S+P must stay below (tract_assert S+P < max_positions); None: no bound
    shared: tuple[int, ...] = ()  # layers without a cache of their own (KV sharing)

    @property
    def mixed(self) -> bool:
        """Several layer types: the model takes one mask per layer type (a dict)."""
        return len(set(self.layer_types)) > 1

    def key_value_shapes(self, layer: int, past: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Layer ``layer``'s cached keys and values for ``past`` positions."""
        heads = self.kv_heads[layer]
        return (1, heads, past, self.key_dims[layer]), (1, heads, past, self.value_dims[layer])

    def describe(self) -> str:
        """The layer types, counted: ``2 full_attention`` or ``1 sliding_attention (window 4), 1 ...``."""
        parts = []
        for kind, window in self.windows.items():
            count = self.layer_types.count(kind)
            parts.append(f"{count} {kind}" + (f" (window {window})" if window is not None else ""))
        if LINEAR_ATTENTION in self.layer_types:
            parts.append(f"{self.layer_types.count(LINEAR_ATTENTION)} {LINEAR_ATTENTION}")
        if self.shared:
            parts.append(f"{len(self.shared)} of them sharing another layer's keys and values")
        return ", ".join(parts)


# transformers' cache layer type of a layer that keeps no cache (a KV-sharing layer, or one
# without attention): its attention type is then read from config.layer_types.
NO_CACHE = "dummy"
# Configured layer types of layers without a token mixer (Nemotron-H's MoE and MLP layers).
NO_ATTENTION = ("moe", "mlp")
# Cache layer types of layers that keep states and no keys and values (gated delta nets,
# Mamba, LFM2's short convolutions), and of layers that keep both (attention beside Mamba).
STATE_ONLY = (LINEAR_ATTENTION, "conv")
HYBRID = "hybrid"


def cache_layer_types(text_config: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Each layer's cache type and the keywords its cache layer is built with, as transformers
    decides them. Releases before 5.19 return one keyword dict for all layers (detected by
    its type, not by version): it is repeated per layer."""
    layer_types, kwargs = layer_types_and_kwargs(text_config)
    if isinstance(kwargs, dict):
        kwargs = [kwargs] * len(layer_types)
    return list(layer_types), list(kwargs)


def layer_configs(text_config: Any, n_layers: int) -> list[Any]:
    """Each layer's config: transformers' ``per_layer_config`` (the config itself for a
    homogeneous model), or the config repeated where a release predates it."""
    per_layer = getattr(text_config, "per_layer_config", None)
    return [per_layer[i] for i in range(n_layers)] if per_layer is not None else [text_config] * n_layers


def kv_layout(config: Any) -> KVLayout:
    """Read the cache layout from the (decoder) config.

    Multi-head latent attention (a config with ``kv_lora_rank``) caches, in transformers 5,
    the compressed latents before their expansion into per-head keys and values: in the
    key slot the normalized key/value latent ``[1, 1, P, kv_lora_rank]``, in the value slot
    the rotated key shared by all heads ``[1, 1, P, qk_rope_head_dim]`` (``cache.update``
    in ``DeepseekV3Attention.forward``); every step expands the whole past again with
    ``kv_b_proj``."""
    text = config.get_text_config(decoder=True)
    layer_types, kwargs = cache_layer_types(text)
    configured_types = getattr(text, "layer_types", None) or layer_types
    configs = layer_configs(text, len(layer_types))
    kv_heads: list[int] = []
    key_dims: list[int] = []
    value_dims: list[int] = []
    for layer_config, kind in zip(configs, layer_types):
        if kind in STATE_ONLY or (kind == NO_CACHE and configured_types[len(kv_heads)] in NO_ATTENTION):
            kv_heads.append(0)  # no keys and values: a state-space layer, or one without a token mixer
            key_dims.append(0)
            value_dims.append(0)
            continue
        n_heads = _int_attr(layer_config, "num_attention_heads")
        if getattr(layer_config, MLA_FIELD, None):
            n_kv, head_dim, value_head_dim = 1, _int_attr(layer_config, MLA_FIELD), _int_attr(layer_config,
                                                                                              MLA_ROPE_FIELD)
        else:
            n_kv = getattr(layer_config, "num_key_value_heads", None) or n_heads
            head_dim = getattr(layer_config, "head_dim", None) or _int_attr(layer_config, "hidden_size") // n_heads
            value_head_dim = head_dim
        kv_heads.append(int(n_kv))
        key_dims.append(int(head_dim))
        value_dims.append(int(value_head_dim))
    windows: dict[str, int | None] = {}
    shared: list[int] = []
    for layer, (kind, kw) in enumerate(zip(layer_types, kwargs)):
        if kind == NO_CACHE:
            shared.append(layer)
            kind = layer_types[layer] = configured_types[layer]
            kw = {"sliding_window": getattr(configs[layer], "sliding_window", None)}
        if kind in STATE_ONLY or kind in NO_ATTENTION:
            continue  # no key/value cache: states laid out by linear_attention.py or state_space.py, or none
        if kind == HYBRID:
            kind = FULL_ATTENTION  # attention over all the past, beside a state-space mixer (its states)
        if kind not in ATTENTION_TYPES:
            raise T2NErrorNotImplemented(
                f"layer {layer} of this {config.model_type} model has attention type {kind!r}; the "
                f"LLM exporter handles {', '.join(map(repr, ATTENTION_TYPES))} layers"
            )
        window = kw.get("sliding_window") if kind != FULL_ATTENTION else None
        if windows.setdefault(kind, window) != window:
            raise T2NErrorNotImplemented(
                f"layers of type {kind!r} have different windows ({windows[kind]} and {window}): "
                "one mask per layer type cannot express that"
            )
    return KVLayout(
        n_layers=len(layer_types), kv_heads=tuple(kv_heads), key_dims=tuple(key_dims), value_dims=tuple(value_dims),
        layer_types=tuple(layer_types), windows=windows, max_positions=max_positions(text), shared=tuple(shared),
    )


# Config fields bounding the positions a model handles: most families' own, then MPT's
# (the length of its ALiBi table).
MAX_POSITION_FIELDS = ("max_position_embeddings", "max_seq_len")


def max_positions(text_config: Any) -> int | None:
    """The positions the model handles (S+P stays below it), or None for a config that
    bounds none: BLOOM's ALiBi biases and cache grow with the sequence, and its configs
    have no such field."""
    for name in MAX_POSITION_FIELDS:
        if getattr(text_config, name, None) is not None:
            return _int_attr(text_config, name)
    return None


def _int_attr(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if value is None:
        raise T2NErrorInvalidArgument(
            f"config.json of this {getattr(config, 'model_type', '?')} model has no {name}, which the LLM "
            "exporter needs to lay out the KV cache: add it to config.json"
        )
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise T2NErrorInvalidArgument(
            f"config.json of this {getattr(config, 'model_type', '?')} model has {name}={value!r}; "
            "a positive integer is needed"
        )
    return value
