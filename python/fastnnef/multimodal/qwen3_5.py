"""Qwen3.5 (``qwen3_5``) and Qwen3.5-MoE (``qwen3_5_moe``) with their vision tower: Qwen3-VL's
tower without the DeepStack streams, and a hybrid decoder whose gated-delta-net
(``linear_attention``) layers carry a convolution and a recurrent state instead of keys
and values (``llm/linear_attention.py``).

Encoder (``vision/model.nnef.tgz``): Qwen3-VL's (``qwen3_vl.py``): ``pixel_values [MH, MW,
m, m, patch_dim]`` (ONE image's patches from the processor, reshaped) to
``out_image_embeddings [MH*MW, hidden]``, exactly Hugging Face's ``get_image_features``.

Decoder: the LLM exporter's cache IO (``in_cache_conv_{i}``/``in_cache_recurrent_{i}`` for a
linear-attention layer, keys and values for the others), then Qwen2.5-VL's inputs and
outputs (``qwen2_5_vl.py``: embeddings, grids, ``in_rope_deltas``; mrope positions computed
in the graph), with Qwen3-VL's video spacing (one grid row per frame, as Hugging Face
splits them). A linear-attention layer's state depends on every token before it, so, as
the cache, it must be fed back after each chunk.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastnnef.multimodal.family import EncoderSpec, Family
from fastnnef.multimodal.qwen2_5_vl import FAMILY as QWEN2_5_VL
from fastnnef.multimodal.qwen2_5_vl import Qwen25VLDecoderInputs
from fastnnef.multimodal.qwen3_vl import FAMILY as QWEN3_VL

_QWEN3_VL_ENCODER: EncoderSpec = QWEN3_VL.encoders[0]


def _decoder_inputs(model: Any) -> Qwen25VLDecoderInputs:
    # Video frames one temporal step apart: Hugging Face gives each frame its own grid row.
    return Qwen25VLDecoderInputs(model.config, video_interval=1)


FAMILY = Family(
    model_type="qwen3_5",
    models="Qwen3.5 (vision)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    # Qwen3-VL's tower, traced as it is (no DeepStack streams); Hugging Face's embeddings
    # are Qwen2.5-VL's get_image_features output.
    encoders=(replace(_QWEN3_VL_ENCODER, reference=QWEN2_5_VL.encoders[0].reference,
                      extra_output_names=lambda config: [], injection_layers=lambda config: ()),),
    decoder_inputs=_decoder_inputs,
    decoder_modules=("model.language_model", "lm_head"),
    sample=QWEN2_5_VL.sample,
)

MOE_FAMILY = replace(FAMILY, model_type="qwen3_5_moe", models="Qwen3.5-MoE (vision)")
