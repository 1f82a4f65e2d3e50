"""torch_to_nnef's TorchScript hardening chain (torch_graph.jit_passes, jit_inline,
jit_mutation, harden): each pass on a small scripted model that has its pattern (the
pattern is gone, the graph still computes the same for the example inputs), then the whole
chain through ``harden_jit_for_export`` and an export checked in tract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import fastnnef.torch_graph as torch_graph
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.torch_graph import jit_passes
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.torch_graph.jit_inline import (
    class_is_importable,
    inline_unresolvable_submodules,
)
from fastnnef.torch_graph.jit_mutation import functionalize_view_inplace_copy
from tests.helpers import export_and_check


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dim() == 2:  # once folded, the tuple built here meets its TupleIndex / TupleUnpack
            return x + 1, x * 2
        return x, x


# A class whose module no import resolves, as in a TorchScript archive shipped without source.
Pair.__module__ = "h10_not_an_installed_package.blocks"


class Everything(nn.Module):
    """One pattern of each pass."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pair = Pair()
        self.lin = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2, "2-d input expected"  # size -> constant comparison -> constant If
        both = self.pair(x)
        first = both[0]  # TupleIndex
        a, b = self.pair(x)  # TupleUnpack
        if x.size(1) > 3:  # size query deciding control flow
            y = first + a
        else:
            y = b
        assert bool(x.abs().sum() >= 0), "never raised"  # an assertion on data
        if x.sum() > 0:  # data-dependent branch
            y = y * 3.0
        return self.lin(y.view(x.size(0), -1) + x.data)  # size feeding a shape; .data


X = torch.rand(2, 5)


def _frozen() -> torch.jit.ScriptModule:
    return torch.jit.freeze(torch.jit.script(Everything().eval()))


def _kinds(graph: torch._C.Graph) -> list[str]:
    return [n.kind() for n in jit_passes.walk_nodes(graph)]


def _run(module: torch.jit.ScriptModule, *args: Any) -> Any:
    return torch._C._jit_interpret_graph(module.graph, (module._c, *args))


CONSTANT_IFS = [
    jit_passes.replace_size_calls_with_constants,
    jit_passes.fold_constant_scalar_arithmetic,
    jit_passes.fold_constant_ifs,
]

# (pass, passes run before it to create its pattern, node kinds gone after it)
PASSES: list[tuple[Callable[..., int], list[Callable[..., int]], set[str]]] = [
    (jit_passes.replace_size_calls_with_constants, [], {"aten::dim"}),
    (jit_passes.fold_constant_scalar_arithmetic, [jit_passes.replace_size_calls_with_constants],
     {"aten::eq"}),
    (jit_passes.fold_constant_ifs, CONSTANT_IFS[:2], set()),
    (jit_passes.fold_tuple_index_through_tuple_construct, CONSTANT_IFS, {"prim::TupleIndex"}),
    (jit_passes.fold_tuple_unpack_through_tuple_construct, CONSTANT_IFS, {"prim::TupleUnpack"}),
    (jit_passes.strip_prim_data, [], {"prim::data"}),
    (jit_passes.strip_assertion_ifs, [], {"prim::RaiseException"}),
    (jit_passes.fold_data_dependent_ifs, [], {"prim::If"}),
]


@pytest.mark.parametrize("run_pass, before, gone", PASSES, ids=[p.__name__ for p, _, _ in PASSES])
def test_each_pass_on_its_pattern(run_pass, before, gone):
    module = _frozen()
    graph = module.graph
    takes_inputs = dict(jit_passes.SPECIALIZATION_PASSES)
    inputs = (module._c, X)

    def call(p: Callable[..., int]) -> int:
        return p(graph, inputs) if takes_inputs[p] else p(graph)

    for p in before:
        call(p)
    expected = _run(module, X)
    ifs_before = _kinds(graph).count("prim::If")
    assert call(run_pass) >= 1
    kinds = _kinds(graph)
    assert not gone & set(kinds), kinds
    if run_pass is jit_passes.fold_constant_ifs:
        assert kinds.count("prim::If") < ifs_before
    torch.testing.assert_close(_run(module, X), expected)
    assert call(run_pass) == 0  # nothing left to do: the pattern is gone


def test_size_queries_that_shape_tensors_stay():
    module = _frozen()
    jit_passes.replace_size_calls_with_constants(module.graph, (module._c, X))
    sizes = [n for n in module.graph.nodes() if n.kind() == "aten::size"]
    assert len(sizes) == 1  # the one in view(x.size(0), -1)
    assert sizes[0].output().uses()[0].user.kind() == "prim::ListConstruct"


