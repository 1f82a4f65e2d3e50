"""Model sources: a checkpoint directory (or a directory holding exactly one), and a model
id resolved in the local Hugging Face cache (a fake cache built here, selected through the
environment as users do; downloads into it: test_hub.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.llm import dump_llm
from fastnnef.llm.hub import hub_cache_dir
from fastnnef.llm.load import resolve_source

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _fake_cache(root: Path, repo: str, checkpoint: Path) -> Path:
    """The hub cache layout: models--org--name/{refs/main, snapshots/<commit>/files}."""
    storage = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(checkpoint, storage / "snapshots" / COMMIT)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    return storage / "snapshots" / COMMIT


def test_slug_from_hf_hub_cache(checkpoint: Callable[..., Path], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _fake_cache(tmp_path / "hub", "tiny-org/tiny-llama", checkpoint("llama", tokenizer=True))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_source("tiny-org/tiny-llama", None) == snapshot
    report = dump_llm(tmp_path / "out", model_slug="tiny-org/tiny-llama")
    generation = report.generation
    assert generation is not None and generation.tract_tokens == generation.torch_tokens


def test_slug_from_hf_home(checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _fake_cache(tmp_path / "home" / "hub", "tiny-org/tiny-gpt2", checkpoint("gpt2"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    assert resolve_source("tiny-org/tiny-gpt2", None) == snapshot


def test_slug_not_in_the_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(T2NErrorNotFoundFile, match=r"model 'meta-llama/Llama-3.2-1B' is not in the local Hugging Face "
                       r"cache \(.*hub\) and HF_HUB_OFFLINE is set: download it where the hub is reachable "
                       r"\(`hf download meta-llama/Llama-3.2-1B`\), unset HF_HUB_OFFLINE, or pass -d"):
        resolve_source("meta-llama/Llama-3.2-1B", None)
    assert not (tmp_path / "hub").exists()


def test_bad_slug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(T2NErrorInvalidArgument, match=r"'not a/valid id' is not a Hugging Face model id"):
        resolve_source("not a/valid id", None)


def test_directory_holding_one_checkpoint(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    nested = Path(shutil.copytree(checkpoint("llama"), tmp_path / "outer" / "llama"))
    (tmp_path / "outer" / "notes").mkdir()
    assert resolve_source(None, tmp_path / "outer") == nested
    shutil.copytree(checkpoint("llama"), tmp_path / "outer" / "llama-copy")
    with pytest.raises(T2NErrorNotFoundFile, match=r"several subdirectories hold one \(llama, llama-copy\)"):
        resolve_source(None, tmp_path / "outer")
