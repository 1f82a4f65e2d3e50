"""fastnnef's IR, under the one path handlers and users import it from.

The IR is built in one linear pass over the traced graph. Its parts live in modules of
their own, re-exported here:

- ``ir_data.py``: the value types (``TensorValue``, ``Const``, ``SymInt``...), ``IROp``
  and ``IRGraph``;
- ``ir_builder.py``: the pass itself (``build_ir``), with scalar size arithmetic folded or
  kept symbolic, constant folding (``fold.py``) and in-place writes (``functionalize.py``);
- ``ir_dynamic.py`` (shape ops: ``ir_dynamic_shape.py``): which output dims of each op vary
  with a dynamic axis, by the rule of its kind.
"""

from fastnnef.torch_graph.ir_builder import NOOP_KINDS, build_ir, scope_path
from fastnnef.torch_graph.ir_data import (
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
from fastnnef.torch_graph.ir_dynamic import DynRule, propagate_dyn

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
