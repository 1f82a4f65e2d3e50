"""Fixtures shared by the op tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch

from fastnnef.nnef.graph import NTensor
from fastnnef.nnef.op_table import infer
from fastnnef.nnef.shapes import unknown
from fastnnef.op.context import OpContext
from fastnnef.torch_graph.ir import CUSTOMOP_KIND

# The quantized engines whose default qconfig quantizes weights per tensor and per channel.
PER_TENSOR, PER_CHANNEL = "qnnpack", "x86"


@pytest.fixture(params=[PER_TENSOR, PER_CHANNEL], ids=["per-tensor", "per-channel"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The quantized engine (a process-wide torch setting), restored afterwards."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = request.param
    yield request.param
    torch.backends.quantized.engine = previous


@pytest.fixture(autouse=True)
def emitted_shapes_follow_the_op_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """One set of rules: the shape ``ctx.emit`` gives a node's output (the IR's dynamic
    marks, torch_graph/ir/dynamic.py) is the shape the NNEF op's rule derives from its
    operands (nnef/shapes.py) wherever the rule knows a dim; an unknown mark where the rule
    knows the size is a missing IR rule. Module calls are exempt: a user's extractor may
    leave its outputs' dims unknown (``ModuleInfoExtractor.output_dims``)."""
    emit = OpContext.emit

    def checked(self: OpContext, kind: str, args: Sequence[Any], attrs: dict[str, Any] | None = None,
                out: int = 0, value: Any = None, shape: Any = None, dtype: str | None = None) -> NTensor:
        tensor = emit(self, kind, args, attrs, out, value, shape, dtype)
        derived = infer(kind, args, dict(attrs or {})) if shape is None else None
        if derived is not None and not self.kind.startswith(CUSTOMOP_KIND):
            ir, rule = tensor.shape, derived[1]
            assert len(ir) == len(rule) and all(
                unknown(r) or (a == r and not unknown(a)) for a, r in zip(ir, rule)
            ), f"{self.kind} -> {kind}: the IR marks {ir}, the NNEF rule derives {rule}"
        return tensor

    monkeypatch.setattr(OpContext, "emit", checked)
