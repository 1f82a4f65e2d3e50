"""Stream an ``NNEFGraph`` into an artefact through the Rust sink, in canonical order.

Members: ``graph.nnef``, ``graph.quant`` (if any), then every variable's ``<label>.dat``
in byte order of the label, so two exports of one model give identical bytes. Weights go
to Rust as views of the torch storage, one at a time (no copy, GIL released).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path

from fastnnef.artefact import Artefact
from fastnnef.log import get_logger
from fastnnef.nnef.graph import NAlias, NNEFGraph, NOp
from fastnnef.nnef.payload import quantized_type_line
from fastnnef.nnef.writer import graph_text

log = get_logger(__name__)

#: Called after each tensor is written with (tensors done, tensors in all, bytes done,
#: bytes in all). Set by a caller around an export (fastnnef-llm's progress line); a
#: context variable, so concurrent exports in other threads are not affected.
TENSOR_PROGRESS: ContextVar[Callable[[int, int, int, int], None] | None] = ContextVar(
    "fastnnef_tensor_progress", default=None
)


class WriteStopped(Exception):
    """``write_artefact`` stopped between two tensors at its caller's request (the
    artefact is removed, as on any error)."""


def write_artefact(path: Path, fmt: str, compression_level: int, graph: NNEFGraph,
                   stop: threading.Event | None = None) -> Path:
    """Write ``graph`` to ``path`` as ``dir``/``tar``/``tgz``; return the final path.
    ``stop``: set from another thread, the writing ends before the next tensor
    (``WriteStopped``; nothing left behind)."""
    labels = sorted(graph.variables, key=lambda s: s.encode())
    total = sum(v.payload.nbytes for v in graph.variables.values())
    start = time.perf_counter()
    done, next_report = 0, total / 10
    for label in labels:  # checkpoint tensors fail (dtype, limits) before any byte is written
        graph.variables[label].payload.check(label)
    progress = TENSOR_PROGRESS.get()
    with Artefact(path, fmt, compression_level) as artefact:
        artefact.add_file("graph.nnef", graph_text(graph))
        quant = quant_text(graph)
        if quant:
            artefact.add_file("graph.quant", quant)
        for count, label in enumerate(labels, 1):
            if stop is not None and stop.is_set():
                raise WriteStopped(f"the writing of {path} was stopped")
            payload = graph.variables[label].payload
            payload.write(artefact, label)
            done += payload.nbytes
            if progress is not None:
                progress(count, len(labels), done, total)
            if total > 64 << 20 and done >= next_report:  # progress on long writes only
                log.info("writing %s: %d%% of %.1f MiB", path.name, 100 * done // total, total / 2**20)
                next_report += total / 10
    log.info("wrote %s (%d tensors, %.1f MiB) in %.2f s", artefact.path, len(labels),
             total / 2**20, time.perf_counter() - start)
    return Path(artefact.path or path)


def quant_text(graph: NNEFGraph) -> str:
    """``graph.quant``: one line per torch-quantized variable, then one per tensor of a
    quantized type that an op computes, graph outputs included (as tract's own writer does,
    so a reader sees every quantized tensor's scale and zero point); empty when none."""
    entries = [v.payload.quant_entry(v.tensor.name) for v in graph.variables.values()]
    for stmt in graph.body:
        computed = stmt.outputs if isinstance(stmt, NOp) else (stmt.tensor,) if isinstance(stmt, NAlias) else ()
        entries += [quantized_type_line(t.name, t.dtype) for t in computed]
    return "".join(e for e in entries if e is not None)
