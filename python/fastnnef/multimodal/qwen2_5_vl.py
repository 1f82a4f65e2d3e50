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

Decoder: inputs after the cache, torch_to_nnef_llm's names and order:
``in_image_embeddings [IMG_STATE, hidden]`` (the concatenated encoder outputs of the
prompt's images), ``in_video_embeddings [VID_STATE, hidden]``, ``in_image_grid_thw
[IMG_GRID, 3]`` and ``in_video_grid_thw [VID_GRID, 3]`` (the processor's grids),
``in_rope_deltas [1, 1]``; the same five as ``out_*`` after the cache (the embeddings and
grids passed through, so a runtime may feed every output back as the input of the same
name, as the reference's runtimes do; a chunk without placeholders ignores them).

Positions, computed in the graph (the reference's decoder computes them with Python
loops over the grid, which the trace freezes to its example): a text token gets
``P + i + delta``, ``delta`` being ``in_rope_deltas`` plus ``max(h, w) - t*h*w`` (merged
grid) for each image or video of this chunk before it; a token of an image or video at
frame f, row r, column c gets ``(b + f*k, b + r, b + c)`` with ``b`` the position its
item's first token would have as text and ``k`` 1 for images, ``tokens_per_second`` for
videos (Hugging Face's spacing without ``second_per_grid_ts``: videos sampled at another
rate get other temporal positions there). This is Hugging Face's ``get_rope_index``,
written with cumulative sums over the chunk, so the graph is symbolic in the prompt length
and the item counts; ``out_rope_deltas`` is the delta after the chunk (the runtime feeds
it back; 0 before the first chunk), as Hugging Face keeps ``rope_deltas``. An item must
not be split across chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.llm.transformers_api import qwen2_5_vl_vision_rotary
from fastnnef.multimodal.family import DecoderInputs, EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_images
from fastnnef.multimodal.splice import complete_placeholders, splice_embeddings


def vision_attention(attn: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     mask: torch.Tensor | None) -> torch.Tensor:
    """Hugging Face's Qwen-VL vision attention over ONE image (its ``cu_seqlens`` split
    would freeze the traced image's size), with an optional additive mask."""
    seq = x.shape[0]
    # Sizes spelled out: a -1 beside the dynamic axis would be a size tract cannot name.
    q, k, v = attn.qkv(x).reshape(seq, 3, attn.num_heads, attn.head_dim).permute(1, 0, 2, 3).unbind(0)
    q, k = qwen2_5_vl_vision_rotary(q, k, cos, sin)
    q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))  # [1, heads, seq, head_dim]
    scores = torch.matmul(q, k.transpose(2, 3)) * attn.scaling
    if mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, v)[0].transpose(0, 1).flatten(1)
    return attn.proj(out)


