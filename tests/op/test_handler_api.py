"""The handler API is closed (op/registry.py, op/context.py): an aten handler family reads
its node only through the declared argument kinds and ``OpContext``, shares helpers only
through public names, and names its version gates. The rule on private names holds for the
whole package: no module imports another module's private name (``_x``); what two modules
share lives in a shared module under a public name.

The checks read the source of every module under ``op/aten/`` (the private-name rule: of
every module of ``fastnnef``; AST, no import), so a regression names the file and line.
Each one also runs on a snippet that breaks it, so that a check which finds nothing is
known to be able to find something.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

import fastnnef.op.aten as aten_package
from fastnnef.exceptions import T2NErrorConsistency
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.op.families import load_handlers
from fastnnef.op.registry import OpRegistry

ATEN = Path(aten_package.__file__).parent
PACKAGE = "fastnnef.op.aten"
FASTNNEF = ATEN.parent.parent
# What of torch_graph a handler may import: symbolic-size arithmetic, no IR value.
def _modules() -> list[Path]:
    return sorted(p for p in ATEN.glob("*.py") if p.name != "__init__.py")


def ir_imports(tree: ast.Module, module: str) -> list[str]:
    """Imports of the IR (any torch_graph module but symbolic-size arithmetic)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "fastnnef.torch_graph":
            names = [f"{node.module}.{a.name}" for a in node.names]  # submodules
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [
            f"{module}:{node.lineno}: imports {name}" for name in names
            if name.startswith("fastnnef.torch_graph")
        ]
    return found


def node_reads(tree: ast.Module, module: str) -> list[str]:
    """Reads of the node behind the context (``ctx.node...``, ``ctx.out_value()``)."""
    return [
        f"{module}:{node.lineno}: reads .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("node", "out_value", "outputs", "emitted")
    ]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(FASTNNEF.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_private_imports(tree: ast.Module, module: str, modules: set[str]) -> list[str]:
    """Private names (``_x``, not dunders) that ``module`` takes from another fastnnef module:
    ``from fastnnef.a import _x``, or ``b._x`` where ``b`` is a fastnnef module imported by
    name. A private *module* (``op/aten/_math.py``, ``_native``) is a shared module: importing
    it is fine, and the Rust extension's names are its API."""
    found, aliases = [], {}

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fastnnef") and node.module != module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                elif private(alias.name):
                    found.append(f"{module}:{node.lineno}: imports {full}")
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("fastnnef.")})
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
            and aliases[node.value.id] not in (module, "fastnnef._native") and private(node.attr)
        ):
            found.append(f"{module}:{node.lineno}: uses {aliases[node.value.id]}.{node.attr}")
    return found


