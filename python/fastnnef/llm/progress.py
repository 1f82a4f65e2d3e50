"""Progress of a long export, shown on a terminal only.

Each phase gets a line; while weights are written, one line is rewritten in place with
the tensor count, the bytes written and the throughput. When the stream is not a
terminal (CI logs, pipes, tests) nothing is printed: progress bars never end up in
files. With INFO logs on (``-v``), phases go to the log instead.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from fastnnef.log import get_logger
from fastnnef.nnef.serialize import TENSOR_PROGRESS

log = get_logger("fastnnef.llm")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop always returns


class Progress:
    """Phase lines and a live tensor-writing line on ``stream``, if enabled."""

    def __init__(self, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._started = 0.0
        self._last_draw = 0.0

    @classmethod
    def for_terminal(cls, stream: TextIO | None = None) -> Progress:
        """Enabled when ``stream`` (default stderr) is a terminal."""
        stream = stream or sys.stderr
        return cls(bool(getattr(stream, "isatty", lambda: False)()), stream)

    def phase(self, text: str) -> None:
        """A phase line on the terminal; logged instead when INFO logs are on (-v)."""
        if log.isEnabledFor(logging.INFO):
            log.info("%s", text)
        elif self.enabled:
            self.stream.write(f"fastnnef-llm: {text}\n")
            self.stream.flush()

    def tensors(self, done: int, total: int, done_bytes: int, total_bytes: int) -> None:
        """One update of the writing line (redrawn at most 10 times a second)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        rate = done_bytes / max(now - self._started, 1e-9)
        line = (f"\rwriting weights: {done}/{total} tensors, {_size(done_bytes)} of {_size(total_bytes)}, "
                f"{_size(rate)}/s")
        self.stream.write(line + ("\n" if done == total else ""))
        self.stream.flush()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Report every tensor written by exports inside the block."""
        self._started = time.perf_counter()
        token = TENSOR_PROGRESS.set(self.tensors)
        try:
            yield
        finally:
            TENSOR_PROGRESS.reset(token)
