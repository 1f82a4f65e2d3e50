"""torch_to_nnef's ``torch_graph.ir_data`` names (its IR data nodes), for code that imports
them from there: a re-export of the closest fastnnef IR classes (the correspondence is in
torch_graph/compat.py)."""

from fastnnef.torch_graph.compat import Data, FixedTensorList, PythonConstant, TensorVariable

__all__ = ["Data", "FixedTensorList", "PythonConstant", "TensorVariable"]
