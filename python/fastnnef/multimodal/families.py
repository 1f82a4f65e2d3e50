"""The table of multimodal families the exporter handles: ``model_type`` -> :class:`Family`
(each defined in its own module). A ``model_type`` outside it is refused with the list."""

from __future__ import annotations

from typing import Any

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.multimodal.family import Family
from fastnnef.multimodal.gemma3 import FAMILY as GEMMA3
from fastnnef.multimodal.gemma4 import FAMILY as GEMMA4
from fastnnef.multimodal.idefics3 import FAMILY as IDEFICS3
from fastnnef.multimodal.mistral3 import FAMILY as MISTRAL3
from fastnnef.multimodal.qwen2_5_vl import FAMILY as QWEN2_5_VL
from fastnnef.multimodal.qwen2_audio import FAMILY as QWEN2_AUDIO
from fastnnef.multimodal.qwen3_5 import FAMILY as QWEN3_5
from fastnnef.multimodal.qwen3_5 import MOE_FAMILY as QWEN3_5_MOE
from fastnnef.multimodal.qwen3_vl import FAMILY as QWEN3_VL
from fastnnef.multimodal.qwen3_vl_moe import FAMILY as QWEN3_VL_MOE
from fastnnef.multimodal.smolvlm import FAMILY as SMOLVLM
from fastnnef.multimodal.voxtral import FAMILY as VOXTRAL

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    QWEN2_5_VL, QWEN3_VL, QWEN3_VL_MOE, QWEN3_5, QWEN3_5_MOE, IDEFICS3, SMOLVLM, MISTRAL3, GEMMA3, QWEN2_AUDIO,
    VOXTRAL,
)}
FAMILIES[GEMMA4.model_type] = GEMMA4


def supported_list() -> str:
    return ", ".join(f"{t} ({f.models})" for t, f in sorted(FAMILIES.items()))


def families_markdown() -> str:
    """README.md's table of multimodal families, generated from ``FAMILIES``."""
    rows = ["| `model_type` | models | encoders |", "|---|---|---|"]
    rows += [f"| `{t}` | {f.models} | {', '.join(e.modality for e in f.encoders)} |"
             for t, f in sorted(FAMILIES.items())]
    return "\n".join(rows)


def family_of(raw_config: dict[str, Any]) -> Family:
    """The family of a checkpoint's ``config.json`` content; raises when it is not a
    handled multimodal family, or when it lacks the modality tower's config (transformers
    would build a default tower of random weights in its place)."""
    model_type = str(raw_config.get("model_type") or "")
    family = FAMILIES.get(model_type)
    if family is None:
        raise T2NErrorNotImplemented(
            f"model_type {model_type!r} is not a multimodal family fastnnef-multimodal exports; supported: "
            f"{supported_list()}. A text-only model is exported by fastnnef-llm"
        )
    if not raw_config.get(family.tower_attr):
        raise T2NErrorInvalidArgument(
            f"this {model_type} checkpoint's config.json has no {family.tower_attr}: it holds no "
            f"{'/'.join(e.modality for e in family.encoders)} tower to export (a text-only checkpoint: use "
            "fastnnef-llm)"
        )
    return family
