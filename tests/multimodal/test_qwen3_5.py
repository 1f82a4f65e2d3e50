"""Qwen3.5 specifics (test_families.py runs ``qwen3_5`` and ``qwen3_5_moe`` end to end): the
decoder's cache IO follows the layer types (a gated-delta-net layer's conv and recurrent
states, keys and values elsewhere), then Qwen2.5-VL's IO; the tower has no DeepStack."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fastnnef.check import TractArtefact

EXTRA = ["image_embeddings", "video_embeddings", "image_grid_thw", "video_grid_thw", "rope_deltas"]


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3_5_moe"])
def test_decoder_cache_follows_the_layer_types(exported: Callable[[str], Any], name: str) -> None:
    root = exported(name).export_dir
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    # tiny.py: layers linear, linear, full.
    cache = ["conv_0", "recurrent_0", "conv_1", "recurrent_1", "key_2", "value_2"]
    assert decoder.input_names == ["input_ids", *(f"in_cache_{c}" for c in cache), *(f"in_{n}" for n in EXTRA)]
    assert decoder.output_names == ["outputs", *(f"out_cache_{c}" for c in cache), *(f"out_{n}" for n in EXTRA)]
    # The generation step is fed the prompt's states back: not zeros any more.
    with np.load(root / "decoder" / "tests" / "text_generation_inputs.npz") as step:
        assert np.abs(step["in_cache_recurrent_0"]).max() > 0 and step["in_cache_key_2"].shape[2] > 0


@pytest.mark.parametrize("name", ["qwen3_5_moe", "qwen3_vl_moe"])
def test_moe_blocks_are_one_op_each(exported: Callable[[str], Any], name: str) -> None:
    """Qwen3.5-MoE's and Qwen3-VL-MoE's routers are tract_moe_ffn gate modes: each MoE
    block is one op (the families' end-to-end tests check the tokens)."""
    with tarfile.open(exported(name).export_dir / "decoder" / "model.nnef.tgz") as tar:
        member = tar.extractfile("graph.nnef")
        assert member is not None
        graph = member.read().decode()
    assert graph.count("tract_moe_ffn(") == 3  # tiny.py: 3 layers, each a MoE block


def test_encoder_has_no_deepstack(exported: Callable[[str], Any]) -> None:
    report = exported("qwen3_5")
    manifest = json.loads(report.manifest_path.read_text())
    (encoder,) = manifest["encoders"]
    assert [o["name"] for o in encoder["outputs"]] == ["out_image_embeddings"]
    assert not encoder.get("injection_layers")
    vision = TractArtefact.load(report.export_dir / "vision" / "model.nnef.tgz")
    assert vision.output_names == ["out_image_embeddings"]
