"""Half precision, bf16 checkpoints and Q4_0 weights: the artefact's dtypes follow the
documented policy, every bundle passes in tract at the chosen tolerance (a failure fails
the export, whatever the dtype), and generation reports the first divergence and the
agreement rate (these engines round differently)."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorIOPytorchTractNotISO
from fastnnef.llm import dump_llm


def _generation_reported(report: object) -> None:
    generation = report.generation  # type: ignore[attr-defined]
    assert generation is not None and not generation.exact_required and generation.ok
    assert len(generation.tract_tokens) == len(generation.torch_tokens) == 16
    if generation.first_divergence is None:
        assert generation.tract_tokens == generation.torch_tokens and generation.agreement == 1.0
    else:
        i = generation.first_divergence
        assert generation.tract_tokens[:i] == generation.torch_tokens[:i]
        assert generation.tract_tokens[i] != generation.torch_tokens[i]
        assert 0.0 <= generation.agreement < 1.0
    assert "generation:" in report.summary()  # type: ignore[attr-defined]


def test_forced_f16(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("llama"), force_module_dtype="f16",
                      tract_check_io_tolerance="super")
    assert report.weight_dtype == "f16" and report.cache_dtype == "f16"
    artefact = TractArtefact.load(report.model_path)
    assert [dtype for dtype, _ in artefact.input_facts] == ["i64"] + ["f16"] * 4
    assert artefact.properties["as_float16"] == "1" and artefact.properties["forced_module_dtype"] == "f16"
    assert all(c.ok for c in report.bundle_checks), report.summary()
    _generation_reported(report)


def test_bf16_checkpoint_runs_in_f32(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """tract has no bf16: weights are widened exactly when written, caches are f32."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("qwen2", dtype=torch.bfloat16),
                      tract_check_io_tolerance="super")
    assert report.weight_dtype == "bf16" and report.cache_dtype == "f32"
    artefact = TractArtefact.load(report.model_path)
    assert [dtype for dtype, _ in artefact.input_facts] == ["i64"] + ["f32"] * 4
    assert artefact.properties["main_base_weight_dtype"] == "bf16"
    assert [c.name for c in report.bundle_checks] == ["export", "prompt", "prompt_with_past", "text_generation"]
    assert all(c.ok for c in report.bundle_checks), report.summary()
    _generation_reported(report)


def test_q4_0(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """Q4_0 linear weights: torch runs the dequantized blocks, tract the blocks."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("mistral"), compression_method="min_max_q4_0")
    props = TractArtefact.load(report.model_path).properties
    assert props["compression_method"] == props["compression_register_key"] == "min_max_q4_0"
    with tarfile.open(report.model_path) as tar:
        q_proj = tar.getmember("model.model.layers.0.self_attn.q_proj.weight.dat")
        assert q_proj.size == 128 + 32 * 32 // 32 * 18  # 18 bytes per block of 32 weights
    assert all(c.ok for c in report.bundle_checks), report.summary()
    _generation_reported(report)


def test_a_failed_bundle_fails_a_half_precision_export(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """f16 rounds differently in PyTorch and tract: tract's exact check cannot pass, and
    the export fails (it was a warning before) leaving nothing behind."""
    with pytest.raises(T2NErrorIOPytorchTractNotISO, match=r"differ from PyTorch's at tolerance exact on bundle"):
        dump_llm(tmp_path / "out", local_dir=checkpoint("llama"), force_module_dtype="f16",
                 tract_check_io_tolerance="exact")
    assert list(tmp_path.iterdir()) == []
