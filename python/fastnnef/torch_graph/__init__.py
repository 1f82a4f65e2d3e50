"""From an nn.Module to fastnnef's IR: tracing with flat IO (``trace``), the IR built in one
pass (``ir``), and torch_to_nnef's TorchScript hardening chain (``harden_jit_for_export``
and its passes: ``jit_passes``, ``jit_inline``), re-exported here as in
``torch_to_nnef.torch_graph``, with the drop-in-only names of that path: the reference's IR
names and its ``jit_mutation`` pass (both in ``fastnnef/compat/``)."""

from fastnnef.compat.ir_names import (
    MAP_TO_NOP,
    TorchModuleIRGraph,
    TorchModuleTracer,
    TorchOp,
    module_tracer_into_ir_graph,
)
from fastnnef.compat.jit_mutation import functionalize_view_inplace_copy
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
