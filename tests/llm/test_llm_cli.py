"""``fastnnef-llm`` (llm/cli.py): the reference's flags, offline; errors as messages with
exit code 2. (Named apart from tests/cli/test_cli.py: pytest needs unique basenames.)"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import fastnnef
from fastnnef.check import TractArtefact
from fastnnef.llm import architectures
from fastnnef.llm.cli import NOT_APPLICABLE, build_parser, main
from tests.llm.test_cli_parity import fake_tract


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
    from importlib.metadata import entry_points

    # The installed console scripts (pyproject.toml's [project.scripts], as pip registered them).
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts["fastnnef-llm"] == scripts["t2n_export_llm_to_tract"] == "fastnnef.llm.cli:script"
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
    assert f"tested model types: {architectures.tested_list()}" in text


def test_tract_specific_path_checks_every_bundle_with_the_flags_its_version_knows(
    checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary, log = fake_tract(tmp_path, "0.21.13")
    out = tmp_path / "out"
    assert main(["-d", str(checkpoint("llama")), "-e", str(out), "--tract-specific-path", str(binary),
                 "-tt", "very"]) == 0
    lines = capsys.readouterr().out.splitlines()
    modes = ["export", "prompt", "prompt_with_past", "text_generation"]
    assert [line for line in lines if line.startswith(str(binary))] == [f"{binary} {m}: ok" for m in modes]
    commands = [line.split() for line in log.read_text().splitlines()]
    assert [c[c.index("--input-from-bundle") + 1].rsplit("/", 1)[1] for c in commands] == \
        [f"{m}_inputs.npz" for m in modes]
    for command in commands:
        assert command[1:6] == ["--nnef-tract-core", "--nnef-tract-pulse", "--nnef-tract-extra", "-O", "run"]
        assert command[-3:] == ["--allow-float-casts", "--approx", "very"]  # no --nnef-tract-transformers
    assert TractArtefact.load(out / "model" / "model.nnef.tgz").properties["tract_target_version"] == "0.21.13"


def test_a_tract_binary_rejecting_a_bundle_fails_the_export(
    checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary, _ = fake_tract(tmp_path, "0.23.8", exit_code=1)
    out = tmp_path / "out"
    assert main(["-d", str(checkpoint("llama")), "-e", str(out), "--tract-specific-path", str(binary)]) == 2
    err = capsys.readouterr().err
    assert "T2NErrorIOPytorchTractNotISO" in err and "--nnef-tract-transformers" in err
    assert "exited with code 1:\nfake tract: mismatch" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.txt", "tract"]  # nothing left behind


def test_tract_specific_path_and_version_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["-s", "a/b", "-e", "out", "--tract-specific-path", "t", "--tract-specific-version", "0.21.13"])
    assert "not allowed with argument --tract-specific-path" in capsys.readouterr().err


def test_tract_specific_version_is_the_target(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    assert main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "out"), "--tract-specific-version",
                 "0.22.0", "-nv"]) == 0
    props = TractArtefact.load(tmp_path / "out" / "model" / "model.nnef.tgz").properties
    assert props["tract_target_version"] == "0.22.0"


def test_reference_flags_without_effect_are_accepted(
    checkpoint: Callable[..., Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flags = ["--hf-download-n-retries", "3", "--device-map", "t2n_offload_disk", "-mp", "--upcast-quant", "any",
             "--transformers-experts-implementation", "batched_mm", "-idt", "f32"]
    with caplog.at_level(logging.INFO, logger="fastnnef.llm"):
        assert main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "out"), "-nv", "-v", *flags]) == 0
    for dest, reason in NOT_APPLICABLE.items():
        assert f"--{dest.replace('_', '-')} ignored: {reason}" in caplog.text


def test_force_inputs_dtype_other_than_the_models_is_explained(
    checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "out"), "-idt", "f16"]) == 2
    assert "-idt/--force-inputs-dtype f16: the cache inputs take the model's dtype, f32 here; load the model in " \
        "f16 with -dt/--force-module-dtype instead" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failed_check_exits_non_zero(checkpoint: Callable[..., Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """phi3 as an untested family (the long-rope recompute unknown): generation diverges."""
    from fastnnef.llm import architectures

    monkeypatch.setattr(architectures, "TESTED", {k: v for k, v in architectures.TESTED.items() if k != "phi3"})
    assert main(["-d", str(checkpoint("phi3-longrope")), "-e", str(tmp_path / "out")]) == 2
    assert "greedy generation in tract differs from Hugging Face's" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


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
