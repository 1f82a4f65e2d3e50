"""The LLM exporter's front ends (issue 25): ``dump_llm(front_end=)`` and
``fastnnef-llm --front-end``. Under ``"export"`` (and ``"auto"``, the default) the wrapper
is captured by ``torch.export`` on fake weights: the export reads no weight of the
checkpoint (the test bundles' PyTorch run is the only one that does), a model holding a
module kept whole by its extractor included."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fastnnef.llm.phases
from fastnnef.llm import dump_llm
from fastnnef.llm.cli import main
from fastnnef.tensor.offload import OffloadedTensor

FALLBACK = "front_end='auto': exported with the torch.jit.trace front end"


def _reads(monkeypatch: pytest.MonkeyPatch) -> dict[bool, list[str]]:
    """The checkpoint tensors materialized by dump_llm's export (``True``: its capture and
    conversion, or the writer's thread) and by the rest (``False``: the test bundles'
    PyTorch run, on the calling thread while the writer writes), by a spy around the real
    functions (both still run)."""
    reads: dict[bool, list[str]] = {True: [], False: []}
    exporting = [False]
    materialize = OffloadedTensor._materialize
    prepare = fastnnef.llm.phases.prepare_export

    def spied_materialize(self: OffloadedTensor) -> Any:
        reads[exporting[0] or threading.current_thread() is not threading.main_thread()].append(self.key)
        return materialize(self)

    def spied_prepare(*args: Any, **kwargs: Any) -> Any:
        exporting[0] = True
        try:
            return prepare(*args, **kwargs)
        finally:
            exporting[0] = False

    monkeypatch.setattr(OffloadedTensor, "_materialize", spied_materialize)
    monkeypatch.setattr(fastnnef.llm.phases, "prepare_export", spied_prepare)
    return reads


def test_the_export_reads_no_weight_under_torch_export(checkpoint: Callable[..., Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.export captures on fake tensors: the export call reads nothing (the Rust
    writer streams the weights), while the PyTorch run of the bundles reads them all."""
    reads = _reads(monkeypatch)
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("llama"), front_end="export")
    assert report.verified and all(c.ok for c in report.bundle_checks), report.summary()
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    assert reads[True] == []
    assert "lm_head.weight" in reads[False] and "model.layers.1.mlp.down_proj.weight" in reads[False], reads


@pytest.mark.parametrize("family", ["llama", "bamba"])
def test_auto_captures_with_torch_export(family: str, checkpoint: Callable[..., Path], tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """"auto" captures with torch.export, without falling back to the tracer: a plain
    decoder, and bamba, whose Mamba2 scan is kept whole by its extractor (its fake_forward
    computes one step, so the sequence axis stays dynamic). The fallback itself, and its
    reason logged once, are export_model_with_result's (tests/fx_graph/test_front_end_auto.py)."""
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        report = dump_llm(tmp_path / "out", local_dir=checkpoint(family))  # front_end="auto"
    assert report.verified and all(c.ok for c in report.bundle_checks), report.summary()
    assert FALLBACK not in caplog.text


def test_cli_front_end(checkpoint: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "out"), "--front-end", "export", "-nv"]) == 0
    assert (tmp_path / "out" / "model" / "model.nnef.tgz").is_file()
    with pytest.raises(SystemExit) as exited:
        main(["-d", str(checkpoint("llama")), "-e", str(tmp_path / "other"), "--front-end", "dynamo"])
    assert exited.value.code == 2 and "--front-end" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
