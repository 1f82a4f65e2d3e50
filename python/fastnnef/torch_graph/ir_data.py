"""torch_to_nnef's names of the IR's value classes, at its module path
(``torch_to_nnef.torch_graph.ir_data``); fastnnef's IR values are ``ir/data.py``'s, and
fastnnef/compat/ir_names.py documents these names with the rest of the reference's IR names."""

from fastnnef.torch_graph.ir.data import Const, IRValue, ListValue, TensorValue

__all__ = ["Data", "FixedTensorList", "PythonConstant", "TensorVariable"]

Data = IRValue
TensorVariable = TensorValue
PythonConstant = Const
FixedTensorList = ListValue
