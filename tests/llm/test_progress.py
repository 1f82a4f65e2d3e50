"""Progress goes to a terminal only: phases, then one line rewritten with tensors, bytes
and throughput while the weights are written; nothing on a pipe or a file."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

from fastnnef.llm import dump_llm
from fastnnef.llm.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_export_shows_phases_and_tensor_progress(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    screen = Terminal()
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("llama"), progress=Progress.for_terminal(screen),
                      no_verify=True)
    text = screen.getvalue()
    assert text.startswith("fastnnef-llm: loading the checkpoint\n")
    for phase in ("tracing the model",
                  "writing the artefact, and running the model in PyTorch for the test bundles meanwhile",
                  f"done in {report.timings['total']:.1f} s: {report.model_path}"):
        assert f"fastnnef-llm: {phase}\n" in text
    final = re.search(r"\rwriting weights: (\d+)/(\d+) tensors, ([\d.]+ KiB) of ([\d.]+ KiB), [\d.]+ [KMG]?i?B/s\n",
                      text)
    assert final is not None and final.group(1) == final.group(2) and final.group(3) == final.group(4)
    assert int(final.group(1)) >= 21  # the llama's weights, at least


def test_verification_phase(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    screen = Terminal()
    dump_llm(tmp_path / "out", local_dir=checkpoint("gpt2"), progress=Progress.for_terminal(screen))
    assert "fastnnef-llm: verifying in tract: test bundles and greedy generation\n" in screen.getvalue()


def test_silent_when_not_a_terminal() -> None:
    pipe = io.StringIO()
    progress = Progress.for_terminal(pipe)
    progress.phase("loading")
    with progress.writing():
        progress.tensors(1, 1, 10, 10)
    assert not progress.enabled and pipe.getvalue() == ""


def test_redraws_are_throttled() -> None:
    screen = Terminal()
    progress = Progress.for_terminal(screen)
    with progress.writing():
        for i in range(1, 1001):
            progress.tensors(i, 1000, i * 2**20, 1000 * 2**20)
    lines = screen.getvalue().split("\r")[1:]
    assert 1 <= len(lines) < 100  # at most 10 redraws a second, plus the final line
    assert lines[-1].startswith("writing weights: 1000/1000 tensors, 1000.0 MiB of 1000.0 MiB, ")
