"""``fastnnef-llm`` (llm/cli.py): the reference's flags, offline; errors as messages with
exit code 2. (Named apart from tests/test_cli.py: pytest needs unique basenames.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import fastnnef
from fastnnef.llm.cli import UNSUPPORTED_FLAGS, build_parser, main


def test_export_verify_and_display(checkpoint: Callable[..., Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    source = checkpoint("llama", tokenizer=True)
    capsys.readouterr()  # saving the checkpoint may print transformers' progress bars
    code = main(["-d", str(source), "-e", str(out), "-td", "-dwtac", "-sgts", "4",
                 "-n", "numeric", "-tt", "very"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0] == "prompt: 'A lighthouse keeper kept'"  # -sgts 4 tokens of the sample text
    assert lines[1].startswith("torch:  ") and lines[2].startswith("tract:  ") and lines[1][8:] == lines[2][8:]
    assert f"exported llama (26,784 parameters, f32) to {out}" in lines
    assert "generation: 16 greedy tokens identical in tract and PyTorch" in lines
    assert captured.err == ""  # not a terminal: no progress, and quiet logs
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "model" / "config.json").is_file()


def test_alias_and_module_entry_points(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    import tomllib

    scripts = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fastnnef-llm"] == scripts["t2n_export_llm_to_tract"] == "fastnnef.llm.cli:main"
    monkeypatch.setattr("sys.argv", ["python -m fastnnef.llm", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("fastnnef.llm", run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: fastnnef-llm")


def test_choices_come_from_the_enums_and_registry(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "-dt {f32,f16,bf16}" in text
    assert "{min_max_q4_0,min_max_q4_0_all,min_max_q4_0_with_embeddings,min_max_q4_0_with_embeddings_99}" in text
    assert "--export-dir-struct {deep,flat}" in text
    assert "{exact,approximate,close,very,super,ultra}" in text
    assert "tested model types: apertus, arcee, codegen, cohere, cohere2" in text


@pytest.mark.parametrize("flag", sorted(UNSUPPORTED_FLAGS))
def test_reference_only_flags_are_explained(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-s", "x/y", "-e", "out", flag, "1"]) == 2
    assert capsys.readouterr().err == (
        f"fastnnef-llm: error: {flag} (a torch_to_nnef_llm flag) is not available in fastnnef-llm: "
        f"{UNSUPPORTED_FLAGS[flag]}\n"
    )


def test_errors_are_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-d", str(tmp_path / "nothing"), "-e", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"fastnnef-llm: error: T2NErrorNotFoundFile: checkpoint directory {tmp_path / 'nothing'} does not exist\n"
    )
    assert main(["-e", str(tmp_path / "out")]) == 2
    assert "give exactly one of -s/--model-slug and -d/--local-dir" in capsys.readouterr().err
    assert main(["-d", "x", "-e", "out", "--compression-registry", "nowhere.REGISTRY"]) == 2
    assert "--compression-registry: cannot import 'nowhere'" in capsys.readouterr().err


def test_parser_defaults_are_the_reference_ones() -> None:
    args = build_parser().parse_args(["-s", "a/b", "-e", "out"])
    assert (args.naming_scheme, args.num_logits_to_keep, args.export_dir_struct, args.sample_generation_total_size,
            args.tract_check_io_tolerance, args.attn_implementation) == (
        "natural_verbose_camel", 1, "deep", 6, "approximate", "auto")
    assert args.trust_remote_code is False  # the reference trusts remote code by default; fastnnef does not


def test_dynamic_logits_to_keep_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["-s", "a/b", "-e", "out", "--num-logits-to-keep", "dynamic"])
    assert "'dynamic' (logits_to_keep as a runtime input) is not supported yet" in capsys.readouterr().err


def test_a_real_process_on_a_pipe_is_quiet(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """As a user runs it: in its own process (no test harness owning the root logger),
    stderr a pipe, no -v: nothing but the result on stdout; with -v, the steps are logged."""
    source, env = checkpoint("llama"), {**os.environ, "PYTHONPATH": str(Path(fastnnef.__file__).parents[1])}
    quiet = subprocess.run([sys.executable, "-m", "fastnnef.llm", "-d", str(source), "-e", str(tmp_path / "a"), "-nv"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert f"to {tmp_path / 'a'}" in quiet.stdout
    verbose = subprocess.run([sys.executable, "-m", "fastnnef.llm", "-d", str(source), "-e", str(tmp_path / "b"),
                              "-nv", "-v"], capture_output=True, text=True, env=env, timeout=600)
    assert verbose.returncode == 0, verbose.stderr
    assert "INFO" in verbose.stderr