def test_inputs_that_do_not_fit_the_graph_are_refused():
    module = _frozen()
    with pytest.raises(T2NErrorInvalidArgument, match="running the TorchScript graph on the example inputs failed"):
        jit_passes.fold_data_dependent_ifs(module.graph, (module._c, "not a tensor"))


def test_inline_unresolvable_submodules_keeps_importable_calls():
    assert class_is_importable("__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear")
    assert not class_is_importable("__torch__.h10_not_an_installed_package.blocks.Pair")
    module = harden_jit_for_export.__globals__["_own_copy"](torch.jit.script(Everything().eval()))
    expected = _run(module, X)
    assert inline_unresolvable_submodules(module.graph, module) == 2
    calls = [n for n in jit_passes.walk_nodes(module.graph) if n.kind() == "prim::CallMethod"]
    assert [c.inputsAt(0).type().qualified_name().rsplit(".", 1)[-1] for c in calls] == ["Linear"]
    torch.testing.assert_close(_run(module, X), expected)
    assert inline_unresolvable_submodules(module.graph, module) == 0


@pytest.mark.parametrize("freeze", [True, False])
def test_harden_runs_the_chain_and_exports(freeze, tmp_path):
    model = torch.jit.script(Everything().eval())
    before = str(model.graph)
    diagnostics: dict[str, Any] = {}
    hardened = harden_jit_for_export(model, X, freeze=freeze, diagnostics=diagnostics)
    assert str(model.graph) == before  # the user's model keeps its graphs
    names = [p.__name__ for p, _ in jit_passes.SPECIALIZATION_PASSES]
    expected_keys = ["froze", *([] if freeze else ["inline_unresolvable_submodules"]), *names]
    assert list(diagnostics) == expected_keys and diagnostics["froze"] is freeze
    assert all(diagnostics[n] >= 1 for n in names if n != "fold_constant_ifs" or freeze), diagnostics
    assert {"prim::If", "prim::RaiseException", "prim::TupleIndex", "prim::data"}.isdisjoint(_kinds(hardened.graph))
    with torch.no_grad():  # (a first call with grad would make TorchScript keep requires_grad)
        torch.testing.assert_close(hardened(X), model(X))
    export_and_check(hardened, X, tmp_path, name="hardened.nnef", auto_harden_jit=False)
    export_and_check(model, X, tmp_path, name="auto.nnef")  # the chain inside the export


def test_harden_falls_back_to_inlining_in_training_mode(caplog):
    model = torch.jit.script(Everything())
    diagnostics: dict[str, Any] = {}
    harden_jit_for_export(model, (X,), diagnostics=diagnostics)
    assert diagnostics["froze"] is False and diagnostics["inline_unresolvable_submodules"] == 2
    assert "freezing needs eval mode" in caplog.text


def test_reexported_from_torch_graph():
    for name in ["harden_jit_for_export", "inline_unresolvable_submodules", "functionalize_view_inplace_copy",
                 *(p.__name__ for p, _ in jit_passes.SPECIALIZATION_PASSES)]:
        assert callable(getattr(torch_graph, name)), name


# --- jit_mutation ----------------------------------------------------------------------------------


def _writes(x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.clone()
    y[:, 1:3] = v  # a slice of a slice
    row = y[0]  # a view taken before the next write, read after it
    y[0, -1] = v[0, 0] * 5  # a select of a select
    block = y[1:3]
    block[:, 2] = v[:2, 1]  # through two views, the outer one kept
    return y * 2, row + 1, block


def test_functionalize_view_inplace_copy():
    x, v = torch.rand(4, 5), torch.rand(4, 2)
    graph = torch.jit.trace(_writes, (x, v)).graph.copy()
    assert functionalize_view_inplace_copy(graph) == 3
    kinds = _kinds(graph)
    assert "aten::copy_" not in kinds and kinds.count("aten::slice_scatter") >= 2
    functional = torch._C._create_function_from_graph("h10_functional", graph)
    torch.testing.assert_close(functional(x, v), _writes(x, v))
    # the rewritten graph needs no aliasing: fresh inputs give torch's results too
    x2, v2 = torch.rand(4, 5), torch.rand(4, 2)
    torch.testing.assert_close(functional(x2, v2), _writes(x2, v2))


def _strided_write(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.t()[0] = x[:, 0] * 0  # through a transpose: not expressible as select/slice scatters
    return y + 1


def test_functionalize_leaves_inexpressible_writes_with_a_warning(caplog):
    x = torch.rand(3, 3)
    graph = torch.jit.trace(_strided_write, (x,)).graph.copy()
    assert functionalize_view_inplace_copy(graph) == 0
    assert "aten::copy_" in _kinds(graph)
    assert "keeps their value from before the write" in caplog.text
