"""Activations: ReLU family, GELU, SiLU, Mish, Hardswish, Softplus, ELU/SELU, sigmoid/tanh..."""

from __future__ import annotations

from fastnnef.nnef.graph import NTensor
from fastnnef.op.aten._common import elementwise
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler


@handler("aten::relu", args="t")
def relu(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::relu(Tensor self) -> Tensor"""
    return elementwise(ctx, "relu", [x])


@handler("aten::sigmoid", args="t")
def sigmoid(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::sigmoid(Tensor self) -> Tensor"""
    return elementwise(ctx, "sigmoid", [x])


@handler("aten::tanh", args="t")
def tanh(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::tanh(Tensor self) -> Tensor"""
    return elementwise(ctx, "tanh", [x])
