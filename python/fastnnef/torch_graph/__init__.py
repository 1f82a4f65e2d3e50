"""From an nn.Module to fastnnef's IR: tracing with flat IO (``trace``), the IR built in one
pass (``ir``), and torch_to_nnef's TorchScript hardening chain (``harden_jit_for_export``
and its passes: ``jit_passes``, ``jit_inline``), re-exported here as in
``torch_to_nnef.torch_graph``. The drop-in-only names of that path (the reference's IR names
and its ``jit_mutation`` pass) are served here by ``fastnnef/compat/`` on first use."""

from typing import Any

from fastnnef.reference_names import reference_name
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.torch_graph.ir_data import Data, FixedTensorList, PythonConstant, TensorVariable
from fastnnef.torch_graph.jit_inline import inline_unresolvable_submodules
from fastnnef.torch_graph.jit_passes import (
    fold_constant_ifs,
    fold_constant_scalar_arithmetic,
    fold_data_dependent_ifs,
    fold_tuple_index_through_tuple_construct,
    fold_tuple_unpack_through_tuple_construct,
    replace_size_calls_with_constants,
    strip_assertion_ifs,
    strip_prim_data,
)

__all__ = [
    "MAP_TO_NOP",
    "Data",
    "FixedTensorList",
    "PythonConstant",
    "TensorVariable",
    "TorchModuleIRGraph",
    "TorchModuleTracer",
    "TorchOp",
    "module_tracer_into_ir_graph",
    "fold_constant_ifs",
    "fold_constant_scalar_arithmetic",
    "fold_data_dependent_ifs",
    "fold_tuple_index_through_tuple_construct",
    "fold_tuple_unpack_through_tuple_construct",
    "functionalize_view_inplace_copy",
    "harden_jit_for_export",
    "inline_unresolvable_submodules",
    "replace_size_calls_with_constants",
    "strip_assertion_ifs",
    "strip_prim_data",
]


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
