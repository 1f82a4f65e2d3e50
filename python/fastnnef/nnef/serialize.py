"""Stream an ``NNEFGraph`` into an artefact through the Rust sink, in canonical order.

Members: every variable's ``<label>.dat``, first those of the tensors written during the
capture (``EarlyFiles``: the module's parameters, and for a directory its buffers) that
the graph writes the same, in the module's order, then the others in byte order of the
label, then ``graph.nnef`` and ``graph.quant`` (if any): two exports of one model give
identical bytes. Weights go to Rust as views of the torch storage (no copy,
GIL released): one at a time into an archive, ``DIR_WRITERS`` files at a time into a
directory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextvars import ContextVar
from pathlib import Path
from typing import NamedTuple

import torch

from fastnnef.artefact import PLAIN_ENCODINGS, Artefact
from fastnnef.log import get_logger
from fastnnef.nnef.graph import NAlias, NNEFGraph, NOp
from fastnnef.nnef.payload import DATUM_TYPES, OffloadedPayload, PlainPayload, quantized_type_line
from fastnnef.nnef.writer import graph_text
from fastnnef.tensor.offload import OffloadedTensor

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
                   stop: threading.Event | None = None, early: EarlyFiles | None = None,
                   past_cache: bool = False) -> Path:
    """Write ``graph`` to ``path`` as ``dir``/``tar``/``tgz``; return the final path.
    ``stop``: set from another thread, the writing ends before the next tensor
    (``WriteStopped``; nothing left behind). ``early``: tensor files written ahead
    (``EarlyFiles``), kept where the graph writes the same. ``past_cache``: large files
    past the page cache (``Artefact``), for an artefact nothing reads right after."""
    labels = sorted(graph.variables, key=lambda s: s.encode())
    ahead = early.settle(graph) if early is not None else Ahead(None, [], [])
    total = sum(v.payload.nbytes for v in graph.variables.values())
    start = time.perf_counter()
    report = _Progress(path, len(labels), total)
    try:
        for label in labels:  # checkpoint tensors fail (dtype, limits) before any byte is written
            graph.variables[label].payload.check(label)
    except BaseException:
        if ahead.artefact is not None:
            ahead.artefact.abort()
        raise
    artefact = ahead.artefact or Artefact(path, fmt, compression_level, past_cache)
    with artefact:
        for label in ahead.kept:
            report(graph.variables[label].payload.nbytes)
        first = frozenset(ahead.first)
        labels = ahead.first[len(ahead.kept):] + [label for label in labels if label not in first]
        if fmt == "dir":
            _write_files_side_by_side(artefact, graph, labels, path, stop, report)
        else:
            for label in labels:
                _check_not_stopped(stop, path)
                payload = graph.variables[label].payload
                payload.write(artefact, label)
                report(payload.nbytes)
        artefact.add_file("graph.nnef", graph_text(graph))
        quant = quant_text(graph)
        if quant:
            artefact.add_file("graph.quant", quant)
    log.info("wrote %s (%d tensors, %.1f MiB; %d written ahead) in %.2f s", artefact.path, report.count,
             total / 2**20, len(ahead.kept), time.perf_counter() - start)
    return Path(artefact.path or path)


class Ahead(NamedTuple):
    """What ``EarlyFiles.settle`` leaves for the graph's writing: the artefact with the
    files it keeps (``None``: a fresh one is written), the labels kept (in the order
    written), and the labels the artefact holds first, before the graph's others in byte
    order: the list written ahead less what the graph writes otherwise; ``kept`` is a
    prefix of it."""

    artefact: Artefact | None
    kept: list[str]
    first: list[str]


class EarlyFiles:
    """Tensor files written ahead, on a thread of their own, while the model is still being
    captured (Python, mostly under the GIL; the writing is Rust, without it): the module's
    parameters (and a directory's buffers) under their paths (the ``.dat`` labels whatever
    the naming scheme), in the module's order, each as the graph writes it by default:
    a tensor in memory in its dtype's encoding, from its memory (never a copy); a weight
    still in its checkpoint streamed from the file in its dtype's. ``settle`` stops the
    writing after the file in progress and keeps what the graph's variable of that label
    writes the same (``_written_as``: the same memory, layout, dtype and version counter,
    so an in-place change since shows; or the same checkpoint tensor in the same
    encoding). A directory's other files are removed. An archive is one stream that cannot
    drop a member, and its order must not depend on how far the writing got: it holds the
    list's tensors that the graph writes the same first, whatever was written ahead, so it
    is kept when what was written is a prefix of those, and written afresh otherwise.
    ``abort`` (or an export that fails) removes everything."""

    def __init__(self, path: Path, fmt: str, compression_level: int, tensors: list[tuple[str, torch.Tensor]],
                 past_cache: bool = False) -> None:
        self._artefact = Artefact(path, fmt, compression_level, past_cache)
        self._archive = fmt != "dir"
        self._tensors = tensors
        self._written: dict[str, _Identity] = {}
        self._failed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="fastnnef-early", daemon=True)
        self._thread.start()

    @staticmethod
    def writable(tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is written ahead: a plain strided CPU tensor of a dtype with an
        encoding (not a tensor subclass, a quantized or complex one, or one with lazy
        conjugate or negative bits), or a whole checkpoint tensor that streams in its
        dtype's encoding (not Q4_0, not packed, not composed of several)."""
        if type(tensor) is OffloadedTensor:
            return not (tensor.q4_0 or tensor.packed) and tensor.streams_as(DATUM_TYPES[tensor.dtype])
        return (type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.device.type == "cpu"
                and tensor.layout == torch.strided and tensor.numel() > 0
                and (tensor.dtype in PLAIN_ENCODINGS or tensor.dtype == torch.bfloat16)
                and not tensor.is_conj() and not tensor.is_neg())

    def _write(self) -> None:
        try:
            for label, tensor in self._tensors:
                if self._stop.is_set():
                    return
                identity = _ahead_identity(tensor)  # taken before the bytes are read: a change meanwhile shows
                if isinstance(tensor, OffloadedTensor):
                    self._artefact.add_offloaded(label, tensor, DATUM_TYPES[tensor.dtype])
                else:
                    self._artefact.add_tensor(label, tensor)
                self._written[label] = identity
        except Exception:  # noqa: BLE001 - written ahead only: the graph's own writing reports
            # whatever is wrong with a tensor, from a fresh artefact.
            log.debug("writing tensors ahead stopped", exc_info=True)
            self._failed = True

    def settle(self, graph: NNEFGraph) -> Ahead:
        """Stop the writing ahead; what it leaves for ``graph``'s writing (``Ahead``)."""
        def graph_writes_the_same(label: str, identity: _Identity) -> bool:
            variable = graph.variables.get(label)
            return variable is not None and _graph_writes(variable.payload) == identity

        self._stop.set()
        self._thread.join()
        first = [label for label, tensor in self._tensors if graph_writes_the_same(label, _ahead_identity(tensor))]
        kept = [label for label, identity in self._written.items() if graph_writes_the_same(label, identity)]
        if not self._archive:
            if self._failed:
                self._artefact.abort()
                return Ahead(None, [], [])
            for label in self._written.keys() - set(kept):
                self._artefact.remove(f"{label}.dat")
            return Ahead(self._artefact, kept, kept)
        if self._failed or len(kept) < len(self._written) or kept != first[: len(kept)]:
            self._artefact.abort()
            if not self._failed:
                log.info("the graph writes %d of the %d tensors written ahead otherwise: the archive is written "
                         "again from its start", len(self._written) - len(kept), len(self._written))
            return Ahead(None, [], first)
        return Ahead(self._artefact, kept, first)

    def abort(self) -> None:
        """Stop and remove everything written. Idempotent."""
        self._stop.set()
        self._thread.join()
        self._artefact.abort()


