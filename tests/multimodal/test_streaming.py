"""Multimodal checkpoints are streamed as the LLM exporter streams them: every weight (the
towers' and the decoder's) bound to the checkpoint file, none read at load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fastnnef.llm.load import load_checkpoint
from fastnnef.multimodal.families import FAMILIES
from fastnnef.tensor.offload import OffloadedTensor

# Checkpoints whose weights transformers converts at load (llm/load.py loads them in memory).
CONVERTED = {"qwen3_vl_moe": "transformers converts its fused expert tensors at load"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=CONVERTED[n])) if n in CONVERTED else n
    for n in sorted(FAMILIES)
])
def test_every_weight_streamed_from_the_checkpoint(mm_checkpoint: Callable[..., Path], name: str) -> None:
    checkpoint = load_checkpoint(mm_checkpoint(name), None, "eager", False, auto_class=FAMILIES[name].auto_class)
    assert checkpoint.streamed
    parameters = dict(checkpoint.model.named_parameters())
    assert parameters and all(isinstance(p, OffloadedTensor) for p in parameters.values())
    towers = [n for n in parameters if any(t in n for t in ("visual", "vision", "audio_tower"))]
    assert towers  # the towers' weights too
