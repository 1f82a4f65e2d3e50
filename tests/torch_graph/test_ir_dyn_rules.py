"""The IR's dynamic marks come from the rule of each op's kind (torch_graph/ir/dynamic.py),
never from matching traced sizes: a dynamic axis traced at 1 or at a size that a static dim
also has keeps its own mark, broadcasting follows ``dim.broadcast`` (the rule of
nnef/shapes.py), and a kind without a rule gets unknown marks rather than a guess. Each
exportable case also runs in tract at other lengths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fastnnef.dim import UNKNOWN, DimExpr
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.ir import TensorValue, build_ir
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import Fn, export_and_check


def _marks_of(fn: Callable[..., Any], x: torch.Tensor, axes: dict[int, str], kind: str) -> list[tuple[Any, ...]]:
    ir = build_ir(trace_model(Fn(fn), (x,), ["x"], None), {0: axes})
    outs = [o for op in ir.ops if op.kind == kind for o in op.outputs]
    items = [i for o in outs for i in (o.items if hasattr(o, "items") else [o])]
    return [t.dyn for t in items if isinstance(t, TensorValue)]


S = DimExpr("S")

CASES = [
    # S traced at 1 beside a static unit dim: still S (a traced-size match called it static or 1)
    pytest.param(lambda x: (x + torch.ones(1, 8)).flatten(), torch.randn(1, 8), {0: "S"}, "aten::add",
                 [(S, None)], id="add-unit-traced-axis"),
    # S traced at 4 beside a static 4 that broadcasts against it: static 4 wins (S must be 1 or 4)
    pytest.param(lambda x: x.unsqueeze(0) * torch.ones(4, 1, 4), torch.randn(4, 4), {0: "S"}, "aten::mul",
                 [(None, S, None)], id="mul-broadcast"),
    pytest.param(lambda x: torch.nn.functional.linear(x, torch.ones(3, 4)).flatten(), torch.randn(1, 4), {0: "S"},
                 "aten::linear", [(S, None)], id="linear"),
    pytest.param(lambda x: sum(x.chunk(2, dim=1)), torch.randn(3, 4), {0: "S"}, "aten::chunk",
                 [(S, None), (S, None)], id="chunk-static-dim"),
    pytest.param(lambda x: x.softmax(-1).reshape(-1, 2), torch.randn(1, 4), {0: "S"}, "aten::softmax",
                 [(S, None)], id="softmax"),
    pytest.param(lambda x: torch.cumsum(x, 0) * 2, torch.randn(5, 3), {0: "S"}, "aten::cumsum", [(S, None)],
                 id="cumsum"),
    # GPT-2's Conv1D: rows of the flattened input by the weight's columns
    pytest.param(lambda x: torch.addmm(torch.ones(5), x.view(-1, x.size(-1)), torch.ones(4, 5)).view(-1, 2, 5),
                 torch.randn(3, 2, 4), {0: "S"}, "aten::addmm", [(2 * S, None)], id="addmm"),
    # rotary embeddings written with complex numbers (DeepSeek-V2): polar broadcasts
    pytest.param(lambda x: torch.view_as_real(torch.polar(torch.ones(1, 4), x) * torch.polar(x, x)).flatten(1),
                 torch.randn(3, 4), {0: "S"}, "aten::polar", [(S, None), (S, None)], id="polar"),
    # an alias takes its kind's rule; a reflection pad of a dynamic axis adds to it
    pytest.param(lambda x: torch.divide(x, 2.0).reshape(-1, 4), torch.randn(2, 4), {0: "S"}, "aten::divide",
                 [(S, None)], id="alias-divide"),
    pytest.param(lambda x: torch._C._nn.reflection_pad1d(x, [2, 1]).reshape(-1, 3), torch.randn(1, 3, 6),
                 {2: "S"}, "aten::reflection_pad1d", [(None, None, S + 3)], id="reflection-pad"),
    pytest.param(lambda x: torch.nn.functional.pixel_shuffle(x, 2).reshape(1, 2, -1), torch.randn(1, 8, 3, 4),
                 {2: "S"}, "aten::pixel_shuffle", [(None, None, 2 * S, None)], id="pixel-shuffle"),
    pytest.param(lambda x: x.tile((2, 1, 3)).reshape(2, -1, 6), torch.randn(5, 2), {0: "S"}, "aten::tile",
                 [(None, S, None)], id="tile"),
]


@pytest.mark.parametrize("fn, x, axes, kind, expected", CASES)
def test_marks_by_rule(fn: Callable[..., Any], x: torch.Tensor, axes: dict[int, str], kind: str,
                       expected: list[tuple[Any, ...]], tmp_path: Path) -> None:
    assert _marks_of(fn, x, axes, kind) == expected
    target = TractNNEF.latest().with_dynamic_axes({"x": axes})
    grown = torch.randn(*[s + 3 if d in axes else s for d, s in enumerate(x.shape)])
    export_and_check(Fn(fn), (x,), tmp_path, target=target, input_names=["x"], run_inputs=[grown])


def test_two_axes_broadcast_to_unknown() -> None:
    """Two different dynamic sizes broadcast to a size the IR cannot write (S or T, one of
    them 1, or both equal)."""
    ir = build_ir(trace_model(Fn(lambda x, y: x + y), (torch.randn(3), torch.randn(3)), ["x", "y"], None),
                  {0: {0: "S"}, 1: {0: "T"}})
    (out,) = [op.outputs[0] for op in ir.ops if op.kind == "aten::add"]
    assert isinstance(out, TensorValue) and out.dyn == (UNKNOWN,)


def test_kind_without_rule_is_unknown() -> None:
    """An op whose kind has no rule gets every output dim unknown, static ones too: no
    guess from the traced sizes (kthvalue has no rule)."""
    marks = _marks_of(lambda x: torch.kthvalue(x, 1, dim=1), torch.randn(5, 4), {0: "S"}, "aten::kthvalue")
    assert marks == [(UNKNOWN,), (UNKNOWN,)]