_Identity = tuple[object, ...]


def _written_as(tensor: torch.Tensor, encoding: str | None) -> _Identity:
    """What a file written from ``tensor`` as ``encoding`` holds: for a checkpoint tensor,
    its file's tensor (the checkpoint object, kept alive by the tensor), dtypes and the
    encoding; for one in memory, its memory, dtype, layout and version (bumped by every
    in-place change)."""
    if isinstance(tensor, OffloadedTensor):
        return tensor.checkpoint, tensor.key, tuple(tensor.shape), tensor.stored_dtype, tensor.dtype, encoding
    return tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), tensor._version, encoding


def _ahead_identity(tensor: torch.Tensor) -> _Identity:
    """What ``EarlyFiles`` writes for ``tensor``: a checkpoint tensor in its dtype's
    encoding, one in memory as it is."""
    return _written_as(tensor, DATUM_TYPES[tensor.dtype] if isinstance(tensor, OffloadedTensor) else None)


def _graph_writes(payload: object) -> _Identity | None:
    """What the graph writes for ``payload``, where a file written ahead can hold it (the
    identity holds the encoding, dtypes and shape, so a Q4_0, packed or re-rounded form of
    a checkpoint tensor never equals what was written ahead)."""
    if isinstance(payload, PlainPayload) and payload.encoding is None and not isinstance(payload.data, OffloadedTensor):
        return _written_as(payload.data, None)
    if isinstance(payload, OffloadedPayload) and type(payload.tensor) is OffloadedTensor:
        return _written_as(payload.tensor, payload.encoding)
    return None


