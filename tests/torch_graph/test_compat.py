"""torch_to_nnef's IR names over fastnnef's IR (fastnnef/compat/ir_names.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.torch_graph import (
    MAP_TO_NOP,
    Data,
    PythonConstant,
    TensorVariable,
    TorchModuleIRGraph,
    TorchModuleTracer,
    TorchOp,
    module_tracer_into_ir_graph,
)


def test_tracer_builds_fastnnef_ir() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    tracer = TorchModuleTracer(model, args=(torch.rand(2, 3),))
    graph = module_tracer_into_ir_graph(tracer)
    assert isinstance(graph, TorchModuleIRGraph)
    assert [op.kind for op in graph.ops] == ["aten::linear", "aten::relu"]
    assert all(isinstance(op, TorchOp) for op in graph.ops)
    assert isinstance(graph.inputs[0], TensorVariable) and isinstance(graph.inputs[0], Data)
    assert any(isinstance(v, PythonConstant) for op in graph.ops for v in op.inputs) is False
    assert "aten::detach" in MAP_TO_NOP
    assert tracer.torch_graph is tracer.traced.graph


def test_tracer_refuses_what_it_cannot_do() -> None:
    with pytest.raises(T2NErrorNotImplemented, match="traces module.forward itself"):
        TorchModuleTracer(nn.ReLU(), fn_name="other")
