"""Qwen3-VL: the vision tower at any image size with its DeepStack streams, and the
decoder's mrope positions computed in the graph (as for Qwen2.5-VL).

Encoder (``vision/model.nnef.tgz``): ``pixel_values [MH, MW, m, m, patch_dim]`` (ONE
image's patches from the processor, reshaped: torch_to_nnef_llm's layout) to
``out_image_embeddings [MH*MW, hidden]`` and ``out_image_deepstack_{i}`` (the merged
features of the vision blocks ``deepstack_visual_indexes``), exactly Hugging Face's
``get_image_features``. The learned position table is resampled bilinearly to the
image's grid in the graph (Hugging Face's closed form, from ``arange`` over the symbolic
grid); attention spans the whole image (Hugging Face's ``cu_seqlens`` split would freeze
the traced size).

Decoder: Qwen2.5-VL's inputs and outputs (``qwen2_5_vl.py``), then
``in_image_deepstack_{i} [IMG_DEEP, hidden]`` (passed through as ``out_image_deepstack_{i}``);
stream i is added to the output of decoder layer i at the image tokens, as Hugging Face's
``_deepstack_process`` does (which selects the rows with a boolean mask, a data-dependent
shape: here the rows are gathered as for the splice, through a forward hook on the layer
that removes itself once run). Videos: Hugging Face splits a video's grid into one row
per frame (frames are separated by timestamps): the runtime feeds ``in_video_grid_thw``
that way; only images are verified.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.manifest import DEEPSTACK_AXIS, deepstack_input_name, deepstack_output_name
from fastnnef.multimodal.qwen2_5_vl import FAMILY as QWEN2_5_VL
from fastnnef.multimodal.qwen2_5_vl import (
    Qwen25VLDecoderInputs,
    grid_indices,
    vision_attention,
)
from fastnnef.multimodal.splice import gathered_rows


class Qwen3VisionEncoder(nn.Module):
    """Hugging Face's ``model.visual`` on one image's merge-block grid (module docstring)."""

    def __init__(self, visual: Any):
        super().__init__()
        self.visual = visual
        self.merge = int(visual.spatial_merge_size)
        self.side = int(visual.num_grid_per_side)
        # Qwen3.5's tower has no DeepStack streams (its model deletes the attribute).
        self.deepstack = list(getattr(visual, "deepstack_visual_indexes", ()))

    def _axis_taps(self, index: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bilinear taps and weights (align_corners) of positions ``index`` on an axis of
        ``count`` patches into the table's ``side`` rows: Hugging Face's closed form."""
        src = index.to(torch.float32) * (self.side - 1) / count.clamp(min=1)
        floor = torch.floor(src)
        offsets = torch.arange(0, 2)
        taps = (floor.long()[:, None] + offsets).clamp(0, self.side - 1)
        weights = (1 - (src[:, None] - floor[:, None] - offsets).abs()).clamp(min=0)
        return taps, weights

    def _position_embeddings(self, row: torch.Tensor, col: torch.Tensor, mh: int, mw: int) -> torch.Tensor:
        # h - 1 and w - 1 as tensors computed from the grid (arange's last value).
        last_row = torch.arange(mh * self.merge)[-1:]
        last_col = torch.arange(mw * self.merge)[-1:]
        h_taps, h_weights = self._axis_taps(row, last_row)
        w_taps, w_weights = self._axis_taps(col, last_col)
        indices = (h_taps[:, :, None] * self.side + w_taps[:, None, :]).reshape(-1, 4)
        weights = (h_weights[:, :, None] * w_weights[:, None, :]).reshape(-1, 4)
        return (self.visual.pos_embed(indices) * weights[:, :, None]).sum(1)

    @staticmethod
    def _merged(merger: Any, hidden: torch.Tensor, mh: int, mw: int) -> torch.Tensor:
        """``merger`` over the merge blocks, grouped by the named grid sizes (its own
        view(-1, 4C) would turn one unnamed size into another)."""
        if merger.use_postshuffle_norm:
            grouped = merger.norm(hidden.reshape(mh, mw, merger.hidden_size))
        else:
            grouped = merger.norm(hidden).reshape(mh, mw, merger.hidden_size)
        return merger.linear_fc2(merger.act_fn(merger.linear_fc1(grouped))).flatten(0, 1)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mh, mw = pixel_values.shape[0], pixel_values.shape[1]
        hidden = self.visual.patch_embed(pixel_values.reshape(-1, pixel_values.shape[-1]))
        row, col = grid_indices(mh, mw, self.merge)
        hidden = hidden + self._position_embeddings(row, col, mh, mw).to(hidden.dtype)
        cos, sin = self.visual.rotary_pos_emb(hidden, torch.stack([row, col], dim=-1))
        streams = []
        for index, block in enumerate(self.visual.blocks):
            hidden = hidden + vision_attention(block.attn, block.norm1(hidden), cos, sin, None)
            hidden = hidden + block.mlp(block.norm2(hidden))
            if index in self.deepstack:
                merger = self.visual.deepstack_merger_list[self.deepstack.index(index)]
                streams.append(self._merged(merger, hidden, mh, mw))
        return (self._merged(self.visual.merger, hidden, mh, mw), *streams)


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], item["image_grid_thw"], return_dict=True)
    # Every output split per image (one image here): concatenated back.
    return [torch.cat(list(out.pooler_output), dim=0), *(torch.cat(list(f), dim=0) for f in out.deepstack_features)]


