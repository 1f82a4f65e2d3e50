"""Writes an ``NNEFGraph`` as ``graph.nnef`` and ``graph.quant`` text (nnef-format §6)."""

from __future__ import annotations

from typing import Any

from fastnnef.dim import DimExpr
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorStrictNNEFSpec
from fastnnef.nnef.graph import (
    NAlias,
    NExternal,
    NNEFGraph,
    NOp,
    NTensor,
    NVariable,
    Tuple,
)
from fastnnef.nnef.literals import format_float, format_string

_GENERIC_OF_DTYPE = {"bool": "logical"}
_INTEGER_DTYPES = frozenset("i8 i16 i32 i64 u8 u16 u32 u64".split())


def value_kind(dtype: str) -> str:
    """The NNEF generic (``scalar``/``integer``/``logical``) for a tract datum type."""
    if dtype in _INTEGER_DTYPES:
        return "integer"
    return _GENERIC_OF_DTYPE.get(dtype, "scalar")


def format_value(value: Any) -> str:
    """Any op argument or attribute as NNEF text."""
    if isinstance(value, NTensor):
        return value.name
    if isinstance(value, DimExpr):  # a size of a dynamic axis, in tract's syntax
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, Tuple):
        return "(" + ", ".join(format_value(v) for v in value.items) + ")"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    raise T2NErrorInvalidArgument(f"cannot write {value!r} ({type(value).__name__}) in NNEF text")


def _statement(graph: NNEFGraph, stmt: Any) -> str:
    if isinstance(stmt, NOp):
        parts = [format_value(a) for a in stmt.args]
        parts += [f"{k} = {format_value(v)}" for k, v in stmt.attrs.items()]
        lhs = stmt.outputs[0].name if len(stmt.outputs) == 1 else (
            "(" + ", ".join(t.name for t in stmt.outputs) + ")"
        )
        return f"{lhs} = {stmt.kind}({', '.join(parts)});"
    if isinstance(stmt, NExternal):
        t = stmt.tensor
        shape = format_value(list(t.shape))
        if graph.strict:
            kind = value_kind(t.dtype)
            if kind == "scalar" and t.dtype != "f32" or kind == "integer" and t.dtype != "i64":
                raise T2NErrorStrictNNEFSpec(
                    f"input {t.name!r} is {t.dtype}: strict NNEF externals cannot pin that "
                    "width (only f32, i64, bool); cast the input or export with TractNNEF"
                )
            return f"{t.name} = external<{kind}>(shape = {shape});"
        return f"{t.name} = tract_core_external(shape = {shape}, datum_type = '{t.dtype}');"
    if isinstance(stmt, NVariable):
        t = stmt.tensor
        generic = f"<{value_kind(t.dtype)}>" if stmt.payload.has_generic else ""
        return (
            f"{t.name} = variable{generic}(label = {format_value(stmt.label)}, "
            f"shape = {format_value(list(t.shape))});"
        )
    if isinstance(stmt, NAlias):
        return f"{stmt.tensor.name} = copy({stmt.source.name});"
    raise TypeError(f"unknown statement {stmt!r}")


def graph_text(graph: NNEFGraph) -> str:
    """The full ``graph.nnef`` document (order of §6.1)."""
    lines = ["version 1.0;", ""]
    for registry in graph.registries:
        lines.append(f"extension tract_registry {registry};")
    seen: set[str] = set()
    for ext in graph.extensions:
        if ext not in seen:
            seen.add(ext)
            lines.append(f"extension {ext};")
    if graph.strict and graph.fragments:
        lines.append("extension KHR_enable_fragment_definitions;")
        lines.append("extension KHR_enable_operator_expressions;")
    lines.append("")
    # Properties first, then the other fragments in name order (deterministic).
    names = sorted(graph.fragments, key=lambda n: (n != "tract_core_properties", n))
    for name in names:
        lines.append(graph.fragments[name].strip())
        lines.append("")
    inputs = ", ".join(t.name for t in graph.inputs)
    outputs = ", ".join(t.name for t in graph.outputs)
    lines.append(f"graph {graph.name}({inputs}) -> ({outputs})")
    lines.append("{")
    lines.extend("  " + _statement(graph, s) for s in graph.body)
    lines.append("}")
    return "\n".join(lines) + "\n"
