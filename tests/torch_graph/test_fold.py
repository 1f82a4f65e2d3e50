"""Constant folding (torch_graph/ir/fold.py): ops on constants run once at export time and
become variables; random ops, ``empty``, weights and results much larger than their
inputs stay ops. Every export runs in tract against torch."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.torch_graph.ir import ConstTensor, IRGraph, build_ir
from fastnnef.torch_graph.ir.fold import FOLD_MAX_ELEMENTS
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def ir_of(model: nn.Module, *args: torch.Tensor) -> IRGraph:
    return build_ir(trace_model(model, args, None, None))


def kinds(ir: IRGraph) -> list[str]:
    return [op.kind for op in ir.ops]


def constants(ir: IRGraph) -> list[torch.Tensor]:
    return [v.tensor for op in ir.ops for v in op.inputs if isinstance(v, ConstTensor)]


def graph_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        member = tar.extractfile("graph.nnef")
        assert member is not None
        return member.read().decode()


def windowed(x: torch.Tensor) -> torch.Tensor:
    return x * torch.hann_window(400) + torch.arange(10).float().repeat(40) * 0.5


def test_folded_subgraph_is_one_variable_and_no_op(tmp_path: Path) -> None:
    x = torch.randn(2, 400)
    ir = ir_of(Fn(windowed), x)
    assert kinds(ir) == ["aten::mul", "aten::add"]
    window, ramp = constants(ir)
    torch.testing.assert_close(window, torch.hann_window(400), rtol=0, atol=0)
    torch.testing.assert_close(ramp, torch.arange(10).repeat(40) * 0.5, rtol=0, atol=0)
    text = graph_text(export_and_check(Fn(windowed), (x,), tmp_path))
    assert text.count("variable<scalar>") == 2
    assert "range" not in text and "cos" not in text and "tract_core_cast" not in text


# (id, fn, inputs factory, expected op kinds once folded, dynamic axes or None)
CASES = [
    ("hann_window_f16", lambda x: x * torch.hann_window(8, dtype=torch.float16), lambda: (torch.randn(8).half(),),
     ["aten::mul"], None),
    ("arange_chain_dynamic_batch", lambda x: x + torch.arange(6).float().exp().cumsum(0), lambda: (torch.randn(3, 6),),
     ["aten::add"], {0: {0: "B"}}),
    ("bool_mask", lambda x: x.masked_fill(torch.arange(5) >= 3, 0.0), lambda: (torch.randn(2, 5),),
     ["aten::masked_fill"], None),
    ("int_result", lambda x: x + torch.arange(4).pow(2), lambda: (torch.randint(0, 9, (4,)),), ["aten::add"], None),
    ("split_list", lambda x: x + torch.linspace(0, 1, 6).split([2, 4])[1],
     lambda: (torch.randn(4),), ["aten::add"], None),
    ("causal_mask", lambda x: x + torch.full((4, 4), float("-inf")).triu(1), lambda: (torch.randn(2, 4, 4),),
     ["aten::add"], None),
    # an in-place write into a constant runs at export time too
    ("constant_written", lambda x: x + torch.zeros(3, 4).index_fill_(1, torch.tensor([0, 2]), 1.0).t(),
     lambda: (torch.randn(4, 3),), ["aten::add"], None),
]


@pytest.mark.parametrize("fn, make, ops, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_fold(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], ops: list[str], dyn: Any,
              tmp_path: Path) -> None:
    torch.manual_seed(0)
    inputs = make()
    assert kinds(ir_of(Fn(fn), *inputs)) == ops
    check(fn, inputs, tmp_path, dyn)


def test_large_creation_stays_a_broadcast(tmp_path: Path) -> None:
    """zeros of more than FOLD_MAX_ELEMENTS would be that many zeros in the artefact."""
    n = int(FOLD_MAX_ELEMENTS**0.5) + 1
    fn = Fn(lambda x: x + torch.zeros(n, n))
    x = torch.randn(n, n)
    assert kinds(ir_of(fn, x)) == ["aten::zeros", "aten::add"]
    text = graph_text(export_and_check(fn, (x,), tmp_path))
    assert "variable" not in text and "tract_core_broadcast" in text


def test_random_and_empty_are_not_folded() -> None:
    assert kinds(ir_of(Fn(lambda x: x + torch.rand(3)), torch.randn(3))) == ["aten::rand", "aten::add"]
    assert kinds(ir_of(Fn(lambda x: x + torch.randn_like(x)), torch.randn(3))) == ["aten::randn_like", "aten::add"]
    # empty's bytes are arbitrary: it stays the handler's zeros (then the fill is exported)
    assert kinds(ir_of(Fn(lambda x: x + torch.empty(3).fill_(2.0)), torch.randn(3)))[0] == "aten::empty"


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))
        self.register_buffer("scale", torch.linspace(1.0, 2.0, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.t() * 2.0 + self.scale.sum()


def test_weights_are_not_folded(tmp_path: Path) -> None:
    """Parameters and buffers stay variables named after them (and compressible)."""
    model = Scaled()
    x = torch.randn(2, 3)
    assert "aten::t" in kinds(ir_of(model, x))
    text = graph_text(export_and_check(model, (x,), tmp_path))
    assert "label = 'w'" in text and "label = 'scale'" in text


def test_weights_of_a_torchscript_model_are_not_folded(tmp_path: Path) -> None:
    """An unfrozen scripted model's weights are traced as constants; they still are weights."""
    eager = Scaled().eval().requires_grad_(False)  # the interpreter can't trace grad-requiring constants
    model = torch.jit.script(eager)
    x = torch.randn(2, 3)
    text = graph_text(export_and_check(model, (x,), tmp_path, auto_harden_jit=False))
    assert "label = 'w'" in text and "label = 'scale'" in text
    assert "transpose" in text and "sum_reduce" in text
