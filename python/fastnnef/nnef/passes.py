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
- ``f32_softmax_adds``: an f16 ``add`` (attention scores + mask) read only by a cast to f32
  that only softmaxes read is done in f32 on casts of its operands instead (a mask shared
  by every layer is cast once). tract's f16 elementwise ops are slow on CPUs without f16
  arithmetic: Mixtral f16 prefilled 512 tokens ~10 % faster (benches/README.md). Torch
  rounds the f16 sum before its f32 softmax; the f32 sum is at least as accurate.
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


# The ops that make an f32 softmax of their input (both softmax handlers emit these).
_SOFTMAXES = frozenset({"softmax", "tract_core_log_softmax"})


def widen_f16_softmax_adds(graph: NNEFGraph) -> int:
    """``softmax(cast(add(a, b), to f32))`` with f16 ``a``, ``b`` becomes
    ``softmax(add(cast(a), cast(b)))`` where the add and the cast have no other reader;
    return how many adds were widened."""
    producer: dict[str, Statement] = {}
    readers: dict[str, list[Statement]] = {}
    for stmt in graph.body:
        for t in _reads(stmt):
            readers.setdefault(t.name, []).append(stmt)
        for t in _writes(stmt):
            producer[t.name] = stmt
    outputs = set(graph.output_names)
    widened: dict[int, NOp] = {}  # id(add) -> the cast to f32 it absorbs
    for cast in graph.body:
        if not (isinstance(cast, NOp) and cast.kind == "tract_core_cast" and cast.attrs.get("to") == "f32"
                and isinstance(cast.args[0], NTensor) and cast.args[0].dtype == "f16"):
            continue
        add, wide_out = producer.get(cast.args[0].name), cast.outputs[0]
        if (isinstance(add, NOp) and add.kind == "add" and len(add.outputs) == 1
                and add.outputs[0].name not in outputs and wide_out.name not in outputs
                and [id(r) for r in readers[add.outputs[0].name]] == [id(cast)]
                and all(isinstance(r, NOp) and r.kind in _SOFTMAXES for r in readers.get(wide_out.name, []))):
            widened[id(add)] = cast
    if not widened:
        return 0
    casts = {id(cast) for cast in widened.values()}
    wide: dict[str, NTensor] = {}  # f16 operand -> its f32 cast, made once before its first use
    body: list[Statement] = []
    for stmt in graph.body:
        if id(stmt) in casts:
            continue
        absorbed = widened.get(id(stmt))
        if absorbed is None:
            body.append(stmt)
            continue
        assert isinstance(stmt, NOp)  # widened holds adds only
        args = []
        for arg in stmt.args:
            if isinstance(arg, NTensor) and arg.dtype == "f16":
                if arg.name not in wide:
                    wide[arg.name] = NTensor(graph.fresh_name(f"{arg.name}_f32"), "f32", arg.shape)
                    body.append(NOp("tract_core_cast", (arg,), {"to": "f32"}, (wide[arg.name],)))
                arg = wide[arg.name]
            args.append(arg)
        body.append(NOp("add", tuple(args), stmt.attrs, absorbed.outputs))
    graph.body = body
    return len(widened)


PASSES: tuple[tuple[str, Callable[[NNEFGraph], int]], ...] = (
    ("dead_ops", eliminate_dead_ops),
    ("unpack_packed", unpack_unsupported_packed),
    ("f32_softmax_adds", widen_f16_softmax_adds),
)


def run_passes(graph: NNEFGraph) -> None:
    """Apply ``PASSES`` in order."""
    for name, rewrite in PASSES:
        changed = rewrite(graph)
        if changed:
            log.debug("graph pass %s: %d changes", name, changed)
