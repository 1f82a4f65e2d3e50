"""The ``fastnnef`` command line: demo (the README's main job), export, inspect, ops."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastnnef.cli import main
from tests.helpers import TRACER_ALLOWED


def test_demo_exports_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kws.nnef.tgz"
    assert main(["demo", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.is_file()
    assert "checked in-process by tract" in text
    assert "mels: f32[1, 40, T]" in text
    assert "dynamic axis T: ran the artefact at T=123" in text


def test_ops_lists_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    kinds = {line.split()[0] for line in lines}
    assert {"aten::linear", "aten::matmul", "aten::view"} <= kinds
    linear = next(line for line in lines if line.startswith("aten::linear "))
    assert "aten::linear(Tensor input, Tensor weight" in linear


def _factory() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.ReLU()), (torch.rand(2, 6),)


def test_export_from_factory_then_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cli_factory_mod", sys.modules[__name__])
    out = tmp_path / "m.nnef.tgz"
    code = main(["export", "cli_factory_mod:_factory", "-o", str(out), "--compression-level", "3",
                 "--input-names", "x", "--output-names", "y", "--no-identity-properties"])
    assert code == 0 and out.is_file()
    capsys.readouterr()
    assert main(["inspect", str(out), "--tensors"]) == 0
    text = capsys.readouterr().out
    assert "x: f32[2, 6]" in text and "y: f32[2, 3]" in text
    assert "0.weight: f32[3, 6] 72 B" in text
    assert "hostname" not in text


@TRACER_ALLOWED  # --front-end jit asks for the tracer
def test_export_front_end_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """--front-end (default auto) reaches export_model_to_nnef; the same graph either way."""
    monkeypatch.setitem(sys.modules, "cli_factory_mod", sys.modules[__name__])
    written = {}
    for front_end in ("auto", "jit"):
        out = tmp_path / f"{front_end}.nnef"
        assert main(["export", "cli_factory_mod:_factory", "-o", str(out), "--front-end", front_end,
                     "--no-identity-properties"]) == 0
        written[front_end] = (tmp_path / f"{front_end}.nnef.tar").read_bytes()
    assert written["auto"] == written["jit"]
    assert main(["export", "cli_factory_mod:_factory", "-o", str(tmp_path / "fx.nnef"), "--front-end", "fx"]) == 2
    assert "front_end must be one of ('auto', 'export', 'jit'), got 'fx'" in capsys.readouterr().err


@TRACER_ALLOWED  # a TorchScript file: only the tracer runs it
def test_export_torchscript_file(tmp_path: Path) -> None:
    model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Sigmoid()).eval())
    src = tmp_path / "m.jit.pt"
    torch.jit.save(model, str(src))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.random.rand(3, 4).astype(np.float32))
    out = tmp_path / "m.nnef"
    assert main(["export", str(src), "--inputs", str(inputs), "-o", str(out)]) == 0
    assert (tmp_path / "m.nnef.tar").is_file()


def test_export_bad_source_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "nowhere.pt", "-o", str(tmp_path / "m.nnef")]) == 2
    assert "neither an existing file nor 'pkg.module:factory'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
