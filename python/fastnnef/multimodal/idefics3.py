"""Idefics3 (SmolVLM's first release): a SigLIP-style vision tower on square tiles, the
pixel-shuffle connector, a Llama decoder with 1-D positions.

Encoder (``vision/model.nnef.tgz``): ``pixel_values [TILES, 3, S, S]``, the tiles of ONE
image as the processor cut them (its sub-images, then the whole image resized: every
tile full-size, so the processor's pixel mask is all ones and every patch is valid), to
``out_image_embeddings [TILES * image_seq_len, hidden]``, tile after tile, exactly
Hugging Face's ``get_image_features`` of that image. The patch positions of a full tile
are ``0 .. patches-1`` in reading order (what Hugging Face's bucketing gives for a tile
with no padding), so the graph has no data-dependent step and only the tile count is
dynamic.

Decoder: ``in_image_embeddings [IMG, hidden]`` after the cache (the concatenated encoder
outputs of the prompt's images, in prompt order), spliced at the ``<image>`` tokens;
``out_image_embeddings`` passes it through, as torch_to_nnef_llm's decoder does.
Positions are the LLM exporter's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import SplicedEmbeddings


class Idefics3VisionEncoder(nn.Module):
    """Hugging Face's vision tower and connector on full tiles (module docstring)."""

    def __init__(self, vision_model: Any, connector: Any):
        super().__init__()
        self.vision_model = vision_model
        self.connector = connector

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        embeddings = self.vision_model.embeddings
        patches = embeddings.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        positions = torch.arange(patches.shape[1])[None]
        hidden = patches + embeddings.position_embedding(positions)
        hidden = self.vision_model.encoder(inputs_embeds=hidden, attention_mask=None).last_hidden_state
        features = self.connector(self.vision_model.post_layernorm(hidden))
        return features.flatten(0, 1)


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (item["pixel_values"][0],)


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], item["pixel_attention_mask"], return_dict=True)
    return [torch.cat(list(out.pooler_output), dim=0)]


def _input_contract(config: Any) -> dict[str, Any]:
    size = int(config.vision_config.image_size)
    return {
        "name": "pixel_values",
        "layout": ["TILES", 3, size, size],
        "host_prep": ("Feed ONE image's tiles as the processor made them (pixel_values[0, first:last] of that "
                      "image: its sub-images, then the resized whole image), full-size tiles only; one encoder "
                      "call per image"),
    }


def _sample(processor: Any) -> Sample:
    images = sample_images()
    text = "describe this picture <image> and this one <image> what do you see"
    inputs = dict(processor(text=[text], images=[images], return_tensors="pt"))
    # Each image's tile count, from the image processor alone (the prompt holds them in order).
    counts = [int(processor.image_processor([[image]], return_tensors="pt")["pixel_values"].shape[1])
              for image in images]
    bounds = [0, *torch.cumsum(torch.tensor(counts), 0).tolist()]
    items = [{"pixel_values": inputs["pixel_values"][:, a:b],
              "pixel_attention_mask": inputs["pixel_attention_mask"][:, a:b]}
             for a, b in zip(bounds, bounds[1:])]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="idefics3",
    models="Idefics3, SmolVLM (first release)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {0: "TILES"}},
            build=lambda model: Idefics3VisionEncoder(model.model.vision_model, model.model.connector),
            graph_inputs=_graph_inputs, reference=_reference, input_contract=_input_contract,
        ),
    ),
    decoder_inputs=lambda model: SplicedEmbeddings(int(model.config.image_token_id)),
    decoder_modules=("model.text_model", "lm_head"),
    sample=_sample,
)
