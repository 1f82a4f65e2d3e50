"""The declared NNEF op table (fastnnef.nnef.op_table): statements that do not match their
op's declaration fail in fastnnef, naming the node being converted, before anything is
written; and the table covers every op the handlers name and every shape rule."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorConsistency, T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.capabilities import REGISTRY_GATES
from fastnnef.nnef import op_table, shapes
from fastnnef.op.custom_extractors import ModuleInfoExtractor
from tests.helpers import TRACER_ALLOWED

# The modules here are exported whole by their extractors: "auto" uses the tracer for them.
pytestmark = TRACER_ALLOWED

PACKAGE = Path(op_table.__file__).resolve().parent.parent


class Inner(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Outer(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.inner = Inner(fn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) + 1


def _export_with(
    emit: Callable[[Any, Any], None], path: Path, fn: Callable[[torch.Tensor], torch.Tensor] = torch.neg
) -> Path:
    """Export ``Outer(fn)`` with ``Inner`` converted by an extractor that runs ``emit(g, x)``
    (the export checks tract's outputs against ``fn``'s)."""

    class Emitting(ModuleInfoExtractor):
        MODULE_CLASS = Inner

        def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph, inference_target, **kwargs):
            (x,) = g.tensor_inputs()
            emit(g, x)
            return []

    return export_model_to_nnef(Outer(fn), torch.rand(2, 3) - 0.5, path, TractNNEF.latest())


@pytest.mark.parametrize("emit, message", [
    (lambda g, x: g.emit("mull", [x, 2.0]), "NNEF op 'mull' is not declared"),
    (lambda g, x: g.emit("transpose", [g.tmp("unsqueeze", [x], {"axis": [0]})], {"axes": [0, 1, 2]}),
     "NNEF op 'unsqueeze' has no attribute 'axis'; it takes axes"),
    (lambda g, x: g.emit("leaky_relu", [x], {"alpha": "0.1"}),
     "attribute 'alpha' of NNEF op 'leaky_relu' is a scalar, got '0.1' (str)"),
    (lambda g, x: g.emit("tract_core_cast", [x], {"to": "float32"}),
     "attribute 'to' of NNEF op 'tract_core_cast' is a datum type, got 'float32'"),
    (lambda g, x: g.emit("transpose", [x]), "NNEF op 'transpose' needs attribute(s) axes"),
    (lambda g, x: g.emit("slice", [x], {"axes": [0], "begin": [0], "end": [1], "stride": 1}),
     "attribute 'stride' of NNEF op 'slice' is a integer[], got 1 (int)"),
])
def test_a_statement_that_breaks_its_declaration_fails_naming_the_node(tmp_path: Path, emit, message) -> None:
    with pytest.raises(T2NErrorConsistency, match=re.escape(message)) as err:
        _export_with(emit, tmp_path / "m.nnef")
    assert str(err.value).startswith("wired_custom::Inner in inner"), "the error names the node being converted"
    assert not list(tmp_path.iterdir()), "nothing is written"


def test_a_well_formed_statement_exports_and_runs(tmp_path: Path) -> None:
    def leaky(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.leaky_relu(x, 0.25)

    path = _export_with(lambda g, x: g.emit("leaky_relu", [x], {"alpha": 0.25}), tmp_path / "ok.nnef", leaky)
    x = torch.rand(2, 3) - 0.5
    (got,) = TractArtefact.load(path).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(got), leaky(x) + 1)


FRAGMENT = """fragment table_scaled(x: tensor<scalar>, alpha: scalar, shift: scalar = 0.0) -> (y: tensor<scalar>)
{
  y = add(mul(x, alpha), shift);
}"""


def test_a_fragment_declares_its_attributes(tmp_path: Path) -> None:
    def emit(g: Any, x: Any) -> None:
        g.emit(g.fragment("table_scaled", FRAGMENT), [x], {"alpha": 3.0})

    def triple(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    path = _export_with(emit, tmp_path / "f.nnef", triple)
    x = torch.rand(2, 3)
    (got,) = TractArtefact.load(path).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(got), x * 3 + 1)

    def misspelt(g: Any, x: Any) -> None:
        g.emit(g.fragment("table_scaled", FRAGMENT), [x], {"alpah": 3.0})

    with pytest.raises(T2NErrorConsistency,
                       match="NNEF op 'table_scaled' has no attribute 'alpah'; it takes alpha, shift"):
        _export_with(misspelt, tmp_path / "g.nnef")

    def missing(g: Any, x: Any) -> None:
        g.emit(g.fragment("table_scaled", FRAGMENT), [x], {"shift": 1.0})

    with pytest.raises(T2NErrorConsistency, match=re.escape("NNEF op 'table_scaled' needs attribute(s) alpha")):
        _export_with(missing, tmp_path / "h.nnef")


def test_declare_refuses_a_second_different_declaration() -> None:
    assert op_table.declare("add", rule=shapes.elementwise) == op_table.declared("add")  # the same again: kept
    with pytest.raises(T2NErrorInvalidArgument, match="already declared differently"):
        op_table.declare("add", "tract_core", shapes.elementwise)


# --- coverage of the table ------------------------------------------------------------------
def test_every_shape_rule_is_some_ops_rule() -> None:
    rules = {
        name for name, fn in vars(shapes).items()
        if callable(fn) and not name.startswith("_") and getattr(fn, "__module__", "") == shapes.__name__
        and list(inspect.signature(fn).parameters) == ["kind", "args", "attrs"]
    }
    used = {decl.rule.__name__ for decl in op_table.declarations().values() if decl.rule is not None}
    assert rules, "shapes.py defines its rules as functions of (kind, args, attrs)"
    assert rules <= used, f"rules no op declares: {sorted(rules - used)}"


def test_registries_are_the_targets() -> None:
    registries = {d.registry for d in op_table.declarations().values()} - {None}
    assert registries <= set(REGISTRY_GATES), registries
    for name, decl in op_table.declarations().items():
        assert (decl.registry is None) == (not name.startswith("tract_")), name


_EMITTERS = {"emit", "tmp", "emit_multi", "tmp_multi", "out"}


def _named_ops(tree: ast.AST) -> set[str]:
    """Op names a module gives literally: the first argument of emit/tmp calls (and of a
    ``Calc``'s), and module constants named ``*_OP``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in _EMITTERS or called == "c":
                names.add(node.args[0].value)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if any(isinstance(t, ast.Name) and t.id.endswith("_OP") for t in node.targets) and node.value.value:
                names.add(node.value.value)
    return names


def _tract_names(tree: ast.AST) -> set[str]:
    """Every ``tract_*`` identifier-shaped string constant of a module."""
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and re.fullmatch(r"tract_[a-z0-9_]*[a-z0-9]", node.value)
    }


