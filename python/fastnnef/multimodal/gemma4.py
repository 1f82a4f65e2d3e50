"""Gemma 4 vision: a patch tower with 2-D rotary positions and a learned 2-D position
table, pooled over k x k patch blocks, projected into the decoder; a Gemma 4 decoder
(per-layer input embeddings, KV sharing) whose sliding layers let one image's tokens see
each other both ways.

Encoder (``vision/model.nnef.tgz``): ``pixel_values [1, PATCHES, 3 * p * p]`` and
``image_position_ids [1, PATCHES, 2]`` (x, y of each patch), one image's patches without
the processor's padding (the first ``PATCHES`` rows: its padding rows, position (-1, -1),
come last) to ``out_image_embeddings [PATCHES / k^2, hidden]``, Hugging Face's
``get_image_features`` for that image. The patch count is dynamic; with no padding in
the graph, the tower attends over every patch, and the pooling by positions (each patch
averaged into its k x k block, row-major) is written as a comparison with the block
indices, not ``one_hot``, so that the block count follows the patch count.

Decoder: ``in_image_embeddings [IMG, hidden]`` after the cache, spliced at the image
tokens, passed through as ``out_image_embeddings``. As in Hugging Face, the image tokens
are embedded (and looked up in the per-layer input embeddings) as the pad token before
the image rows replace them; where the config says ``use_bidirectional_attention =
"vision"``, a sliding layer's mask also lets the tokens of one image of the chunk see each
other within the window (global layers stay causal), so an image must not be split
across chunks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import SplicedEmbeddings, splice_embeddings


class Gemma4VisionEncoder(nn.Module):
    """Hugging Face's vision tower and ``embed_vision``, on one image's unpadded patches."""

    def __init__(self, tower: Any, projector: Any):
        super().__init__()
        self.tower = tower
        self.projector = projector

    def forward(self, pixel_values: torch.Tensor, image_position_ids: torch.Tensor) -> torch.Tensor:
        tower = self.tower
        padding = (image_position_ids == -1).all(dim=-1)  # all False: the graph takes no padding
        embeds = tower.patch_embedder(pixel_values, image_position_ids, padding)
        hidden = tower.encoder(inputs_embeds=embeds, attention_mask=None,
                               pixel_position_ids=image_position_ids).last_hidden_state
        pooled = self._pool(hidden, image_position_ids) * tower.pooler.root_hidden_size
        if tower.config.standardize:
            pooled = (pooled - tower.std_bias.float()) * tower.std_scale.float()
        return self.projector(pooled.to(embeds.dtype))[0]

    def _pool(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[1, PATCHES / k^2, D]``: the mean of each k x k block of patches, blocks in
        row-major order (Hugging Face's pooling by positions, in float32)."""
        k = int(self.tower.config.pooling_kernel_size)
        blocks = hidden.shape[1] // (k * k)
        columns = positions[..., 0].max(dim=-1, keepdim=True)[0] + 1
        cell = torch.div(positions, k, rounding_mode="floor")
        index = cell[..., 0] + torch.div(columns, k, rounding_mode="floor") * cell[..., 1]  # [1, PATCHES]
        weights = (index[..., None] == torch.arange(blocks)).float() / (k * k)  # [1, PATCHES, blocks]
        return weights.transpose(1, 2) @ hidden.float()


def _unpadded(item: dict[str, torch.Tensor]) -> int:
    return int((item["image_position_ids"] != -1).all(dim=-1).sum())


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    count = _unpadded(item)
    return item["pixel_values"][:, :count], item["image_position_ids"][:, :count]


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], item["image_position_ids"], return_dict=True)
    return [out.pooler_output[0]]


def _input_contract(config: Any) -> dict[str, Any]:
    patch = int(config.vision_config.patch_size)
    return {
        "name": "pixel_values",
        "layout": [1, "PATCHES", 3 * patch * patch],
        "host_prep": "Feed one image at a time: the processor's pixel_values and image_position_ids rows of that "
                     "image, without its padding rows (image_position_ids (-1, -1), at the end)",
    }


class Gemma4DecoderInputs(SplicedEmbeddings):
    """Image embeddings spliced at the image tokens (embedded as the pad token), per-layer
    inputs from the same ids, sliding masks widened over each image (module docstring)."""

    def __init__(self, token_id: int, pad_id: int, window: int | None, bidirectional: bool):
        super().__init__(token_id)
        self.pad_id = pad_id
        self.window = window
        self.bidirectional = bidirectional

    def feed(self, model: Any, input_ids: torch.Tensor, past: int, extras: tuple[torch.Tensor, ...],
             masks: dict[str, torch.Tensor]) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        (images,) = extras
        image = input_ids == self.token_id
        text_ids = torch.where(image, torch.full_like(input_ids, self.pad_id), input_ids)
        embeds = splice_embeddings(model.get_input_embeddings()(text_ids), image, images)
        fed: dict[str, Any] = {"inputs_embeds": embeds, "position_ids": torch.arange(past,
                                                                                     past + input_ids.shape[1])[None]}
        language_model = model.model.language_model
        if language_model.hidden_size_per_layer_input:
            fed["per_layer_inputs"] = language_model.get_per_layer_inputs(text_ids, None)
        if self.bidirectional:
            fed["attention_masks"] = self._widened(image[0], past, masks)
        return fed, (images,)

    def _widened(self, image: torch.Tensor, past: int, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Sliding layers: (causal OR same image) AND within the window; global ones causal."""
        flags = image.to(torch.int64)
        starts = (flags - torch.cat([flags.new_zeros(1), flags[:-1]])).clamp(min=0)
        group = torch.where(image, torch.cumsum(starts, dim=0), torch.zeros_like(flags))  # 0: not an image
        keys = torch.cat([flags.new_zeros(past), group])  # the past holds no part of this chunk's images
        same_image = (group[:, None] == keys[None, :]) & image[:, None]  # [S, P+S]
        distance = torch.arange(past, past + image.shape[0])[:, None] - torch.arange(keys.shape[0])[None, :]
        widened = {}
        for kind, mask in masks.items():
            if kind == "sliding_attention":
                extra = same_image & (distance < self.window) if self.window is not None else same_image
                mask = torch.where(extra[None, None], torch.zeros((), dtype=mask.dtype), mask)
            widened[kind] = mask
        return widened


def _decoder_inputs(model: Any) -> Gemma4DecoderInputs:
    text = model.config.get_text_config()
    return Gemma4DecoderInputs(int(model.config.image_token_id), int(text.pad_token_id), text.sliding_window,
                               text.use_bidirectional_attention == "vision")


def _sample(processor: Any) -> Sample:
    text = f"describe this picture {processor.image_token} and this one {processor.image_token} what do you see"
    images = sample_images()
    inputs = dict(processor(text=[text], images=[images], return_tensors="pt"))
    items = [{"pixel_values": inputs["pixel_values"][i : i + 1],
              "image_position_ids": inputs["image_position_ids"][i : i + 1]} for i in range(len(images))]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="gemma4",
    models="Gemma 4 (vision)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG",
            input_names=("pixel_values", "image_position_ids"),
            dynamic_axes={"pixel_values": {1: "PATCHES"}, "image_position_ids": {1: "PATCHES"}},
            build=lambda model: Gemma4VisionEncoder(model.model.vision_tower, model.model.embed_vision),
            graph_inputs=_graph_inputs, reference=_reference, input_contract=_input_contract,
        ),
    ),
    decoder_inputs=_decoder_inputs,
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
