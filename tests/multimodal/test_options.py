"""-c and -dt on a multimodal export: the decoder's weights compressed, the towers left as
they are (as in the reference); a half-precision export verified at a tolerance that fits
it, its generation reported, not gated (as fastnnef-llm does)."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

from fastnnef.multimodal import dump_multimodal


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_q4_0_compresses_the_decoder_only(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    report = dump_multimodal(tmp_path / "out", local_dir=mm_checkpoint("idefics3"), compression_method="min_max_q4_0")
    assert report.verified and all(b.ok for b in report.bundle_checks) and all(c.ok for c in report.encoder_checks)
    assert report.generation is not None and not report.generation.exact_required
    decoder = _members(report.decoder_path)
    vision = _members(report.encoder_paths["vision"])
    # [128, 64] linear weights: Q4_0 blocks (18 bytes per 32 values) + the 128-byte header,
    # against 4 bytes per value in f32.
    gate = decoder["model.model.text_model.layers.0.mlp.gate_proj.weight.dat"]
    assert len(gate) == 128 + 128 * 64 // 32 * 18
    fc1 = vision["vision_model.encoder.layers.0.mlp.fc1.weight.dat"]  # [64, 32] in f32
    assert len(fc1) == 128 + 64 * 32 * 4


def test_f16_export_verified_at_its_tolerance(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    report = dump_multimodal(tmp_path / "out", local_dir=mm_checkpoint("qwen2_5_vl"), force_module_dtype="f16",
                             tract_check_io_tolerance="ultra")
    assert report.weight_dtype == "f16" and report.inputs_dtype == "f16"
    assert all(c.ok for c in report.encoder_checks) and all(b.ok for b in report.bundle_checks)
    assert report.generation is not None and not report.generation.exact_required
    assert len(report.generation.tract_tokens) == 16


def test_tied_lm_head_and_token_embedding_written_once(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """The decoder reads the token embedding twice (the splice's embeddings, the tied LM
    head): one variable, one .dat."""
    report = dump_multimodal(tmp_path / "out", local_dir=mm_checkpoint("idefics3-tied"))
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    members = _members(report.decoder_path)
    assert [n for n in members if "embed_tokens" in n or "lm_head" in n] == [
        "model.model.text_model.embed_tokens.weight.dat"]
