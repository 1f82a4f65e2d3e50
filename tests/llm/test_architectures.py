"""Every tested family (``TESTED``, the README's table), from a tiny random checkpoint:
exported with its KV cache, every test bundle run in tract, and 16 greedy tokens generated
by tract with its own cache equal to Hugging Face's ``generate`` (its own cache classes
and masks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pytest

from fastnnef.llm import dump_llm
from fastnnef.llm.architectures import TESTED, families_markdown
from tests.llm.tiny import CONFIGS, model_type_of

README = Path(__file__).parents[2] / "README.md"


def _export(checkpoint: Path, out: Path, **kwargs: object) -> object:
    report = dump_llm(out, local_dir=checkpoint, **kwargs)  # type: ignore[arg-type]
    assert report.verified
    assert [c.name for c in report.bundle_checks] == ["export", "prompt", "prompt_with_past", "text_generation"]
    assert all(c.ok for c in report.bundle_checks), report.summary()
    generation = report.generation
    assert generation is not None and generation.exact_required
    assert len(generation.torch_tokens) == 16
    assert generation.tract_tokens == generation.torch_tokens, generation.summary()
    return report


def test_every_tested_family_has_a_tiny_config() -> None:
    assert {model_type_of(name) for name in CONFIGS} == set(TESTED)


def test_readme_table_is_generated_from_the_tested_families() -> None:
    text = README.read_text()
    found = re.search(r"<!-- tested-families:begin -->\n(.*?)\n<!-- tested-families:end -->", text, re.S)
    assert found is not None, "README.md lacks the tested-families markers"
    assert found.group(1) == families_markdown(), "regenerate with architectures.families_markdown()"


@pytest.mark.parametrize("model_type", sorted(TESTED))
def test_generation_matches_hugging_face(model_type: str, checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    variants = sorted(name for name in CONFIGS if model_type_of(name) == model_type)
    for name in variants:
        report = _export(checkpoint(name), tmp_path / name)
        assert report.model_type == model_type  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["llama", "mistral-window", "qwen2_moe"])
def test_sdpa_attention(name: str, checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """transformers' SDPA attention, exported decomposed."""
    _export(checkpoint(name), tmp_path / "out", attn_implementation="sdpa")


def test_reified_sdpa(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """--reify-sdpa-operator: attention as tract_transformers_sdpa, masks included."""
    import tarfile

    report = _export(checkpoint("mistral-window"), tmp_path / "out", reify_sdpa_operator=True)
    with tarfile.open(report.model_path) as tar:  # type: ignore[attr-defined]
        text = tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]
    assert "tract_transformers_sdpa(" in text
