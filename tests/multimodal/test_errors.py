"""Bad input for fastnnef-multimodal: a clear fastnnef error, raised before anything is
written, and no staging directory left."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile, T2NErrorNotImplemented
from fastnnef.multimodal import dump_multimodal
from fastnnef.multimodal.families import FAMILIES

NAME = "qwen2_5_vl"


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / "ckpt"))


def _fails(tmp_path: Path, error: type, match: str, **kwargs: Any) -> None:
    out = tmp_path / "out" / "mm"
    with pytest.raises(error, match=match):
        dump_multimodal(out, **kwargs)
    assert not out.exists()
    assert not (out.parent.exists() and list(out.parent.iterdir()))  # no staging directory left


def test_text_only_family_is_refused_with_the_supported_list(tmp_path: Path) -> None:
    import transformers

    directory = tmp_path / "llama"
    transformers.LlamaConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                             vocab_size=32).save_pretrained(directory)
    supported = ", ".join(sorted(FAMILIES))
    _fails(tmp_path, T2NErrorNotImplemented, r"model_type 'llama' is not a multimodal family .*supported: "
           + r".*".join(sorted(FAMILIES)) + r".* fastnnef-llm", local_dir=directory)
    assert supported


def test_no_vision_config(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(mm_checkpoint(NAME), tmp_path)
    config = json.loads((directory / "config.json").read_text())
    del config["vision_config"]
    (directory / "config.json").write_text(json.dumps(config))
    _fails(tmp_path, T2NErrorInvalidArgument, r"config\.json has no vision_config: it holds no vision tower",
           local_dir=directory)


def test_processor_missing(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    _fails(tmp_path, T2NErrorNotFoundFile, r"has no processor \(processor_config\.json or "
           r"preprocessor_config\.json\).*processor\.save_pretrained", local_dir=mm_checkpoint(NAME, processor=False))


def test_existing_output_is_left_untouched(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(T2NErrorInvalidArgument, match=r"export directory .*taken already exists.*-iaed"):
        dump_multimodal(out, local_dir=mm_checkpoint(NAME))
    assert [p.name for p in tmp_path.iterdir()] == ["taken"] and [p.name for p in out.iterdir()] == ["keep.txt"]


def test_another_familys_processor(mm_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(mm_checkpoint(NAME), tmp_path)
    for path in directory.iterdir():
        if path.name.startswith(("processor", "preprocessor", "tokenizer")):
            path.unlink()
    for path in mm_checkpoint("idefics3").iterdir():
        if path.name.startswith(("processor", "preprocessor", "tokenizer")):
            shutil.copy(path, directory / path.name)
    _fails(tmp_path, T2NErrorInvalidArgument, r"processor in .* \(Idefics3Processor\) cannot build the qwen2_5_vl "
           r"sample prompt", local_dir=directory)
