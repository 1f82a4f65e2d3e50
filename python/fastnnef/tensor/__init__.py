"""Tensor types (torch_to_nnef's ``torch_to_nnef.tensor``): the quantized weights."""

from fastnnef.tensor.quant import QScalePerGroupF16, QTensor, QTensorTract, QTensorTractScaleOnly

__all__ = ["QScalePerGroupF16", "QTensor", "QTensorTract", "QTensorTractScaleOnly"]
