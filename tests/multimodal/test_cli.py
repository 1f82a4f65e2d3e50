"""``fastnnef-multimodal``: the LLM command line's flags (every reference flag accepted), its
entry points, exports, a tract binary's checks (--tract-specific-path)."""

from __future__ import annotations

import runpy
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from fastnnef.check import TractArtefact
from fastnnef.llm.cli import build_parser as llm_build_parser
from fastnnef.multimodal.cli import build_parser, main
from tests.llm.fake_hub import online_hub
from tests.llm.test_cli_parity import EVERY_FLAG, fake_tract

ROOT = Path(__file__).resolve().parents[2]


def test_console_scripts_and_module_entry_point(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert (scripts["fastnnef-multimodal"] == scripts["t2n_export_multimodal_to_tract"]
            == "fastnnef.multimodal.cli:script")
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


def test_every_reference_flag_and_tract_path_without_verification(
    mm_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    """Every torch_to_nnef_llm flag at once; with -nv, --tract-specific-path only sets the
    target version (the binary is asked its version, no check runs)."""
    binary, log = fake_tract(tmp_path, "0.23.0")
    out = tmp_path / "out"
    assert main(["-d", str(mm_checkpoint("qwen2_5_vl")), "-e", str(out), *EVERY_FLAG,
                 "--export-dir-struct", "deep", "--tract-specific-path", str(binary)]) == 0
    assert not log.exists()
    assert TractArtefact.load(out / "decoder" / "model.nnef.tgz").properties["tract_target_version"] == "0.23.0"


def test_tract_specific_path_checks_the_encoder_and_every_decoder_bundle(
    mm_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary, log = fake_tract(tmp_path, "0.23.8")
    out = tmp_path / "out"
    assert main(["-d", str(mm_checkpoint("qwen2_5_vl")), "-e", str(out), "--tract-specific-path", str(binary)]) == 0
    checked = [line for line in capsys.readouterr().out.splitlines() if line.startswith(str(binary))]
    decoder_modes = [f"decoder {b.rsplit('_inputs.npz', 1)[0]}" for b in
                     sorted(p.name for p in (out / "decoder" / "tests").glob("*_inputs.npz"))]
    assert sorted(checked) == sorted(f"{binary} {name}: ok" for name in ["vision export", *decoder_modes])
    commands = [line.split() for line in log.read_text().splitlines()]
    bundles = [c[c.index("--input-from-bundle") + 1] for c in commands]
    assert bundles[0].endswith("/vision/tests/export_inputs.npz") and len(bundles) == len(checked)
    assert all(c[-2:] == ["--approx", "approximate"] for c in commands)


def test_a_tract_binary_rejecting_a_bundle_leaves_nothing(
    mm_checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary, _ = fake_tract(tmp_path, "0.23.8", exit_code=1)
    assert main(["-d", str(mm_checkpoint("qwen2_5_vl")), "-e", str(tmp_path / "out"),
                 "--tract-specific-path", str(binary)]) == 2
    assert "exited with code 1:\nfake tract: mismatch" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.txt", "tract"]


def test_model_slug_downloads(mm_checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """-s fetches the checkpoint (with its processor) from the hub (llm/hub.py; served on
    127.0.0.1 here), and a model the hub does not have is a clear error."""
    source = mm_checkpoint("qwen2_5_vl")
    with online_hub(tmp_path / "cache", monkeypatch) as hub:
        hub.add("tiny-org/tiny-qwen-vl", source)
        assert main(["-s", "tiny-org/tiny-qwen-vl", "-e", str(tmp_path / "out"), "-nv"]) == 0
        assert hub.downloads() == sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file())
        assert (tmp_path / "out" / "multimodal.json").is_file()
        assert main(["-s", "tiny-org/absent", "-e", str(tmp_path / "absent")]) == 2
    assert f"model 'tiny-org/absent' was not found on {hub.url}" in capsys.readouterr().err
    assert not (tmp_path / "absent").exists()
