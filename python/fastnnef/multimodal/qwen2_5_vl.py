"""Qwen2.5-VL: the vision tower at any image size, and the decoder's 3-D (mrope) positions
computed in the graph from the prompt's image grid.

Encoder (``vision/model.nnef.tgz``): ``pixel_values [MH, MW, m, m, patch_dim]``, the
processor's patches of ONE image reshaped (``MH = grid_h / m``, ``MW = grid_w / m``: a
pure reshape, no padding), to ``out_image_embeddings [MH*MW, hidden]`` in the
processor's order, exactly Hugging Face's ``get_image_features``. Hugging Face groups the
patches into windows of ``W x W`` merged units (edge windows smaller) and attends within
each window, except in the ``fullatt_block_indexes`` blocks; the graph attends over the
whole image with an additive mask that hides keys of other windows, which computes the
same values at every size (window ids come from ``arange`` over the symbolic grid), where
cutting the image into windows would need data-dependent shapes.

Decoder: inputs ``in_image_embeddings [IMG_STATE, hidden]`` (the concatenated encoder
outputs of the prompt's images), ``in_image_grid_thw [IMG_GRID, 3]`` (the processor's
``image_grid_thw``), ``in_rope_deltas [1, 1]``; output ``out_rope_deltas [1, 1]``, after
the cache (torch_to_nnef_llm's names). Positions: a text token gets ``P + i + delta``
where ``delta`` is ``in_rope_deltas`` plus, for each image of this chunk before it,
``max(h, w) - h*w`` (merged grid); an image token at row r, column c of its image gets
``(b, b + r, b + c)`` with ``b`` the position its first token would have as text. That
is Hugging Face's ``get_rope_index`` for prompts whose images are single frames, written
with cumulative sums over the chunk, so the graph is symbolic in the prompt length and
the image count; ``out_rope_deltas`` is the delta after the chunk, which the runtime
feeds back as ``in_rope_deltas`` on the next call (0 for the first), as Hugging Face
keeps ``rope_deltas``. An image must not be split across chunks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.multimodal.family import DecoderInputs, EncoderSpec, Family
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import splice_embeddings


class Qwen25VisionEncoder(nn.Module):
    """Hugging Face's ``model.visual`` (blocks and merger used as they are), fed one
    image's merge-block grid; attention windows as a mask (module docstring)."""

    def __init__(self, visual: Any):
        super().__init__()
        self.visual = visual
        self.merge = int(visual.spatial_merge_size)
        self.window = int(visual.window_size // visual.spatial_merge_size // visual.patch_size)
        self.full_attention = set(visual.fullatt_block_indexes)

    def _grid_indices(self, mh: int, mw: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per patch (processor order): its row and column in patches, and its window id."""
        m = self.merge
        rows = torch.arange(mh)[:, None, None, None]
        cols = torch.arange(mw)[None, :, None, None]
        inner_r = torch.arange(m)[None, None, :, None]
        inner_c = torch.arange(m)[None, None, None, :]
        shape = (mh, mw, m, m)
        row = (rows * m + inner_r).expand(shape).reshape(-1)
        col = (cols * m + inner_c).expand(shape).reshape(-1)
        # One id per window: rows of windows times a bound above any count of window columns.
        window = ((rows // self.window) * 65536 + cols // self.window).expand(shape).reshape(-1)
        return row, col, window

    def _attention(self, block: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   mask: torch.Tensor | None) -> torch.Tensor:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision

        attn = block.attn
        seq = x.shape[0]
        # Sizes spelled out: a -1 beside the dynamic axis would be a size tract cannot name.
        q, k, v = attn.qkv(x).reshape(seq, 3, attn.num_heads, attn.head_dim).permute(1, 0, 2, 3).unbind(0)
        q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
        q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))  # [1, heads, seq, head_dim]
        scores = torch.matmul(q, k.transpose(2, 3)) * attn.scaling
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v)[0].transpose(0, 1).flatten(1)
        return attn.proj(out)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        mh, mw = pixel_values.shape[0], pixel_values.shape[1]
        hidden = self.visual.patch_embed(pixel_values.reshape(-1, pixel_values.shape[-1]))
        row, col, window = self._grid_indices(mh, mw)
        cos, sin = self.visual.rotary_pos_emb(hidden, torch.stack([row, col], dim=-1))
        dtype = hidden.dtype
        same_window = window[:, None] == window[None, :]
        window_mask = torch.where(same_window, torch.zeros((), dtype=dtype),
                                  torch.full((), torch.finfo(dtype).min, dtype=dtype))[None, None]
        for index, block in enumerate(self.visual.blocks):
            mask = None if index in self.full_attention else window_mask
            hidden = hidden + self._attention(block, block.norm1(hidden), cos, sin, mask)
            hidden = hidden + block.mlp(block.norm2(hidden))
        # The merger's own view(-1, 4 * C) would turn one unnamed size into another (N into
        # N / 4), which the export cannot tell apart: group by the named grid sizes instead.
        merger = self.visual.merger
        grouped = merger.ln_q(hidden).reshape(mh, mw, merger.hidden_size)
        return merger.mlp(grouped).flatten(0, 1)


def _image_slices(processed: dict[str, torch.Tensor], index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Image ``index``'s patches and its grid row, from the processor's output."""
    grid = processed["image_grid_thw"]
    sizes = [int(t * h * w) for t, h, w in grid.tolist()]
    start = sum(sizes[:index])
    return processed["pixel_values"][start : start + sizes[index]], grid[index : index + 1]


def _graph_inputs(model: Any, processed: dict[str, torch.Tensor], index: int) -> tuple[torch.Tensor, ...]:
    patches, grid = _image_slices(processed, index)
    t, h, w = (int(v) for v in grid[0])
    if t != 1:
        raise T2NErrorNotImplemented(f"image {index} has {t} temporal patches: the encoder takes single-frame images")
    m = int(model.config.vision_config.spatial_merge_size)
    return (patches.reshape(h // m, w // m, m, m, patches.shape[-1]),)


def _reference(model: Any, processed: dict[str, torch.Tensor], index: int) -> torch.Tensor:
    patches, grid = _image_slices(processed, index)
    with torch.no_grad():
        out = model.model.get_image_features(patches, grid, return_dict=True)
    return torch.cat(list(out.pooler_output), dim=0)


def _input_contract(config: Any) -> dict[str, Any]:
    m = int(config.vision_config.spatial_merge_size)
    return {
        "name": "pixel_values",
        "layout": ["MH", "MW", m, m, "patch_dim"],
        "host_prep": (f"Reshape ONE image's patches from the processor ([grid_h * grid_w, patch_dim], "
                      f"merge-block-major) to [grid_h / {m}, grid_w / {m}, {m}, {m}, patch_dim]: a pure reshape, "
                      "no padding; one encoder call per image"),
    }


class Qwen25VLDecoderInputs(DecoderInputs):
    """Image embeddings spliced at the image tokens, mrope positions from the grid."""

    names = ("in_image_embeddings", "in_image_grid_thw", "in_rope_deltas")
    output_names = ("out_rope_deltas",)
    dynamic_axes = {"in_image_embeddings": {0: "IMG_STATE"}, "in_image_grid_thw": {0: "IMG_GRID"}}

    def __init__(self, config: Any):
        self.image_token_id = int(config.image_token_id)
        self.merge = int(config.vision_config.spatial_merge_size)

    def positions(self, input_ids: torch.Tensor, past: int, grid: torch.Tensor,
                  deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``position_ids [3, 1, S]`` and the rope delta after the chunk (module docstring)."""
        is_image = input_ids[0] == self.image_token_id
        image = is_image.to(torch.int64)
        starts = (image - torch.cat([image.new_zeros(1), image[:-1]])).clamp(min=0)
        image_number = torch.cumsum(starts, dim=0)  # 0 before the first image, n within and after image n
        before = (image_number - 1).clamp(min=0)
        heights, widths = grid[:, 1] // self.merge, grid[:, 2] // self.merge
        sizes = grid[:, 0] * heights * widths
        # Per image n (row 0: no image yet): cumulative shift of text positions, tokens so far, width.
        none = grid.new_zeros(1)
        shift = torch.cumsum(torch.cat([none, torch.maximum(heights, widths) - sizes]), dim=0)
        tokens = torch.cumsum(torch.cat([none, sizes]), dim=0)
        width = torch.cat([none + 1, widths])
        seq = torch.arange(input_ids.shape[1])
        offset = past + deltas.reshape(())
        in_image = torch.cumsum(image, dim=0) - 1 - tokens.index_select(0, before)  # index within its image
        w = width.index_select(0, image_number)
        base = offset + seq - in_image + shift.index_select(0, before)
        text = offset + seq + shift.index_select(0, image_number)
        t = torch.where(is_image, base, text)
        h = torch.where(is_image, base + torch.div(in_image, w, rounding_mode="floor"), text)
        c = torch.where(is_image, base + torch.remainder(in_image, w), text)
        positions = torch.stack([t, h, c])[:, None, :]
        return positions, deltas + shift[-1:].reshape(1, 1)

    def feed(self, model: Any, input_ids: torch.Tensor, past: int,
             extras: tuple[torch.Tensor, ...]) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        embeddings, grid, deltas = extras
        inputs_embeds = splice_embeddings(model.get_input_embeddings()(input_ids),
                                          input_ids == self.image_token_id, embeddings)
        positions, new_deltas = self.positions(input_ids, past, grid, deltas)
        return {"inputs_embeds": inputs_embeds, "position_ids": positions}, (new_deltas,)

    def initial_outputs(self) -> list[torch.Tensor]:
        return [torch.zeros((1, 1), dtype=torch.int64)]  # no rope delta before the first chunk

    def prompt_values(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      previous: list[torch.Tensor]) -> list[torch.Tensor]:
        return [embeddings[0], processed["image_grid_thw"], previous[0]]

    def step_values(self, previous: list[torch.Tensor], hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
        return [torch.zeros((0, hidden), dtype=dtype), torch.zeros((0, 3), dtype=torch.int64), previous[0]]


def _sample(processor: Any) -> dict[str, torch.Tensor]:
    images = sample_images()
    image = "<|vision_start|>" + processor.image_token + "<|vision_end|>"
    text = f"describe this picture {image} and this one {image} what do you see"
    return dict(processor(text=[text], images=images, return_tensors="pt"))


FAMILY = Family(
    model_type="qwen2_5_vl",
    models="Qwen2.5-VL",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG_STATE",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {0: "MH", 1: "MW"}},
            count=lambda processed: len(processed["image_grid_thw"]),
            build=lambda model: Qwen25VisionEncoder(model.model.visual), graph_inputs=_graph_inputs,
            reference=_reference, input_contract=_input_contract,
        ),
    ),
    decoder_inputs=lambda model: Qwen25VLDecoderInputs(model.config),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
