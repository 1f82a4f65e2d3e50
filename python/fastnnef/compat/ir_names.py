"""torch_to_nnef's IR names, over fastnnef's IR, for code that imports them from
``torch_to_nnef.torch_graph`` (module extractors, test harnesses). Drop-in only: served at
``fastnnef.torch_graph``; no export path uses them.

fastnnef's IR (torch_graph/ir/ and the modules it re-exports) is not the reference's: it is built in one pass from
one trace, and its values carry shapes, dtypes and dynamic marks. These names are the
closest fastnnef classes, so ``isinstance`` checks and type hints keep working (the
value names are defined in ``torch_graph/ir_data.py``, at the reference's path):

| torch_to_nnef | fastnnef |
|---|---|
| ``Data`` | ``IRValue`` (any IR value) |
| ``TensorVariable`` | ``TensorValue`` |
| ``PythonConstant`` | ``Const`` |
| ``FixedTensorList`` | ``ListValue`` |
| ``TorchOp`` | ``IROp`` |
| ``TorchModuleIRGraph`` | ``IRGraph`` |
| ``MAP_TO_NOP`` | the kinds the IR treats as identities |
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.torch_graph.ir import NOOP_KINDS, IRGraph, IROp, build_ir
from fastnnef.torch_graph.trace import TracedModel, trace_model

__all__ = ["MAP_TO_NOP", "TorchModuleIRGraph", "TorchModuleTracer", "TorchOp", "module_tracer_into_ir_graph"]

TorchOp = IROp
TorchModuleIRGraph = IRGraph
MAP_TO_NOP = NOOP_KINDS


class TorchModuleTracer:
    """Traces ``module(*args)`` once, as the exporter does (torch_to_nnef's signature).
    Only ``forward`` is traced, and a pre-traced module cannot be reused: fastnnef traces
    with its own IO flattening."""

    def __init__(
        self,
        module: nn.Module,
        traced_module: torch.jit.TracedModule | None = None,
        fn_name: str = "forward",
        args: Sequence[Any] | None = None,
    ) -> None:
        if fn_name != "forward" or traced_module is not None:
            raise T2NErrorNotImplemented(
                "TorchModuleTracer traces module.forward itself: pass neither fn_name nor traced_module"
            )
        self.mod = module
        self.args = args

    @cached_property
    def traced(self) -> TracedModel:
        """The trace (computed on first use)."""
        return trace_model(self.mod, self.args if self.args is not None else (), None, None)

    @property
    def torch_graph(self) -> torch._C.Graph:
        """The traced, inlined TorchScript graph."""
        return self.traced.graph


def module_tracer_into_ir_graph(module_tracer: TorchModuleTracer, *args: Any, **kwargs: Any) -> IRGraph:
    """fastnnef's IR of a tracer's trace (no dynamic axes)."""
    return build_ir(module_tracer.traced)
