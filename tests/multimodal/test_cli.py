"""``fastnnef-multimodal``: the LLM command line's flags, its entry points, an export."""

from __future__ import annotations

import runpy
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from fastnnef.llm.cli import build_parser as llm_build_parser
from fastnnef.multimodal.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_console_scripts_and_module_entry_point(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fastnnef-multimodal"] == scripts["t2n_export_multimodal_to_tract"] == "fastnnef.multimodal.cli:main"
    monkeypatch.setattr(sys, "argv", ["python -m fastnnef.multimodal", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("fastnnef.multimodal", run_name="__main__")
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: fastnnef-multimodal")
    # The LLM command line's flags, every one.
    llm_flags = set(llm_build_parser()._option_string_actions)
    assert llm_flags <= set(build_parser()._option_string_actions)
    assert {"-d", "-s", "-e", "-dt", "-c", "-nv", "-tt", "-iaed", "-dwtac"} <= llm_flags


def test_export_without_verification_then_refused_over_it(mm_checkpoint: Callable[..., Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["-d", str(mm_checkpoint("qwen2_5_vl")), "-e", str(out), "-nv", "-dwtac"]) == 0
    assert "not verified (no_verify)" in capsys.readouterr().out
    assert (out / "multimodal.json").is_file() and (out / "vision" / "model.nnef.tgz").is_file()
    assert (out / "decoder" / "config.json").is_file() and (out / "decoder" / "tokenizer.json").is_file()
    assert main(["-d", str(mm_checkpoint("qwen2_5_vl")), "-e", str(out)]) != 0
    assert "already exists" in capsys.readouterr().err


def test_one_source_flag_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-e", "x"]) == 2
    assert "give exactly one of -s/--model-slug and -d/--local-dir" in capsys.readouterr().err


def test_readme_lists_the_families() -> None:
    from fastnnef.multimodal.families import families_markdown

    assert families_markdown() in (ROOT / "README.md").read_text()
