"""Dimension helpers shared by the indexing, reduction and creation families.

``emit_shaped`` is ``OpContext.emit`` with an explicit output shape: the IR marks output
dims of rank-changing ops on dynamic inputs as ``?`` (unknown expression) although the
handler knows them (a reduction keeps the input's ``S``), and later handlers need them.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from fastnnef.nnef.graph import Dim, NTensor, Sym
from fastnnef.op.context import OpContext
from fastnnef.torch_graph.ir import UNKNOWN


def emit_shaped(
    ctx: OpContext, kind: str, args: Sequence[Any], attrs: Optional[dict[str, Any]],
    shape: Sequence[Dim], out: int = 0,
) -> NTensor:
    """Emit the op producing node output ``out``, declaring ``shape`` for it."""
    return ctx.emit(kind, args, attrs, out=out, shape=shape)


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