def grid_indices(mh: int, mw: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per patch of a merge-block grid ``[MH, MW, m, m]`` (the processor's order): its row
    and column in patches."""
    shape = (mh, mw, m, m)
    row = (torch.arange(mh)[:, None, None, None] * m + torch.arange(m)[None, None, :, None]).expand(shape)
    col = (torch.arange(mw)[None, :, None, None] * m + torch.arange(m)[None, None, None, :]).expand(shape)
    return row.reshape(-1), col.reshape(-1)


class Qwen25VisionEncoder(nn.Module):
    """Hugging Face's ``model.visual`` (blocks and merger used as they are), fed one
    image's merge-block grid; attention windows as a mask (module docstring)."""

    def __init__(self, visual: Any):
        super().__init__()
        self.visual = visual
        self.merge = int(visual.spatial_merge_size)
        self.window = int(visual.window_size // visual.spatial_merge_size // visual.patch_size)
        self.full_attention = set(visual.fullatt_block_indexes)

    def _window_ids(self, mh: int, mw: int) -> torch.Tensor:
        """Per patch (processor order): its attention window, as one id (rows of windows
        times a bound above any count of window columns)."""
        rows = torch.arange(mh)[:, None, None, None] // self.window
        cols = torch.arange(mw)[None, :, None, None] // self.window
        return (rows * 65536 + cols).expand(mh, mw, self.merge, self.merge).reshape(-1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        mh, mw = pixel_values.shape[0], pixel_values.shape[1]
        hidden = self.visual.patch_embed(pixel_values.reshape(-1, pixel_values.shape[-1]))
        row, col = grid_indices(mh, mw, self.merge)
        window = self._window_ids(mh, mw)
        cos, sin = self.visual.rotary_pos_emb(hidden, torch.stack([row, col], dim=-1))
        dtype = hidden.dtype
        same_window = window[:, None] == window[None, :]
        window_mask = torch.where(same_window, torch.zeros((), dtype=dtype),
                                  torch.full((), torch.finfo(dtype).min, dtype=dtype))[None, None]
        for index, block in enumerate(self.visual.blocks):
            mask = None if index in self.full_attention else window_mask
            hidden = hidden + vision_attention(block.attn, block.norm1(hidden), cos, sin, mask)
            hidden = hidden + block.mlp(block.norm2(hidden))
        # The merger's own view(-1, 4 * C) would turn one unnamed size into another (N into
        # N / 4), which the export cannot tell apart: group by the named grid sizes instead.
        merger = self.visual.merger
        grouped = merger.ln_q(hidden).reshape(mh, mw, merger.hidden_size)
        return merger.mlp(grouped).flatten(0, 1)


def _graph_inputs(model: Any, item: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    patches, (t, h, w) = item["pixel_values"], (int(v) for v in item["image_grid_thw"][0])
    if t != 1:
        raise T2NErrorNotImplemented(f"an image has {t} temporal patches: the encoder takes single-frame images")
    m = int(model.config.vision_config.spatial_merge_size)
    return (patches.reshape(h // m, w // m, m, m, patches.shape[-1]),)


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model.model.get_image_features(item["pixel_values"], item["image_grid_thw"], return_dict=True)
    return [torch.cat(list(out.pooler_output), dim=0)]


def _input_contract(config: Any) -> dict[str, Any]:
    m = int(config.vision_config.spatial_merge_size)
    return {
        "name": "pixel_values",
        "layout": ["MH", "MW", m, m, "patch_dim"],
        "host_prep": (f"Reshape ONE image's patches from the processor ([grid_h * grid_w, patch_dim], "
                      f"merge-block-major) to [grid_h / {m}, grid_w / {m}, {m}, {m}, patch_dim]: a pure reshape, "
                      "no padding; one encoder call per image"),
    }


@dataclass
class _Runs:
    """Where one modality's placeholders are in a chunk, per token (module docstring)."""

    inside: torch.Tensor  # [S] bool: a placeholder of this modality
    index: torch.Tensor  # [S] its index within its item (image or video)
    frame: torch.Tensor  # [S] merged h * w of the item it is in, or after
    width: torch.Tensor  # [S] merged w of the item it is in, or after
    shift_through: torch.Tensor  # [S] text-position shift of this modality's items up to the current one
    shift_before: torch.Tensor  # [S] ... of the items before the current one
    total_shift: torch.Tensor  # [1] ... of every item in the chunk (not every row of the grid:
    # the grid is fed back with the chunks after the prompt)


class Qwen25VLDecoderInputs(DecoderInputs):
    """Embeddings spliced at the image and video tokens, mrope positions from the grids;
    inputs passed through as outputs, as torch_to_nnef_llm's decoder does (a runtime
    feeds every ``out_*`` back as ``in_*``; chunks without placeholders ignore them)."""

    names: tuple[str, ...] = ("in_image_embeddings", "in_video_embeddings", "in_image_grid_thw", "in_video_grid_thw",
             "in_rope_deltas")
    output_names: tuple[str, ...] = ("out_image_embeddings", "out_video_embeddings", "out_image_grid_thw",
                                     "out_video_grid_thw", "out_rope_deltas")
    dynamic_axes = {"in_image_embeddings": {0: "IMG_STATE"}, "in_video_embeddings": {0: "VID_STATE"},
                    "in_image_grid_thw": {0: "IMG_GRID"}, "in_video_grid_thw": {0: "VID_GRID"}}

    def __init__(self, config: Any, video_interval: int | None = None):
        self.image_token_id = int(config.image_token_id)
        self.video_token_id = int(config.video_token_id)
        self.placeholder_ids = (self.image_token_id, self.video_token_id)
        self.merge = int(config.vision_config.spatial_merge_size)
        # Hugging Face's temporal spacing of video frames: without second_per_grid_ts (1 s
        # per grid) for Qwen2.5-VL.
        self.video_interval = video_interval or int(config.vision_config.tokens_per_second)

    def _runs(self, input_ids: torch.Tensor, token: int, grid: torch.Tensor) -> _Runs:
        inside = input_ids[0] == token
        flags = inside.to(torch.int64)
        starts = (flags - torch.cat([flags.new_zeros(1), flags[:-1]])).clamp(min=0)
        number = torch.cumsum(starts, dim=0)  # 0 before the first item, n within and after item n
        before = (number - 1).clamp(min=0)
        heights, widths = grid[:, 1] // self.merge, grid[:, 2] // self.merge
        frames = heights * widths
        sizes = grid[:, 0] * frames
        # Per item n, row 0 standing for "no item yet": shift of text positions, tokens so far.
        none = grid.new_zeros(1)
        shift = torch.cumsum(torch.cat([none, torch.maximum(heights, widths) - sizes]), dim=0)
        tokens = torch.cumsum(torch.cat([none, sizes]), dim=0)
        return _Runs(
            inside=inside, index=torch.cumsum(flags, dim=0) - 1 - tokens.index_select(0, before),
            frame=torch.cat([none + 1, frames]).index_select(0, number),
            width=torch.cat([none + 1, widths]).index_select(0, number),
            shift_through=shift.index_select(0, number), shift_before=shift.index_select(0, before),
            total_shift=shift.index_select(0, number[-1:]),
        )

    def positions(self, input_ids: torch.Tensor, past: int, image_grid: torch.Tensor, video_grid: torch.Tensor,
                  deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``position_ids [3, 1, S]`` and the rope delta after the chunk (module docstring)."""
        image = self._runs(input_ids, self.image_token_id, image_grid)
        video = self._runs(input_ids, self.video_token_id, video_grid)
        offset = past + deltas.reshape(()) + torch.arange(input_ids.shape[1])
        text = offset + image.shift_through + video.shift_through
        axes = [text, text, text]
        for runs, other, interval in ((image, video, 1), (video, image, self.video_interval)):
            base = offset - runs.index + runs.shift_before + other.shift_through
            within_frame = torch.remainder(runs.index, runs.frame)
            item_axes = (base + torch.div(runs.index, runs.frame, rounding_mode="floor") * interval,
                         base + torch.div(within_frame, runs.width, rounding_mode="floor"),
                         base + torch.remainder(within_frame, runs.width))
            axes = [torch.where(runs.inside, a, b) for a, b in zip(item_axes, axes)]
        new_deltas = deltas + (image.total_shift + video.total_shift).reshape(1, 1)
        return torch.stack(axes)[:, None, :], new_deltas

    def feed(self, model: Any, input_ids: torch.Tensor, past: int,
             extras: tuple[torch.Tensor, ...],
             masks: dict[str, torch.Tensor]) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        images, videos, image_grid, video_grid, deltas = extras
        is_image, is_video = input_ids == self.image_token_id, input_ids == self.video_token_id
        embeds = model.get_input_embeddings()(input_ids)
        embeds = splice_embeddings(splice_embeddings(embeds, is_image, images), is_video, videos)
        # Placeholders that splice nothing (a generated one: complete_placeholders) are text
        # for the positions too, as in Hugging Face's generation steps.
        stray = ((is_image & ~complete_placeholders(is_image, images))
                 | (is_video & ~complete_placeholders(is_video, videos)))
        positions, new_deltas = self.positions(torch.where(stray, -1, input_ids), past, image_grid, video_grid,
                                               deltas)
        return {"inputs_embeds": embeds, "position_ids": positions}, (images, videos, image_grid, video_grid,
                                                                      new_deltas)

    def initial_outputs(self, hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
        no_grid = torch.zeros((0, 3), dtype=torch.int64)
        return [torch.zeros((0, hidden), dtype=dtype), torch.zeros((0, hidden), dtype=dtype), no_grid, no_grid,
                torch.zeros((1, 1), dtype=torch.int64)]

    def prompt_values(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      previous: list[torch.Tensor]) -> list[torch.Tensor]:
        return [embeddings[0], previous[1], processed["image_grid_thw"], previous[3], previous[4]]


def _sample(processor: Any) -> Sample:
    image = "<|vision_start|>" + processor.image_token + "<|vision_end|>"
    text = f"describe this picture {image} and this one {image} what do you see"
    inputs = dict(processor(text=[text], images=sample_images(), return_tensors="pt"))
    grid = inputs["image_grid_thw"]
    bounds = [0, *torch.cumsum(grid.prod(-1), 0).tolist()]
    items = [{"pixel_values": inputs["pixel_values"][a:b], "image_grid_thw": grid[i : i + 1]}
             for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    return Sample(inputs, [items])


FAMILY = Family(
    model_type="qwen2_5_vl",
    models="Qwen2.5-VL",
    tower_attr="vision_config",
    auto_class="AutoModelForImageTextToText",
    encoders=(
        EncoderSpec(
            modality="vision", embeds="image", placeholder_attr="image_token_id", dynamic_axis="IMG_STATE",
            input_names=("pixel_values",), dynamic_axes={"pixel_values": {0: "MH", 1: "MW"}},
            build=lambda model: Qwen25VisionEncoder(model.model.visual), graph_inputs=_graph_inputs,
            reference=_reference, input_contract=_input_contract,
        ),
    ),
    decoder_inputs=lambda model: Qwen25VLDecoderInputs(model.config),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
)