class Qwen3VLDecoderInputs(Qwen25VLDecoderInputs):
    """Qwen2.5-VL's inputs, then one DeepStack stream per injected decoder layer."""

    def __init__(self, model: Any):
        super().__init__(model.config, video_interval=1)
        self.streams = len(model.config.vision_config.deepstack_visual_indexes)
        self.layers = model.model.language_model.layers
        deep_in = tuple(deepstack_input_name("image", i) for i in range(self.streams))
        self.names = Qwen25VLDecoderInputs.names + deep_in
        self.output_names = Qwen25VLDecoderInputs.output_names + tuple(
            deepstack_output_name("image", i) for i in range(self.streams))
        self.dynamic_axes = {**Qwen25VLDecoderInputs.dynamic_axes, **{n: {0: DEEPSTACK_AXIS} for n in deep_in}}

    def feed(self, model: Any, input_ids: torch.Tensor, past: int, extras: tuple[torch.Tensor, ...],
             masks: dict[str, torch.Tensor]) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        count = len(Qwen25VLDecoderInputs.names)
        base, streams = extras[:count], extras[count:]
        fed, outputs = super().feed(model, input_ids, past, base, masks)
        placeholders = input_ids == self.image_token_id
        for layer, stream in zip(self.layers, streams):
            _add_once(layer, gathered_rows(placeholders, stream, fed["inputs_embeds"]))
        return fed, (*outputs, *streams)

    def initial_outputs(self, hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
        return [*super().initial_outputs(hidden, dtype), *[torch.zeros((0, hidden), dtype=dtype)] * self.streams]

    def prompt_values(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      previous: list[torch.Tensor]) -> list[torch.Tensor]:
        base = super().prompt_values(processed, embeddings[:1], previous)
        return [*base, *embeddings[1:]]


def _add_once(layer: nn.Module, rows: torch.Tensor) -> None:
    """Add ``rows`` to the output of ``layer``'s next forward, then forget it."""
    handle: Any | None = None

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        assert handle is not None
        handle.remove()
        if isinstance(output, tuple):
            return (output[0] + rows, *output[1:])
        return output + rows

    handle = layer.register_forward_hook(hook)


def _sample(processor: Any) -> Sample:
    return QWEN2_5_VL.sample(processor)


def _extra_outputs(config: Any) -> list[str]:
    return [deepstack_output_name("image", i) for i in range(len(config.vision_config.deepstack_visual_indexes))]


def _build(model: Any) -> nn.Module:
    return Qwen3VisionEncoder(model.model.visual)


_QWEN25_ENCODER = QWEN2_5_VL.encoders[0]

FAMILY = Family(
    model_type="qwen3_vl",
    models="Qwen3-VL (dense)",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG_STATE",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {0: "IMG_H", 1: "IMG_W"}},
            build=_build, graph_inputs=_QWEN25_ENCODER.graph_inputs, reference=_reference,
            input_contract=_QWEN25_ENCODER.input_contract, extra_output_names=_extra_outputs,
            # Stream i is added after decoder layer i (the config's indexes are vision blocks).
            injection_layers=lambda config: tuple(range(len(config.vision_config.deepstack_visual_indexes))),
        ),
    ),
    decoder_inputs=Qwen3VLDecoderInputs,
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
