"""Dimension helpers shared by the indexing, reduction and creation families.

``emit_shaped`` is ``OpContext.emit`` with an explicit output shape: the IR marks output
dims of rank-changing ops on dynamic inputs as ``?`` (unknown expression) although the
handler knows them (a reduction keeps the input's ``S``), and later handlers need them.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from fastnnef.nnef.graph import Dim, NTensor, Sym
from fastnnef.op.aten._common import literal
from fastnnef.op.context import OpContext, tract_dtype
from fastnnef.torch_graph.ir import UNKNOWN


def emit_shaped(
    ctx: OpContext, kind: str, args: Sequence[Any], attrs: Optional[dict[str, Any]],
    shape: Sequence[Dim], out: int = 0,
) -> NTensor:
    """Emit the op producing node output ``out``, declaring ``shape`` for it."""
    value = ctx.out_value(out)
    return ctx.g.op(
        kind, args, attrs, name=ctx.converter.name_for(ctx.node, value),
        dtype=tract_dtype(value.dtype, ctx.node.where()), shape=tuple(shape),
        exact=id(value) in ctx.converter.fixed_names,
    )


def unknown(d: Dim) -> bool:
    """A dynamic dim whose expression the IR lost."""
    return isinstance(d, Sym) and d == UNKNOWN


def plus(d: Dim, k: int) -> Dim:
    """``d + k`` for a static or symbolic dim (written as tract parses it: ``S-3``)."""
    if not isinstance(d, Sym):
        return d + k
    if k == 0:
        return d
    return Sym(f"{d}+{k}" if k > 0 else f"{d}-{-k}")


def typed_scalar(ctx: OpContext, value: Union[int, float, bool, Sym], dtype: str) -> Union[int, float, bool, NTensor]:
    """``value`` as a 0-d operand of ``dtype`` for ops that don't unify their operand types
    (select, broadcast, scatter): tract reads a bare float as f32, a bool as bool and an
    int or a symbol as a TDim, so other dtypes get an explicit cast of the literal."""
    if isinstance(value, Sym):
        scalar: Union[int, float, bool, Sym] = value
        natural = "tdim"
    else:
        scalar = literal(value, dtype)
        natural = "bool" if isinstance(scalar, bool) else "f32" if isinstance(scalar, float) else "tdim"
    if natural == dtype:
        return scalar  # type: ignore[return-value]
    return ctx.tmp("tract_core_cast", [scalar], {"to": dtype}, dtype=dtype, shape=(), suffix="value")
