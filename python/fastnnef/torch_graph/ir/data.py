"""The values and ops of fastnnef's IR (the reference's names of its value classes are at its
path, ``torch_graph/ir_data.py``).

Every module of ``torch_graph`` that reads or makes IR values imports them from here: the
builder (``builder.py``), its dynamic-dimension rules (``dynamic*.py``), constant
folding (``fold.py``) and functionalization (``functionalize.py``). Nothing here imports
another module of the package but ``fastnnef.dim`` (which imports nothing), so none of
them forms a circle through it.

A tensor value carries ``dyn``: per dim, ``None`` (static), its size as a ``DimExpr``
(``S``, ``P+S``) or ``UNKNOWN`` (dynamic, expression lost).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fastnnef.dim import UNKNOWN as UNKNOWN  # the IR's mark of a dim whose expression was lost
from fastnnef.dim import DimExpr, Size

# IR kind prefix of a module call converted by its extractor (torch_to_nnef's name).
CUSTOMOP_KIND = "wired_custom::"


class IRValue:
    """Base of every value of the IR."""

    name: str


@dataclass(eq=False)
class TensorValue(IRValue):
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    dyn: tuple[DimExpr | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.dyn:
            self.dyn = (None,) * len(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_dynamic(self, dim: int | None = None) -> bool:
        if dim is None:
            return any(d is not None for d in self.dyn)
        return self.dyn[dim] is not None


@dataclass(eq=False)
class ParamValue(TensorValue):
    """A parameter or buffer of the model, by its canonical qualified name."""

    qualname: str = ""
    tensor: torch.Tensor = field(default=None)  # type: ignore[assignment]


@dataclass(eq=False)
class ConstTensor(TensorValue):
    """A tensor constant recorded by the trace (created inside ``forward``)."""

    label: str = ""
    tensor: torch.Tensor = field(default=None)  # type: ignore[assignment]


@dataclass(eq=False)
class Const(IRValue):
    """A Python constant: int, float, bool, None, str, dtype code, device..."""

    name: str
    value: Any


@dataclass(eq=False)
class SymInt(IRValue):
    """An integer that depends on a dynamic axis: its traced value and expression
    (``UNKNOWN`` when it could not be written)."""

    name: str
    traced: int
    expr: DimExpr


@dataclass(eq=False)
class SymRatio(IRValue):
    """A size divided by a constant, exactly (``(L - 3) / 3``, a float in torch): only
    rounding it (ceil, floor, int()) makes it a size again (sizes.py)."""

    name: str
    traced: float
    num: Size
    den: int


@dataclass(eq=False)
class ListValue(IRValue):
    name: str
    items: list[IRValue]


@dataclass(eq=False)
class ModuleRef(IRValue):
    """A submodule reached by ``prim::GetAttr`` (only used to resolve parameters)."""

    name: str
    module: nn.Module
    path: str


@dataclass(eq=False)
class IROp:
    """One aten (or custom) call."""

    kind: str
    inputs: list[IRValue]
    outputs: list[IRValue]
    scope: str  # module path, e.g. "layers.0.attn" ("" at the root)
    source: str  # user source location, for errors
    extractor: Any | None = None  # a ModuleInfoExtractor that emits this op (a module call)
    module: nn.Module | None = None  # the module of a module call

    def where(self) -> str:
        scope = self.scope or "<root module>"
        src = f" ({self.source})" if self.source else ""
        return f"{self.kind} in {scope}{src}"


@dataclass
class IRGraph:
    inputs: list[TensorValue]
    outputs: list[IRValue]
    ops: list[IROp]
    param_names: dict[int, str] = field(default_factory=dict)  # id(parameter/buffer) -> its name

