"""Which Hugging Face causal LMs the exporter supports, and what it reads from their config.

Every architecture in ``SUPPORTED`` is exported by the same wrapper (``wrapper.py``); the
table only records what differs: whether routing to experts must be made traceable. Each
entry is tested from a tiny random config (tests/llm/test_architectures.py): greedy
generation in tract equals Hugging Face's ``generate``. An architecture is added here
once it passes that test.

``KVLayout`` is read from the config: the cache shape ``[1, n_kv_heads, P, head_dim]``
per layer, and each layer's attention window (transformers' own per-layer table, so
gemma2's alternating sliding/full layers and windowed Mistral are honoured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented

# transformers' experts implementation that traces: every token's top-k experts are
# gathered and applied with batched matmuls (the default loops over the experts a
# batch hits, which tracing would freeze to the example's routing).
TRACEABLE_EXPERTS = "batched_mm"

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


@dataclass(frozen=True)
class Architecture:
    """A supported ``config.model_type``."""

    model_type: str
    family: str  # the model families it covers, for docs and error messages
    moe: bool = False  # experts routed per token: exported with TRACEABLE_EXPERTS


SUPPORTED: dict[str, Architecture] = {
    a.model_type: a
    for a in (
        Architecture("llama", "Llama 2/3, SmolLM, TinyLlama"),
        Architecture("mistral", "Mistral 7B (with or without a sliding window)"),
        Architecture("qwen2", "Qwen2, Qwen2.5"),
        Architecture("qwen3", "Qwen3"),
        Architecture("phi3", "Phi-3, Phi-3.5, Phi-4-mini"),
        Architecture("phi", "Phi-1, Phi-1.5, Phi-2"),
        Architecture("gemma", "Gemma"),
        Architecture("gemma2", "Gemma 2 (alternating sliding-window and full layers, soft-capping)"),
        Architecture("gpt2", "GPT-2, DistilGPT-2"),
        Architecture("gpt_neox", "GPT-NeoX, Pythia"),
        Architecture("mixtral", "Mixtral (mixture of experts)", moe=True),
        Architecture("qwen2_moe", "Qwen1.5-MoE, Qwen2-MoE (mixture of experts, shared expert)", moe=True),
    )
}


def supported_list() -> str:
    return ", ".join(sorted(SUPPORTED))


def architecture_of(config: Any) -> Architecture:
    """The entry for ``config.model_type``; an unsupported type lists the supported ones."""
    model_type = getattr(config, "model_type", None)
    arch = SUPPORTED.get(model_type or "")
    if arch is None:
        raise T2NErrorNotImplemented(
            f"model_type {model_type!r} is not supported by the LLM exporter; supported: "
            f"{supported_list()}. Export another architecture with fastnnef.export_model_to_nnef "
            "and a wrapper of your own"
        )
    return arch


@dataclass(frozen=True)
class KVLayout:
    """What the artefact's cache inputs look like, and which positions each layer sees."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    layer_types: tuple[str, ...]  # FULL_ATTENTION or SLIDING_ATTENTION, per layer
    windows: dict[str, Optional[int]]  # layer type -> attention window (None: all the past)
    max_positions: int  # S+P must stay below (tract_assert S+P < max_positions)

    @property
    def mixed(self) -> bool:
        """Several layer types: the model takes one mask per layer type (a dict)."""
        return len(self.windows) > 1


def kv_layout(config: Any) -> KVLayout:
    """Read the cache layout from the (decoder) config."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True)
    n_heads = _int_attr(text, "num_attention_heads")
    n_kv = getattr(text, "num_key_value_heads", None) or n_heads
    head_dim = getattr(text, "head_dim", None) or _int_attr(text, "hidden_size") // n_heads
    layer_types, kwargs = get_layer_types_and_kwargs(text)
    windows: dict[str, Optional[int]] = {}
    for layer, (kind, kw) in enumerate(zip(layer_types, kwargs)):
        if kind not in (FULL_ATTENTION, SLIDING_ATTENTION):
            raise T2NErrorNotImplemented(
                f"layer {layer} of this {config.model_type} model has attention type {kind!r}; the "
                f"LLM exporter handles {FULL_ATTENTION!r} and {SLIDING_ATTENTION!r} layers"
            )
        window = kw.get("sliding_window") if kind == SLIDING_ATTENTION else None
        if windows.setdefault(kind, window) != window:
            raise T2NErrorNotImplemented(
                f"layers of type {kind!r} have different windows ({windows[kind]} and {window}): "
                "one mask per layer type cannot express that"
            )
    max_positions = _int_attr(text, "max_position_embeddings")
    return KVLayout(
        n_layers=len(layer_types), n_kv_heads=int(n_kv), head_dim=int(head_dim),
        layer_types=tuple(layer_types), windows=windows, max_positions=max_positions,
    )


def _int_attr(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise T2NErrorInvalidArgument(
            f"config.json of this {getattr(config, 'model_type', '?')} model has {name}={value!r}; "
            "a positive integer is needed"
        )
    return value
