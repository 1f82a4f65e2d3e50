"""Sizes that tracing freezes: a size read from a shape, then turned into a Python number.

While tracing, ``x.shape[i]`` is a 0-d tensor and arithmetic on it is recorded, but
``math.ceil(n)``, ``int(n)``, ``float(n)``, ``max(n, 0)`` or ``if n > 4`` turn it into a
Python number (or a branch taken) that the graph holds as a constant: right at the traced
size, wrong at any other. For a static export that is what folding does anyway; with a
dynamic axis it is a silent error.

torch's tracer warns at each such conversion, at the user's line. For exports with dynamic
axes the trace keeps those warnings (``ConversionLog``), each with the last value recorded
when it was raised; at the end of the traced function, before dead code is dropped, the
value a conversion took is the last scalar recorded before it that nothing reads, and the
shape entries (``aten::size``) it was computed from are its sizes. The IR builder then
refuses a number computed from the traced length of a dynamic axis, and warns about a
branch on one (often the same at every length: ``if seq_len > max_cached``). Nothing here
changes how the model runs while traced (a torch function mode would: it turns off
torch's fast paths, such as the nested-tensor transformer encoder).
"""

from __future__ import annotations

import linecache
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# The tracer's words for each conversion, and ours.
_CONVERSION = re.compile(r"Converting a tensor to a Python (\w+)")
_HOW = {
    "boolean": "a comparison used as a bool (max, min, if)",
    "float": "float() (math.ceil, math.sqrt... call it)",
    "integer": "int()",
    "index": "an index",
    "number": ".item()",
    "list": ".tolist()",
}


@dataclass(frozen=True)
class SizeConversion:
    """One size turned into a Python value while tracing."""

    how: str  # the conversion, in words
    branch: bool  # a truth value (a branch or max/min taken), not a number
    where: str  # the user's source line
    sizes: frozenset[int]  # traced values of the shape entries it was computed from


class ConversionLog:
    """Installed as ``warnings.showwarning`` while tracing: keeps the tracer's warnings,
    each with the last value recorded when it was raised (the value converted is among the
    last ones; later ops may be inserted before it, so a count would not do), and shows
    the others as usual."""

    def __init__(self) -> None:
        self.caught: list[tuple[warnings.WarningMessage, int]] = []  # (warning, id of the last value)
        self._show = warnings.showwarning

    def __call__(self, message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
        if not issubclass(category, torch.jit.TracerWarning):
            self._show(message, category, filename, lineno, file, line)
            return
        state = torch._C._get_tracing_state()
        last = -1
        for node in _recorded(state.graph().nodes()) if state is not None else ():
            if node.outputsSize():
                last = node.outputsAt(0).unique()
        self.caught.append((warnings.WarningMessage(message, category, filename, lineno), last))

    def conversions(self) -> list[SizeConversion]:
        """The conversions of sizes among the warnings so far; call it at the end of the
        traced function, before dead code is dropped (a value converted is dead)."""
        state = torch._C._get_tracing_state()
        if state is None or not self.caught:
            return []
        nodes = list(_recorded(state.graph().nodes()))
        position = {node.outputsAt(0).unique(): i for i, node in enumerate(nodes) if node.outputsSize()}
        found: list[SizeConversion] = []
        for w, last in self.caught:
            match = _CONVERSION.search(str(w.message))
            if match is None or last not in position:
                continue
            sizes = _converted_sizes(nodes[: position[last] + 1])
            if sizes:
                kind = match.group(1)
                where = f"{w.filename}:{w.lineno}: {linecache.getline(w.filename, w.lineno).strip()}"
                found.append(SizeConversion(_HOW.get(kind, kind), kind == "boolean", where, frozenset(sizes)))
        return found

    def show_again(self) -> None:
        """Show the kept warnings, each once, where they were raised (under the caller's
        filters, which the trace set aside to see them all)."""
        shown: set[tuple[str, str, int]] = set()
        for w, _ in self.caught:
            key = (str(w.message), w.filename, w.lineno)
            if key not in shown:
                shown.add(key)
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _recorded(nodes: Iterable[torch._C.Node]) -> Iterator[torch._C.Node]:
    """Every op in the order recorded, those of submodule calls (a block of their
    ``prim::TracedModuleForward`` node) included."""
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from _recorded(block.nodes())


# How far back from a conversion its value is looked for (ops recorded since it was computed).
_LOOK_BACK = 64


def _converted_sizes(before: list[torch._C.Node]) -> set[int]:
    """The sizes feeding the value a conversion took: the last scalar recorded before it
    that nothing in the graph reads (the tracer dropped the data flow there)."""
    for node in reversed(before[-_LOOK_BACK:]):
        outputs = list(node.outputs())
        if outputs and all(_scalar(v) and not v.uses() for v in outputs) and node.kind() != "prim::Constant":
            return _sizes_feeding(node)
    return set()


def _scalar(v: torch._C.Value) -> bool:
    ty = v.type()
    return not isinstance(ty, torch._C.TensorType) or ty.dim() == 0


def _frames(node: torch._C.Node) -> str:
    try:
        return str(node.sourceRange())
    except Exception:  # noqa: BLE001 - not all torch builds keep source ranges
        return ""


def _sizes_feeding(node: torch._C.Node) -> set[int]:
    """Traced values of the ``aten::size`` entries that ``node`` is computed from, through
    scalar arithmetic (the walk stops at tensors of rank > 0: data, not sizes)."""
    sizes: set[int] = set()
    seen: set[tuple[int, ...]] = set()  # nodes by their outputs (each wrapper is a new object)
    stack = [node]
    while stack:
        n = stack.pop()
        key = tuple(o.unique() for o in n.outputs())
        if key in seen:
            continue
        seen.add(key)
        if n.kind() == "aten::size":
            sizes |= _size_values(n)
            continue
        for v in n.inputs():
            ty = v.type()
            if isinstance(ty, torch._C.TensorType) and (ty.dim() or 0) > 0:
                continue
            stack.append(v.node())
    return sizes


def _size_values(node: torch._C.Node) -> set[int]:
    inputs = list(node.inputs())
    ty = inputs[0].type()
    shape = ty.sizes() if isinstance(ty, torch._C.TensorType) else None
    if not shape:
        return set()
    if len(inputs) == 1:
        return set(shape)
    dim = inputs[1].toIValue() if inputs[1].node().kind() == "prim::Constant" else None
    return {shape[dim]} if isinstance(dim, int) else set(shape)
