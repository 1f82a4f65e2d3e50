"""The export's ``log_level`` applies to that export only: no global logging state
changes, and exports in two threads keep their own levels."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import torch
from torch import nn

from fastnnef import log
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _SignalsWhileTracing(nn.Module):
    """Sets ``tracing`` during its forward, then gives the other thread time to start."""

    def __init__(self, tracing: threading.Event) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.tracing = tracing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.tracing.set()
        time.sleep(0.5)  # the other export enters and sets its own level meanwhile
        return self.lin(x)


def test_log_level_is_per_export_and_per_thread(tmp_path: Path) -> None:
    logger = logging.getLogger("fastnnef")
    level_before = logger.level
    handler = _Records()
    logger.addHandler(handler)
    tracing = threading.Event()
    errors: list[BaseException] = []

    def export(name: str, model: nn.Module, level: int) -> None:
        try:
            export_model_to_nnef(model, torch.rand(2, 4), tmp_path / f"{name}.nnef",
                                 TractNNEF.latest(), log_level=level)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    verbose = threading.Thread(target=export, name="verbose",
                               args=("verbose", _SignalsWhileTracing(tracing), logging.INFO))
    quiet = threading.Thread(target=export, name="quiet", args=("quiet", nn.Linear(4, 4), logging.ERROR))
    try:
        verbose.start()
        assert tracing.wait(30)
        quiet.start()
        verbose.join()
        quiet.join()
    finally:
        logger.removeHandler(handler)
    assert not errors, errors
    by_thread = {t: [r for r in handler.records if r.threadName == t] for t in ("verbose", "quiet")}
    assert any(r.levelno == logging.INFO and "wrote" in r.getMessage() for r in by_thread["verbose"])
    assert not [r for r in by_thread["quiet"] if r.levelno < logging.ERROR]
    assert logger.level == level_before  # no global change


def test_outside_an_export_the_configured_level_applies() -> None:
    logger = log.get_logger("fastnnef.some_module")
    assert logger is logging.getLogger("fastnnef.some_module")
    parent = logging.getLogger("fastnnef")
    old = parent.level
    parent.setLevel(logging.WARNING)
    try:
        assert not logger.isEnabledFor(logging.INFO)
        with log.export_log_level(logging.DEBUG):
            assert logger.isEnabledFor(logging.DEBUG)
        assert not logger.isEnabledFor(logging.INFO)
    finally:
        parent.setLevel(old)
