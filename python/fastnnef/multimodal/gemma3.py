"""Gemma3 vision: a SigLIP tower at its fixed image size, the pooling projector, a Gemma3
decoder whose image tokens see each other both ways.

Encoder (``vision/model.nnef.tgz``): ``pixel_values [TILES, 3, S, S]`` (an image, or
its pan-and-scan crops, at the tower's fixed size S) to ``out_image_embeddings
[TILES * mm_tokens_per_image, hidden]``, exactly Hugging Face's ``get_image_features``.
The model has no dynamic patch count: only the image count is dynamic.

Decoder: ``in_image_embeddings [IMG, hidden]`` after the cache, spliced at the image
tokens, passed through as ``out_image_embeddings`` (torch_to_nnef_llm's names).
Hugging Face lets the tokens of one image attend to each other both ways in the prompt
(``token_type_ids``): the masks here are widened the same way, from the image tokens of
the chunk (full layers: causal OR same image; sliding layers: that AND within the
window), so an image must not be split across chunks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import SplicedEmbeddings


class Gemma3VisionEncoder(nn.Module):
    """Hugging Face's SigLIP tower and Gemma3 projector, as ``get_image_features`` runs them."""

    def __init__(self, tower: Any, projector: Any):
        super().__init__()
        self.tower = tower
        self.projector = projector

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.tower(pixel_values=pixel_values).last_hidden_state
        return self.projector(hidden).flatten(0, 1)


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (item["pixel_values"],)


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], return_dict=True)
    return [out.pooler_output.flatten(0, 1)]


def _input_contract(config: Any) -> dict[str, Any]:
    size = int(config.vision_config.image_size)
    return {
        "name": "pixel_values",
        "layout": ["TILES", 3, size, size],
        "host_prep": "Feed the processor's pixel_values of the prompt's images (any number of rows)",
    }


class Gemma3DecoderInputs(SplicedEmbeddings):
    """Image embeddings spliced at the image tokens; masks widened over each image."""

    def __init__(self, token_id: int, window: int | None):
        super().__init__(token_id)
        self.window = window

    def feed(self, model: Any, input_ids: torch.Tensor, past: int, extras: tuple[torch.Tensor, ...],
             masks: dict[str, torch.Tensor]) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        fed, outputs = super().feed(model, input_ids, past, extras, masks)
        image = input_ids[0] == self.token_id
        flags = image.to(torch.int64)
        starts = (flags - torch.cat([flags.new_zeros(1), flags[:-1]])).clamp(min=0)
        group = torch.where(image, torch.cumsum(starts, dim=0), torch.zeros_like(flags))  # 0: not an image
        keys = torch.cat([flags.new_zeros(past), group])  # the past holds no part of this chunk's images
        same_image = (group[:, None] == keys[None, :]) & image[:, None]  # [S, P+S]
        distance = torch.arange(past, past + input_ids.shape[1])[:, None] - torch.arange(keys.shape[0])[None, :]
        widened = {}
        for kind, mask in masks.items():
            extra = same_image if kind == "full_attention" or self.window is None else same_image & (
                distance < self.window)
            widened[kind] = torch.where(extra[None, None], torch.zeros((), dtype=mask.dtype), mask)
        fed["attention_masks"] = widened
        return fed, outputs


def _sample(processor: Any) -> Sample:
    text = f"describe this picture {processor.boi_token} and this one {processor.boi_token} what do you see"
    images = sample_images()
    inputs = dict(processor(text=[text], images=[images], return_tensors="pt"))
    items = [{"pixel_values": inputs["pixel_values"][i : i + 1]} for i in range(len(images))]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="gemma3",
    models="Gemma 3 (4B and larger, vision)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {0: "TILES"}},
            build=lambda model: Gemma3VisionEncoder(model.model.vision_tower, model.model.multi_modal_projector),
            graph_inputs=_graph_inputs, reference=_reference, input_contract=_input_contract, fixed_size=True,
            # Traced on both images at once (TILES = 2), so the trace sees several tiles.
            trace_item=lambda items: {"pixel_values": torch.cat([i["pixel_values"] for i in items])},
        ),
    ),
    decoder_inputs=lambda model: Gemma3DecoderInputs(int(model.config.image_token_id),
                                                     model.config.get_text_config().sliding_window),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
