"""Tensor types (torch_to_nnef's ``torch_to_nnef.tensor``): quantized weights (``quant/``),
weights left on disk (``offload.py``) and the cache of their values (``residency.py``),
opaque-tensor refs (``opaque.py``) and user-chosen weight names (``named.py``)."""

from fastnnef.tensor.named import NamedTensor, apply_name_to_tensor_in_module
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.opaque import OpaqueTensorRef, set_opaque_tensor_in_params_as_ref
from fastnnef.tensor.quant import (
    QScalePerGroupF16,
    QTensor,
    QTensorTract,
    QTensorTractScaleOnly,
)
from fastnnef.tensor.residency import (
    ResidencyStrategy,
    TensorPrefetch,
    TensorResidencyLease,
    TensorResidencyPool,
)

__all__ = [
    "NamedTensor",
    "OffloadedTensor",
    "OpaqueTensorRef",
    "QScalePerGroupF16",
    "QTensor",
    "QTensorTract",
    "QTensorTractScaleOnly",
    "ResidencyStrategy",
    "TensorPrefetch",
    "TensorResidencyLease",
    "TensorResidencyPool",
    "apply_name_to_tensor_in_module",
    "set_opaque_tensor_in_params_as_ref",
]