# tract_* strings in these modules that are not ops: registries, fragments, property keys.
_NOT_OPS = set(REGISTRY_GATES) | {f.prefix for f in op_table.FRAGMENTS} | {"tract_check_io_tolerance"}


def test_every_op_the_handlers_name_is_declared() -> None:
    modules = [p for folder in ("op", "llm", "multimodal") for p in (PACKAGE / folder).rglob("*.py")]
    assert len(modules) > 30
    undeclared = {}
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = _named_ops(tree) | (_tract_names(tree) - _NOT_OPS)
        missing = {n for n in names if op_table.declared(n) is None}
        if missing:
            undeclared[str(path.relative_to(PACKAGE))] = sorted(missing)
    assert not undeclared, f"ops named by handlers but not declared in nnef/op_table.py: {undeclared}"


def test_fragments_fastnnef_writes_are_declared(tmp_path: Path) -> None:
    class Running(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.cumprod(x, 1), self.rnn(x)[0]

        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(4, 3, batch_first=True)

    path = export_model_to_nnef(Running(), torch.rand(2, 5, 4), tmp_path / "r.nnef", TractNNEF.latest())
    text = (path / "graph.nnef").read_text() if path.is_dir() else None
    if text is None:
        import tarfile

        with tarfile.open(path) as tar:
            member = tar.extractfile("graph.nnef")
            assert member is not None
            text = member.read().decode()
    fragments = re.findall(r"^fragment (\w+)", text, re.M)
    assert len(fragments) >= 3, fragments  # the properties, the running product's step, the GRU's step
    assert all(op_table.fastnnef_fragment(name) is not None for name in fragments), fragments


def test_user_code_declares_a_tract_op_it_emits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tract_core_silu`` is a tract op fastnnef does not emit itself (it writes
    ``x * sigmoid(x)``): a user's extractor declares it, and the graph gets its registry."""
    def emit(g: Any, x: Any) -> None:
        g.emit("tract_core_silu", [x])

    with pytest.raises(T2NErrorConsistency, match="NNEF op 'tract_core_silu' is not declared"):
        _export_with(emit, tmp_path / "undeclared.nnef", nn.functional.silu)
    monkeypatch.setattr(op_table, "_TABLE", dict(op_table._TABLE))  # this test's declaration ends with it
    op_table.declare("tract_core_silu", "tract_core", shapes.elementwise)
    path = _export_with(emit, tmp_path / "s.nnef", nn.functional.silu)
    x = torch.rand(2, 3) - 0.5
    (got,) = TractArtefact.load(path).run([x.numpy()])
    torch.testing.assert_close(torch.from_numpy(got), nn.functional.silu(x) + 1)


@pytest.mark.parametrize("name, text, message", [
    ("fastnnef_mystery_1", FRAGMENT.replace("table_scaled", "fastnnef_mystery_1"),
     "fragment 'fastnnef_mystery_1' is in fastnnef's namespace (fastnnef_) but not declared"),
    ("table_other", FRAGMENT, "the text of fragment 'table_other' does not define it"),
])
def test_a_fragment_is_checked_when_declared(tmp_path: Path, name: str, text: str, message: str) -> None:
    def emit(g: Any, x: Any) -> None:
        g.emit(g.fragment(name, text), [x], {"alpha": 3.0})

    with pytest.raises(T2NErrorConsistency, match=re.escape(message)):
        _export_with(emit, tmp_path / "f.nnef", lambda x: x * 3)
    assert not list(tmp_path.iterdir())
