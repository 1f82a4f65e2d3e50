"""``fastnnef check``: exit codes, report on stderr, npz key matching, debug bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from test_check import X, mul_graph, write_artefact

from fastnnef.cli import check_cmd


def run_cli(argv: list[str]) -> int:
    # Through our own parser, so the test does not depend on the rest of the CLI.
    parser = argparse.ArgumentParser(prog="fastnnef")
    check_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return check_cmd.run(args)


def npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def test_match_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = write_artefact(tmp_path, mul_graph(), "tgz")
    ins, outs = npz(tmp_path / "in.npz", x=X), npz(tmp_path / "out.npz", y=X * 2)
    assert run_cli(["check", str(art), "--inputs", str(ins), "--outputs", str(outs)]) == 0
    assert "OK at tolerance approximate" in capsys.readouterr().out


def test_mismatch_exits_one_with_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = write_artefact(tmp_path, mul_graph())
    ins, outs = npz(tmp_path / "in.npz", x=X), npz(tmp_path / "out.npz", y=X * 2 + 1)
    code = run_cli(["check", str(art), "--inputs", str(ins), "--outputs", str(outs), "--tolerance", "very"])
    assert code == 1
    err = capsys.readouterr().err
    assert "MISMATCH at tolerance very" in err and "failing elements: 6 / 6" in err


def test_positional_npz_keys(tmp_path: Path) -> None:
    art = write_artefact(tmp_path, mul_graph(), "tar")
    ins, outs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(ins, X)  # arr_0
    np.savez(outs, X * 2)
    assert run_cli(["check", str(art), "--inputs", str(ins), "--outputs", str(outs), "--tolerance", "exact"]) == 0


def test_debug_bundle_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = write_artefact(tmp_path, mul_graph())
    ins, outs = npz(tmp_path / "in.npz", x=X), npz(tmp_path / "out.npz", y=X)
    bundle = tmp_path / "dbg.tgz"
    argv = ["check", str(art), "--inputs", str(ins), "--outputs", str(outs), "--debug-bundle", str(bundle)]
    assert run_cli(argv) == 1
    assert bundle.is_file() and f"debug bundle: {bundle}" in capsys.readouterr().err
    # Unusable inputs are an error (2), not a mismatch.
    assert run_cli(["check", str(tmp_path / "nope.tgz"), "--inputs", str(ins), "--outputs", str(outs)]) == 2
    assert run_cli(["check", str(art), "--inputs", str(tmp_path / "no.npz"), "--outputs", str(outs)]) == 2
    assert "no.npz does not exist" in capsys.readouterr().err
