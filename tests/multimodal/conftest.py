"""Tiny multimodal checkpoints (with their processors) saved once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests import helpers

pytest.importorskip("transformers")
# The families' image processors need Pillow, and Qwen-VL's processor torchvision.
pytest.importorskip("PIL")


@pytest.fixture(scope="session")
def mm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``mm_checkpoint(name, processor=True)`` -> a saved checkpoint directory, built once
    per session and argument set. Tests must not modify it."""
    from tests.multimodal.tiny import save

    made: dict[tuple[str, bool], Path] = {}

    def make(name: str, processor: bool = True) -> Path:
        key = (name, processor)
        if key not in made:
            made[key] = save(name, tmp_path_factory.mktemp(f"mm-{name}"), processor)
        return made[key]

    return make


@pytest.fixture(scope="session")
def exported(mm_checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[..., object]:
    """``exported(name)`` -> the report of ONE verified export of the tiny ``name`` per
    session (each test reads it; none modifies it)."""
    from fastnnef.multimodal import dump_multimodal

    reports: dict[str, object] = {}

    def make(name: str) -> object:
        if name not in reports:
            out = tmp_path_factory.mktemp(f"mm-out-{name}") / "export"
            reports[name] = dump_multimodal(out, local_dir=mm_checkpoint(name),
                                            front_end=helpers.FRONT_END)  # pytest's --front-end
        return reports[name]

    return make
