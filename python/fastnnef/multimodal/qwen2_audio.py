"""Qwen2-Audio: a Whisper-style audio tower on fixed windows, a linear projector, a Qwen2
decoder with 1-D positions.

Encoder (``audio/model.nnef.tgz``): ``input_features [1, mel_bins, 2 * max_source_positions]``
(ONE clip's log-mel window from the feature extractor, padded as it pads it) and
``feature_attention_mask [1, 2 * max_source_positions]`` (its real frames) to
``out_audio_embeddings [max_source_positions / 2, hidden]``: the tower attends to the real
frames only, as Hugging Face builds its mask from ``feature_attention_mask``; every row is
emitted (the input size is fixed), and the decoder takes the first N of each clip, N
being the clip's audio tokens in the prompt ((L - 1) // 2 + 1 - 2) // 2 + 1 for L real
frames). Hugging Face computes the same rows and keeps the same first N.

Decoder: ``in_audio_embeddings [AUD, hidden]`` after the cache (the kept rows of the
prompt's clips, concatenated), spliced at the ``<|AUDIO|>`` tokens, passed through as
``out_audio_embeddings``. Positions are the LLM exporter's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.llm.transformers_api import bidirectional_mask
from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import SAMPLING_RATE, sample_audio
from fastnnef.multimodal.splice import SplicedEmbeddings


class Qwen2AudioEncoder(nn.Module):
    """Hugging Face's audio tower (with its padding mask) and projector, on one clip."""

    def __init__(self, tower: Any, projector: Any):
        super().__init__()
        self.tower = tower
        self.projector = projector

    def forward(self, input_features: torch.Tensor, feature_attention_mask: torch.Tensor) -> torch.Tensor:
        # The frames after the stride-2 convolution that hold audio, as Hugging Face counts them.
        real = (feature_attention_mask.sum(-1) - 1) // 2 + 1  # [1]
        positions = input_features.shape[-1] // 2
        visible = torch.arange(positions)[None, :] < real[:, None]  # [1, positions] keys
        dtype = self.projector.linear.weight.dtype
        mask = torch.where(visible, torch.zeros((), dtype=dtype), torch.full((), torch.finfo(dtype).min, dtype=dtype))
        hidden = self.tower(input_features, attention_mask=mask[:, None, None, :]).last_hidden_state
        return self.projector(hidden)[0]


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return item["input_features"], item["feature_attention_mask"]


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every row Hugging Face's forward computes for the clip (its own mask construction)."""
    tower = model.model.audio_tower
    lengths, _ = tower._get_feat_extract_output_lengths(item["feature_attention_mask"].sum(-1))
    positions = item["input_features"].shape[-1] // 2
    mask_2d = (torch.arange(positions)[None, :] < lengths[:, None]).long()
    dummy = torch.zeros((1, positions, 1), dtype=model.dtype)
    mask = bidirectional_mask(tower.config, dummy, mask_2d)
    with torch.no_grad():
        hidden = tower(item["input_features"], attention_mask=mask).last_hidden_state
        return [model.model.multi_modal_projector(hidden)[0]]


def _rows(item: dict[str, torch.Tensor]) -> int:
    frames = int(item["feature_attention_mask"].sum())
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def _input_contract(config: Any) -> dict[str, Any]:
    frames = 2 * int(config.audio_config.max_source_positions)
    return {
        "name": "input_features",
        "layout": [1, int(config.audio_config.num_mel_bins), frames],
        "host_prep": ("Feed ONE clip's input_features and feature_attention_mask ([1, frames]) as the feature "
                      "extractor pads them; keep the first N rows of out_audio_embeddings, N = "
                      "((L - 1) // 2 + 1 - 2) // 2 + 1 for L = feature_attention_mask.sum() (the clip's audio "
                      "tokens in the prompt)"),
    }


def _sample(processor: Any) -> Sample:
    clip = f"{processor.audio_bos_token}{processor.audio_token}{processor.audio_eos_token}"
    text = f"describe this sound {clip} and this one {clip} what do you hear"
    clips = sample_audio(processor.feature_extractor.sampling_rate or SAMPLING_RATE)
    inputs = dict(processor(text=[text], audio=clips, return_tensors="pt",
                            sampling_rate=processor.feature_extractor.sampling_rate))
    items = [{"input_features": inputs["input_features"][i : i + 1],
              "feature_attention_mask": inputs["feature_attention_mask"][i : i + 1]} for i in range(len(clips))]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="qwen2_audio",
    models="Qwen2-Audio",
    tower_attr="audio_config",
    auto_class="AutoModelForMultimodalLM",
    encoders=(
        EncoderSpec(
            modality="audio", embeds="audio", placeholder_attr="audio_token_id", dynamic_axis="AUD",
            input_names=("input_features", "feature_attention_mask"), dynamic_axes={},
            build=lambda model: Qwen2AudioEncoder(model.model.audio_tower, model.model.multi_modal_projector),
            graph_inputs=_graph_inputs, reference=_reference, input_contract=_input_contract, fixed_size=True,
            rows=_rows,
        ),
    ),
    decoder_inputs=lambda model: SplicedEmbeddings(int(model.config.audio_token_id), "audio", "AUD"),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