def literal_gates(tree: ast.Module, module: str) -> list[str]:
    """``since=`` values that are not a literal name of ``VERSION_GATES``, and version
    numbers compared by hand (``SemanticVersion`` built from a literal, ``tract_version``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "since":
            if not (isinstance(node.value, ast.Constant) and node.value.value in VERSION_GATES):
                found.append(f"{module}:{node.value.lineno}: since={ast.unparse(node.value)}")
        if isinstance(node, ast.Attribute) and node.attr == "tract_version":
            found.append(f"{module}:{node.lineno}: reads tract_version (ask ctx.caps.supports(gate))")
        if isinstance(node, ast.Name) and node.id == "SemanticVersion":
            found.append(f"{module}:{node.lineno}: builds a SemanticVersion")
    return found


CHECKS: dict[str, Callable[[ast.Module, str], list[str]]] = {
    "ir_imports": ir_imports,
    "node_reads": node_reads,
    "literal_gates": literal_gates,
}

# One breach of each check (the module is taken to be op/aten/layout.py).
BREACHES = {
    "ir_imports": "from fastnnef.torch_graph.ir import TensorValue\n",
    "node_reads": "def f(ctx):\n    return ctx.node.inputs[0]\n",
    "literal_gates": "@handler('aten::x', args='t', since='0.21.14')\ndef f(ctx, x):\n    return x\n",
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_every_handler_family_keeps_to_the_api(check):
    found = []
    for path in _modules():
        found += CHECKS[check](ast.parse(path.read_text(), str(path)), path.stem)
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_check_finds_a_breach(check):
    assert CHECKS[check](ast.parse(BREACHES[check]), "layout") != []


def test_no_module_takes_another_modules_private_name():
    paths = sorted(FASTNNEF.rglob("*.py"))
    modules = {_module_name(p) for p in paths} | {"fastnnef._native"}
    assert len(modules) > 150
    found = []
    for path in paths:
        found += package_private_imports(ast.parse(path.read_text(), str(path)), _module_name(path), modules)
    assert found == [], "\n".join(found)


def test_the_package_rule_finds_a_breach():
    modules = {"fastnnef.llm.api", "fastnnef.exporter_run", "fastnnef.op.aten._math", "fastnnef._native"}
    breach = ("from fastnnef.llm.api import _timed\n"
              "from fastnnef.llm import api as llm_api\n"
              "x = llm_api._compressor\n")
    assert package_private_imports(ast.parse(breach), "fastnnef.multimodal.api", modules) == [
        "fastnnef.multimodal.api:1: imports fastnnef.llm.api._timed",
        "fastnnef.multimodal.api:3: uses fastnnef.llm.api._compressor",
    ]
    allowed = ("from fastnnef import _native\nfrom fastnnef.op.aten import _math\n"
               "from fastnnef.exporter_run import timed\nx = _native._private_ok\n")
    assert package_private_imports(ast.parse(allowed), "fastnnef.multimodal.api", modules) == []


def test_the_allowed_forms_pass():
    ok = (
        "from fastnnef.dim import dmin\n"
        "from fastnnef.op.aten import shape\n"
        "from fastnnef.op.aten._common import typed_scalar\n"
        "@handler('aten::x', args='t', since='scatter_reductions')\n"
        "def f(ctx, x):\n    return shape.pieces(ctx, x, ctx.kind)\n"
    )
    tree = ast.parse(ok)
    assert [c(tree, "layout") for c in CHECKS.values()] == [[]] * len(CHECKS)


def test_since_names_a_gate():
    registry = OpRegistry()
    with pytest.raises(T2NErrorConsistency, match="is not a version gate.*VERSION_GATES"):
        registry.register("aten::x", args="t", since="0.21.14")
    registry.register("aten::x", args="t", since="scatter_reductions")(lambda ctx, x: x)
    spec = registry.lookup("aten::x", VERSION_GATES["scatter_reductions"].first)
    assert spec is not None and spec.since == VERSION_GATES["scatter_reductions"].first


def test_every_registered_gate_is_in_the_table():
    registry = load_handlers()
    firsts = {gate.first for gate in VERSION_GATES.values()}
    gated = {
        (spec.kind, spec.since) for kind in registry.kinds()
        for spec in registry.overloads(registry.lookup(kind, None))  # type: ignore[arg-type]
        if spec.since is not None
    }
    assert all(since in firsts for _, since in gated)


def test_overloads_are_tried_in_order():
    """The first registered overload is the one listed (its doc is the kind's); lookup
    returns it whatever the number of overloads."""
    registry = OpRegistry()

    def first(ctx, x):
        """aten::y(Tensor self) -> Tensor"""

    def second(ctx, x, y):
        """aten::y.other(Tensor self, Tensor other) -> Tensor"""

    registry.register("aten::y", args="t")(first)
    registry.register("aten::y", args="t t", overload="other")(second)
    spec = registry.lookup("aten::y", None)
    assert spec is not None and spec.fn is first
    assert [s.fn for s in registry.overloads(spec)] == [first, second]
    with pytest.raises(T2NErrorConsistency, match="registered twice"):
        registry.register("aten::y", args="t t", overload="other")(second)
