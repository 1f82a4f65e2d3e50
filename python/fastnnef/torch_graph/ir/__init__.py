"""fastnnef's IR, under the one path handlers and users import it from.

The IR is built in one linear pass over the traced graph. Its parts live in modules of
their own, re-exported here:

- ``data.py``: the value types (``TensorValue``, ``Const``, ``SymInt``...), ``IROp`` and
  ``IRGraph``;
- ``builder.py``: the pass itself (``build_ir``), with scalar size arithmetic folded or kept
  symbolic (``sizes.py``), constant folding (``fold.py``) and in-place writes
  (``functionalize.py``);
- ``dynamic.py``: which output dims of each op vary with a dynamic axis, by the rule of its
  kind in its one table (the shape ops' rules in ``dynamic_shape.py``, the others' in
  ``dynamic_kinds.py``).

Its submodules import each other by their own paths, never this package's names, so no
circle runs through this file.
"""

from fastnnef.torch_graph.ir.builder import NOOP_KINDS, build_ir, scope_path
from fastnnef.torch_graph.ir.data import (
    CUSTOMOP_KIND,
    UNKNOWN,
    Const,
    ConstTensor,
    IRGraph,
    IROp,
    IRValue,
    ListValue,
    ModuleRef,
    ParamValue,
    SymInt,
    TensorValue,
)
from fastnnef.torch_graph.ir.dynamic import DynRule, propagate_dyn

__all__ = [
    "CUSTOMOP_KIND",
    "NOOP_KINDS",
    "UNKNOWN",
    "Const",
    "ConstTensor",
    "DynRule",
    "IRGraph",
    "IROp",
    "IRValue",
    "ListValue",
    "ModuleRef",
    "ParamValue",
    "SymInt",
    "TensorValue",
    "build_ir",
    "propagate_dyn",
    "scope_path",
]
