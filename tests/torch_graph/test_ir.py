"""IR building: scalar size arithmetic is folded from the trace, not exported as ops."""

from __future__ import annotations

import torch

from fastnnef.torch_graph.ir import Const, build_ir
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import Fn, export_and_check


def _heads(x: torch.Tensor) -> torch.Tensor:
    # MultiheadAttention-style head split: torch.div(size, n, rounding_mode=...) on sizes.
    half = torch.div(x.size(-1), 2, rounding_mode="floor")
    trunc = torch.div(x.size(1), -2, rounding_mode="trunc")
    return x.reshape(x.size(0), x.size(1), 2, half).sum(-1) * (-trunc)


def test_div_with_rounding_mode_on_sizes_is_folded(tmp_path) -> None:
    x = torch.randn(2, 5, 6)
    traced = trace_model(Fn(_heads), (x,), None, None)
    ir = build_ir(traced)
    assert "aten::div" not in [op.kind for op in ir.ops]
    export_and_check(Fn(_heads), (x,), tmp_path)


def test_folded_sizes_are_constants() -> None:
    traced = trace_model(Fn(lambda x: x.view(x.size(0) * x.size(1), -1)), (torch.randn(3, 4, 2),), None, None)
    ir = build_ir(traced)
    (view,) = [op for op in ir.ops if op.kind == "aten::view"]
    sizes = view.inputs[1].items  # type: ignore[attr-defined]
    assert isinstance(sizes[0], Const) and sizes[0].value == 12
