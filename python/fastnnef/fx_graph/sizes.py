"""torch's symbolic sizes as fastnnef's: sympy expressions of a ``SymInt`` -> ``DimExpr``.

Under ``torch.export`` every size that varies with a dynamic axis is a ``SymInt`` whose
expression torch's own meta kernels wrote (``s27*2``, ``FloorDiv(s27 - 3, 2) + 1``,
``Min(s27, 10)``). This module turns those expressions into ``DimExpr`` once, at the
boundary, so that the IR carries the same sizes as the jit front end's: the handlers never
see sympy. Symbols of the export's dynamic axes become the NNEF symbols the user named;
what ``DimExpr`` cannot write (a symbol of a data-dependent value, a size divided by a size,
a float) is ``UNKNOWN``, which handlers that need the size refuse clearly.

The program's range constraints (what a guard of the model or of torch's kernels assumes
of a dynamic axis: ``torch._check(S >= 4)``, ``S <= 64``) become ``tract_assert`` lines
(``range_assertions``), so that tract knows the sizes the artefact was exported for.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from functools import reduce
from typing import Any

import torch
from torch.export.graph_signature import InputKind
from torch.utils._sympy import functions as sym_fns
from torch.utils._sympy.numbers import IntInfinity

from fastnnef.dim import UNKNOWN, Size, ceil_div, dmax, dmin

Symbols = Mapping[Any, Size]
"""torch's symbol of each dynamic axis -> its NNEF symbol (``s27`` -> ``S``)."""

# torch's own functions of sizes (torch/utils/_sympy/functions.py); sympy's Add, Mul and Pow
# are told by their flags (sympy itself has no type information).
_FLOOR_DIV = (sym_fns.FloorDiv, sym_fns.CleanDiv)
_MOD = (sym_fns.Mod, sym_fns.PythonMod)


def dim_of(expr: Any, symbols: Symbols) -> Size:
    """The sympy expression ``expr`` as an int or a ``DimExpr`` over the NNEF symbols;
    ``UNKNOWN`` where it holds what a size expression of tract cannot."""
    try:
        return _convert(expr, symbols)
    except (ValueError, TypeError, ZeroDivisionError):  # a division DimExpr refuses (by a size)
        return UNKNOWN


def _convert(expr: Any, symbols: Symbols) -> Size:
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return symbols.get(expr, UNKNOWN)
    args = [_convert(a, symbols) for a in expr.args] if not expr.is_Rational else []
    if expr.is_Add:
        return reduce(operator.add, args)
    if expr.is_Mul:
        return reduce(operator.mul, args)
    if (expr.is_Pow or isinstance(expr, sym_fns.PowByNatural)) and isinstance(args[1], int) and args[1] >= 0:
        return reduce(operator.mul, [args[0]] * args[1], 1)
    if isinstance(expr, _FLOOR_DIV) and isinstance(args[1], int):
        return args[0] // args[1]
    if isinstance(expr, sym_fns.CeilDiv) and isinstance(args[1], int):
        return ceil_div(args[0], args[1])
    if isinstance(expr, _MOD) and isinstance(args[1], int):
        return args[0] % args[1]
    if isinstance(expr, sym_fns.ModularIndexing) and isinstance(args[1], int) and isinstance(args[2], int):
        return (args[0] // args[1]) % args[2]
    if isinstance(expr, sym_fns.Min):
        return dmin(*args)
    if isinstance(expr, sym_fns.Max):
        return dmax(*args)
    return UNKNOWN  # a rational, a float, a comparison: not a size tract writes


def traced_int(value: torch.SymInt) -> int | None:
    """The value a symbolic size had on the example inputs (``None`` for a data-dependent
    one, which has none until run)."""
    hint = value.node.hint
    return hint if isinstance(hint, int) else None


def range_assertions(program: torch.export.ExportedProgram, dynamic_axes: Mapping[int, Mapping[int, str]]) -> list[str]:
    """``tract_assert`` lines for the ranges of the dynamic axes' symbols that are not
    torch's default ``[0, oo]``, in input order (``dynamic_axes``: {flat input index:
    {axis: NNEF symbol}}); a symbol shared by several axes is asserted once."""
    user_inputs = [
        node for node, spec in zip(program.graph.find_nodes(op="placeholder"), program.graph_signature.input_specs)
        if spec.kind == InputKind.USER_INPUT
    ]
    lines: list[str] = []
    seen: set[str] = set()
    for index, axes in sorted(dynamic_axes.items()):
        shape = user_inputs[index].meta["val"].shape
        for axis, name in sorted(axes.items()):
            size = shape[axis]
            bounds = program.range_constraints.get(size.node.expr) if isinstance(size, torch.SymInt) else None
            if bounds is None or name in seen:
                continue
            seen.add(name)
            if bounds.lower > 0:
                lines.append(f"tract_assert {name} >= {int(bounds.lower)}")
            if not isinstance(bounds.upper, IntInfinity):
                lines.append(f"tract_assert {name} <= {int(bounds.upper)}")
    return lines