#: Tensor files of a directory written at once. Each is its own file, so their writes do
#: not contend on one inode's lock: two at once write 1.6-1.9x faster than one after the
#: other on this project's 2-core VM (benches/README.md, "A directory as fast as an
#: archive"); an archive is one stream and keeps its order.
DIR_WRITERS = 2


def _write_files_side_by_side(artefact: Artefact, graph: NNEFGraph, labels: list[str], path: Path,
                              stop: threading.Event | None, report: _Progress) -> None:
    """Write the directory's ``.dat`` files, ``DIR_WRITERS`` at a time. A payload that
    makes a copy of its tensor to be written is written alone, so memory still holds at
    most one such copy. The first error stops the submissions and is raised once the
    writes in flight have ended (the caller's ``Artefact`` then removes everything)."""
    in_flight: dict[Future[None], int] = {}

    def settle(until: int) -> None:
        while len(in_flight) > until:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                nbytes = in_flight.pop(future)
                future.result()
                report(nbytes)

    with ThreadPoolExecutor(DIR_WRITERS, thread_name_prefix="fastnnef-dir") as pool:
        try:
            for label in labels:
                _check_not_stopped(stop, path)
                payload = graph.variables[label].payload
                if payload.writes_in_place:
                    settle(DIR_WRITERS - 1)
                    in_flight[pool.submit(payload.write, artefact, label)] = payload.nbytes
                else:
                    settle(0)
                    payload.write(artefact, label)
                    report(payload.nbytes)
            settle(0)
        except BaseException:
            wait(in_flight)  # nothing may still write when the artefact is removed
            raise


def _check_not_stopped(stop: threading.Event | None, path: Path) -> None:
    if stop is not None and stop.is_set():
        raise WriteStopped(f"the writing of {path} was stopped")


class _Progress:
    """Counts the tensors written: the caller's ``TENSOR_PROGRESS`` after each, and a log
    line every tenth of the bytes on long writes."""

    def __init__(self, path: Path, count: int, total: int) -> None:
        self.path, self.count, self.total = path, count, total
        self.tensors = self.done = 0
        self.next_log = total / 10
        self.callback = TENSOR_PROGRESS.get()

    def __call__(self, nbytes: int) -> None:
        self.tensors += 1
        self.done += nbytes
        if self.callback is not None:
            self.callback(self.tensors, self.count, self.done, self.total)
        if self.total > 64 << 20 and self.done >= self.next_log:  # progress on long writes only
            log.info("writing %s: %d%% of %.1f MiB", self.path.name, 100 * self.done // self.total,
                     self.total / 2**20)
            self.next_log += self.total / 10


def quant_text(graph: NNEFGraph) -> str:
    """``graph.quant``: one line per torch-quantized variable, then one per tensor of a
    quantized type that an op computes, graph outputs included (as tract's own writer does,
    so a reader sees every quantized tensor's scale and zero point); empty when none."""
    entries = [v.payload.quant_entry(v.tensor.name) for v in graph.variables.values()]
    for stmt in graph.body:
        computed = stmt.outputs if isinstance(stmt, NOp) else (stmt.tensor,) if isinstance(stmt, NAlias) else ()
        entries += [quantized_type_line(t.name, t.dtype) for t in computed]
    return "".join(e for e in entries if e is not None)
