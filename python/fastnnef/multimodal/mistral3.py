"""Mistral3 (Mistral Small 3.1 and later): the Pixtral vision tower at any image size, the
projector with its 2 x 2 patch merger (a strided convolution here), a Mistral decoder with 1-D positions.

Encoder (``vision/model.nnef.tgz``): ``pixel_values [1, 3, H, W]``, ONE image as the
processor resized it (its own ``image_sizes``: the batch's padding cropped off; H and W
are multiples of patch x merge), to ``out_image_embeddings [H/(p*m) * W/(p*m), hidden]``
in reading order, exactly Hugging Face's ``get_image_features``. The 2-D rotary positions
come from ``arange`` over the symbolic patch grid; one image attends to itself only, so
the block mask Hugging Face builds for a batch of images is not needed.

Decoder: ``in_image_embeddings [IMG, hidden]`` after the cache (the concatenated encoder
outputs of the prompt's images), spliced at the ``[IMG]`` tokens (``[IMG_BREAK]`` and
``[IMG_END]`` are text tokens); ``out_image_embeddings`` passes it through. Positions
are the LLM exporter's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import SplicedEmbeddings


class PixtralEncoder(nn.Module):
    """Hugging Face's Pixtral tower and Mistral3 projector for one image (module docstring)."""

    def __init__(self, tower: Any, projector: Any, feature_layer: int):
        super().__init__()
        self.tower = tower
        self.projector = projector
        layers = len(tower.transformer.layers)
        # hidden_states[k] is the input of layer k; -1 is the last layer's output.
        self.n_layers = feature_layer % (layers + 1)
        self.merge = int(projector.patch_merger.spatial_merge_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        grid = self.tower.patch_conv(pixel_values)  # [1, C, h, w]
        h, w = grid.shape[2], grid.shape[3]
        hidden = self.tower.ln_pre(grid.flatten(2).transpose(1, 2))  # [1, h*w, C]
        rows = torch.arange(h)[:, None].expand(h, w).reshape(-1)
        cols = torch.arange(w)[None, :].expand(h, w).reshape(-1)
        position_embeddings = self.tower.patch_positional_embedding(hidden, torch.stack([rows, cols], dim=-1))
        for layer in self.tower.transformer.layers[: self.n_layers]:
            hidden = layer(hidden, None, position_embeddings=position_embeddings)
        hidden = self.projector.norm(hidden)
        # PatchMerger's unfold(2 x 2) then Linear(4C -> C) is a 2 x 2 convolution of stride 2
        # over the patch grid, whose filters are the linear weight (unfold orders each block's
        # features channel-major, as a convolution filter is laid out): no reshape of the
        # sequence into blocks, whose sizes tract could not prove equal.
        m = self.merge
        linear = self.projector.patch_merger.merging_layer
        channels = hidden.shape[-1]
        grid = hidden.transpose(1, 2).reshape(1, channels, h, w)
        filters = linear.weight.reshape(linear.out_features, channels, m, m)
        merged = torch.nn.functional.conv2d(grid, filters, stride=m).flatten(2).transpose(1, 2)[0]
        out = self.projector.linear_2(self.projector.act(self.projector.linear_1(merged)))
        return out


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (item["pixel_values"],)


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], item["image_sizes"],
                                             vision_feature_layer=model.config.vision_feature_layer, return_dict=True)
    return [torch.cat(list(out.pooler_output), dim=0)]


def _input_contract(config: Any) -> dict[str, Any]:
    block = int(config.vision_config.patch_size) * int(config.spatial_merge_size)
    return {
        "name": "pixel_values",
        "layout": [1, 3, "H", "W"],
        "host_prep": (f"Feed ONE image as the processor made it, cropped to its image_sizes (H and W multiples "
                      f"of {block}): pixel_values[i:i+1, :, :h_i, :w_i]; one encoder call per image"),
    }


def _build(model: Any) -> nn.Module:
    layer = model.config.vision_feature_layer
    if not isinstance(layer, int):
        raise T2NErrorNotImplemented(
            f"vision_feature_layer={layer}: the Mistral3 encoder takes the features of one layer (an int)"
        )
    return PixtralEncoder(model.model.vision_tower, model.model.multi_modal_projector, layer)


def _sample(processor: Any) -> Sample:
    text = "describe this picture [IMG] and this one [IMG] what do you see"
    inputs = dict(processor(text=[text], images=sample_images(), return_tensors="pt"))
    items = [{"pixel_values": inputs["pixel_values"][i : i + 1, :, : int(h), : int(w)],
              "image_sizes": inputs["image_sizes"][i : i + 1]}
             for i, (h, w) in enumerate(inputs["image_sizes"].tolist())]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="mistral3",
    models="Mistral Small 3.1/3.2 (Pixtral vision)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {2: "H", 3: "W"}},
            build=_build, graph_inputs=_graph_inputs, reference=_reference, input_contract=_input_contract,
        ),
    ),
    decoder_inputs=lambda model: SplicedEmbeddings(int(model.config.image_token_id)),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
