"""Qwen-VL specifics (Qwen2.5-VL, Qwen3-VL; test_families.py runs both end to end): grids
that are not whole attention windows, the reference's decoder IO, the in-graph 3-D
positions against Hugging Face's ``get_rope_index``, the DeepStack streams."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.multimodal.qwen2_5_vl import Qwen25VLDecoderInputs

NAME = "qwen2_5_vl"


def test_encoder_checked_at_two_grids_one_not_whole_windows(exported: Callable[[str], Any]) -> None:
    # Two different grids, one of them not a whole number of attention windows (2 x 2).
    shapes = [tuple(c.input_shape[:2]) for c in exported(NAME).encoder_checks]
    assert len(set(shapes)) == 2 and any(h % 2 or w % 2 for h, w in shapes)


def test_decoder_io_names(exported: Callable[[str], Any]) -> None:
    root = exported(NAME).export_dir
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    extra = ["image_embeddings", "video_embeddings", "image_grid_thw", "video_grid_thw", "rope_deltas"]
    assert decoder.input_names[-5:] == [f"in_{n}" for n in extra]
    assert decoder.output_names[-5:] == [f"out_{n}" for n in extra]
    manifest = json.loads((root / "multimodal.json").read_text())
    assert manifest["encoders"][0]["input"]["layout"] == ["MH", "MW", 2, 2, "patch_dim"]


@pytest.mark.parametrize("items", [
    [("image", (1, 10, 14))],
    [("image", (1, 10, 14)), ("image", (1, 6, 8))],
    [("image", (1, 4, 12)), ("video", (3, 4, 6)), ("image", (1, 8, 2)), ("image", (1, 2, 2))],
])
def test_positions_equal_get_rope_index(mm_checkpoint: Callable[..., Path],
                                        items: list[tuple[str, tuple[int, int, int]]]) -> None:
    """The graph's positions (past 0) and rope delta, for prompts with images and videos of
    various shapes between text, equal Hugging Face's; generation steps after them too."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(mm_checkpoint(NAME))
    model = transformers.Qwen2_5_VLModel._from_config(config)  # only get_rope_index is used: random weights
    token = {"image": config.image_token_id, "video": config.video_token_id}
    ids: list[int] = [5, 6]
    for kind, (t, h, w) in items:
        ids += [config.vision_start_token_id] + [token[kind]] * (t * h * w // 4) + [config.vision_end_token_id, 7]
    input_ids = torch.tensor([ids])
    grids = {kind: torch.tensor([g for k, g in items if k == kind], dtype=torch.int64).reshape(-1, 3)
             for kind in token}
    types = (input_ids == token["image"]).int() + 2 * (input_ids == token["video"]).int()
    inputs = Qwen25VLDecoderInputs(config)
    zero = torch.zeros((1, 1), dtype=torch.int64)
    positions, delta = inputs.positions(input_ids, 0, grids["image"], grids["video"], zero)
    expected, expected_delta = model.get_rope_index(
        input_ids, types, image_grid_thw=grids["image"] if len(grids["image"]) else None,
        video_grid_thw=grids["video"] if len(grids["video"]) else None)
    assert torch.equal(positions, expected) and torch.equal(delta, expected_delta)
    # Generation steps, fed the grids back: P + i + delta on all three axes.
    step, same = inputs.positions(torch.tensor([[7]]), len(ids), grids["image"], grids["video"], delta)
    assert torch.equal(step, (len(ids) + expected_delta).reshape(1, 1, 1).expand(3, 1, 1)) and torch.equal(same, delta)



def test_qwen3_vl_deepstack_streams_in_the_manifest_and_the_graphs(exported: Callable[[str], Any]) -> None:
    """Qwen3-VL (the same decoder inputs, plus DeepStack): one stream per vision block of
    deepstack_visual_indexes, out of the encoder, into the decoder, added after decoder
    layer i (the generation and the wrapper-equals-HF tests check the values)."""
    root = exported("qwen3_vl").export_dir
    manifest = json.loads((root / "multimodal.json").read_text())
    (encoder,) = manifest["encoders"]
    assert manifest["injection_layers"] == {"image": [0, 1]}
    assert encoder["deepstack"] == [
        {"layer": i, "name": f"out_image_deepstack_{i}", "feeds": f"in_image_deepstack_{i}",
         "shape": ["IMG_DEEP", 64], "dtype": "f32"} for i in range(2)]
    vision = TractArtefact.load(root / "vision" / "model.nnef.tgz")
    assert vision.output_names == ["out_image_embeddings", "out_image_deepstack_0", "out_image_deepstack_1"]
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    assert decoder.input_names[-2:] == ["in_image_deepstack_0", "in_image_deepstack_1"]
    assert decoder.output_names[-2:] == ["out_image_deepstack_0", "out_image_deepstack_1"]
