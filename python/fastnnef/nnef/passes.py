"""Rewrites of the finished NNEF graph before it is written: an ordered list of named
passes, so the log can say what each one changed.

- ``dead_ops``: drop the ops none of whose outputs reach a graph output (what tracing
  left behind: a submodule called for nothing, a handler's unused intermediate), then the
  variables that only they read, so their weights are not written either. Graph inputs
  always stay (they are the artefact's interface, used or not).
- ``unpack_packed``: a packed weight read by an op that tract cannot run on its format's
  blocks (its format's ``unsupported_readers``: for Q4_0, anything but a convolution reading
  a weight of rank 3 or 4; they make tract fail to load or optimize the artefact) is
  written as its dequantized floats instead, with a warning; torch computes with the same
  dequantized values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastnnef.log import get_logger
from fastnnef.nnef.graph import NAlias, NExternal, NNEFGraph, NOp, NTensor, NVariable, Statement, Tuple

log = get_logger(__name__)


def _tensors_in(value: Any) -> Iterator[NTensor]:
    """The tensors an argument or attribute refers to (lists, tuples and dicts nest them)."""
    if isinstance(value, NTensor):
        yield value
    elif isinstance(value, Tuple):
        yield from _tensors_in(value.items)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _reads(stmt: Statement) -> Iterator[NTensor]:
    if isinstance(stmt, NOp):
        yield from _tensors_in(stmt.args)
        yield from _tensors_in(stmt.attrs)
    elif isinstance(stmt, NAlias):
        yield stmt.source


def _writes(stmt: Statement) -> tuple[NTensor, ...]:
    if isinstance(stmt, NOp):
        return stmt.outputs
    if isinstance(stmt, (NAlias, NVariable, NExternal)):
        return (stmt.tensor,)
    raise TypeError(f"unknown statement {stmt!r}")


def eliminate_dead_ops(graph: NNEFGraph) -> int:
    """Drop every statement whose results no graph output depends on (inputs excepted);
    return how many were dropped. One backward walk: the body is in dependency order."""
    live = {t.name for t in graph.outputs}
    kept: list[Statement] = []
    for stmt in reversed(graph.body):
        if not isinstance(stmt, NExternal) and not any(t.name in live for t in _writes(stmt)):
            continue
        kept.append(stmt)
        live.update(t.name for t in _reads(stmt))
    dropped = len(graph.body) - len(kept)
    graph.body = kept[::-1]
    graph.variables = {label: v for label, v in graph.variables.items() if v.tensor.name in live}
    return dropped


def unpack_unsupported_packed(graph: NNEFGraph) -> int:
    """Write packed weights that some reader cannot run on as dequantized floats; return
    how many were changed."""
    readers: dict[str, set[str]] = {}
    for stmt in graph.body:
        kind = stmt.kind if isinstance(stmt, NOp) else "alias"
        for t in _reads(stmt):
            readers.setdefault(t.name, set()).add(kind)
    changed = 0
    for variable in graph.variables.values():
        payload = variable.payload
        fmt = payload.written_format
        if fmt is None:
            continue
        others = fmt.unsupported_readers(payload.rank, readers.get(variable.tensor.name, set()))
        unpacked = payload.unpacked() if others else None
        if unpacked is None:
            continue
        log.warning(
            "weight %r (%s, rank %d) is read by %s, which tract cannot run on %s blocks of that rank: "
            "written as its dequantized floats", variable.label, fmt.name, payload.rank, ", ".join(sorted(others)),
            fmt.name,
        )
        variable.payload = unpacked
        changed += 1
    return changed


PASSES: tuple[tuple[str, Callable[[NNEFGraph], int]], ...] = (
    ("dead_ops", eliminate_dead_ops),
    ("unpack_packed", unpack_unsupported_packed),
)


def run_passes(graph: NNEFGraph) -> None:
    """Apply ``PASSES`` in order."""
    for name, rewrite in PASSES:
        changed = rewrite(graph)
        if changed:
            log.debug("graph pass %s: %d changes", name, changed)
