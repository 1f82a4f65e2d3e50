"""The import structure of ``fastnnef``, read from the sources with ``ast`` (nothing is
imported, so the tests need only the repository):

- No import circles, counted honestly: every import counts, at module level (``if
  TYPE_CHECKING:`` blocks included: they tie two modules' designs together just the same)
  and inside functions (a deferred import hides a circle from Python's loader, not from the
  design), and so does a name taken from a parent package (``from fastnnef.op.custom_extractors
  import X`` in one of its submodules reads the package's ``__init__``, which may import the
  submodule), and so does an import by name (``importlib.import_module`` of a literal name,
  or over a module-level table of them). A circle is broken by moving what both sides need
  down to the module that owns it. The few edges that cannot be otherwise are ``FACADE_EDGES``, each with its reason.
- Stages: every top-level module or package of ``fastnnef`` belongs to one of ``STAGES``,
  in the order an export runs, and imports nothing from a later stage (inside functions
  too), but for ``FACADE_EDGES``.
- ``docs/architecture.md``'s dependency table is ``dependency_table()``:
  ``python tests/test_import_layers.py --write`` regenerates it.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "fastnnef"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The Rust extension: a module without Python source (its stub is ``_native.pyi``).
NATIVE = "fastnnef._native"

# The imports allowed to close a circle or to reach a later stage: (importer, imported) ->
# why. Each is made inside a function (test_facade_edges_are_deferred).
FACADE_EDGES: dict[tuple[str, str], str] = {
    ("fastnnef.reference_names", "fastnnef"): (
        "the reference's drop-in names at the core's own paths (fastnnef.utils.init_empty_weights, ...) "
        "are served by the wing on top, which the package's root loads on first use"
    ),
    ("fastnnef", "fastnnef.compat"): (
        "the package's root is the gate to the drop-in wing; the wing imports the core, so the "
        "root loads it on demand and `import fastnnef` does not"
    ),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _nodes(tree: ast.Module) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, with whether it sits inside a function body (deferred)."""
    pending: list[tuple[ast.AST, bool]] = [(node, False) for node in tree.body]
    while pending:
        node, deferred = pending.pop()
        yield node, deferred
        inside = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        pending.extend((child, inside) for child in ast.iter_child_nodes(node))


def import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it sits inside a function body (deferred)."""
    for node, deferred in _nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, deferred


def imports_by_name(tree: ast.Module) -> Iterator[tuple[str, bool]]:
    """Modules imported by name, with whether the call is deferred: ``import_module("x")``,
    and ``import_module(name)`` in a ``for name in TABLE`` loop over a module-level tuple or
    list of literal names (``op/families.py``'s ``FAMILIES``)."""
    tables = {
        target.id: [e.value for e in node.value.elts]
        for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List))
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)
        for target in node.targets if isinstance(target, ast.Name)
    }
    loops = {
        node.target.id: tables[node.iter.id]
        for node in ast.walk(tree)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Name)
        and node.iter.id in tables
    }
    for node, deferred in _nodes(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) != "import_module":
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield arg.value, deferred
        elif isinstance(arg, ast.Name):
            yield from ((name, deferred) for name in loops.get(arg.id, []))


def imported_modules(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The modules of ``modules`` an import statement reads: ``import a.b`` and ``from a import
    b`` (``b`` a submodule) read ``a.b``; ``from a import name`` reads ``a`` (a package's
    ``__init__`` too, even from inside that package)."""
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: anchored at the importing module's package
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = set()
    for name in wanted:
        while name and name not in modules:  # a name inside a module: that module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level."""
    return _imports(deferred=False)[0]


@functools.cache  # the sources are parsed once per mode (read-only results)
def _imports(deferred: bool) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module -> the package modules it imports, and module -> the top-level names of the
    other packages it imports (the standard library left out); with ``deferred``, imports
    inside functions count too."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = {*files, NATIVE}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    external: dict[str, set[str]] = {m: set() for m in graph}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, inside in import_nodes(tree):
            if inside and not deferred:
                continue
            top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            if isinstance(node, ast.Import) or not node.level:
                if top != "fastnnef":
                    if top not in sys.stdlib_module_names and top != "__future__":
                        external[module].add(top)
                    continue
            graph[module] |= imported_modules(module, path.name == "__init__.py", node, modules)
        for name, inside in imports_by_name(tree):
            if name.startswith("fastnnef.") and (deferred or not inside):
                graph[module] |= imported_modules(module, False, ast.Import([ast.alias(name)]), modules)
    return graph, external


def deferred_only_edges() -> set[tuple[str, str]]:
    """(importer, imported) pairs imported only inside functions."""
    everywhere, module_level = _imports(deferred=True)[0], import_graph()
    return {(m, t) for m, targets in everywhere.items() for t in targets - module_level[m]}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    pending = [start]
    while pending:
        for nxt in graph[pending.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                pending.append(nxt)
    return seen


def import_circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The sets of modules that import each other, directly or through others."""
    reach = {m: reachable(graph, m) for m in graph}
    return {frozenset({m} | {o for o in reach[m] if m in reach[o]}) for m in graph if m in reach[m]}


def test_the_walk_sees_the_package():
    graph = import_graph()
    assert len(graph) > 50  # the right folder, parsed
    # An edge through a plain `from fastnnef.x import Name` and one through a package.
    assert "fastnnef.exceptions" in graph["fastnnef.artefact"]
    assert "fastnnef.tensor.quant.base" in graph["fastnnef.tensor.quant.qtract"]
    assert NATIVE in graph["fastnnef.artefact"]  # `from fastnnef import _native`: the extension, not the package


def _edges(module: str, source: str) -> set[tuple[str, bool]]:
    modules = set(_imports(deferred=True)[0])
    return {
        (target, inside)
        for node, inside in import_nodes(ast.parse(source))
        for target in imported_modules(module, False, node, modules)
    }


def test_the_walk_counts_deferred_imports_and_parent_packages():
    # An import inside a function is an edge (marked deferred), at any depth.
    nested = "def f():\n    if x:\n        from fastnnef.inference_target.tract_cli import TractCli\n"
    assert _edges("fastnnef.check", nested) == {("fastnnef.inference_target.tract_cli", True)}
    # A name read from the importer's own parent package is an edge to that package's __init__;
    # a submodule named through its package is an edge to the submodule only.
    from_parent = "from fastnnef.op.custom_extractors import ModuleInfoExtractor\n"
    assert _edges("fastnnef.op.custom_extractors.gdn", from_parent) == {("fastnnef.op.custom_extractors", False)}
    assert _edges("fastnnef.op.custom_extractors.gdn", "from fastnnef.op.custom_extractors import base\n") \
        == {("fastnnef.op.custom_extractors.base", False)}
    assert _edges("fastnnef.tensor.offload", "from fastnnef import __version__\n") == {("fastnnef", False)}


def test_the_walk_counts_imports_by_name():
    modules = set(_imports(deferred=True)[0])
    source = ("import importlib\nFAMILIES = ('fastnnef.op.aten.shape', 'fastnnef.op.aten.conv')\n"
              "def load():\n    for m in FAMILIES:\n        importlib.import_module(m)\n"
              "importlib.import_module('fastnnef.dim')\n")
    assert sorted(imports_by_name(ast.parse(source))) == [
        ("fastnnef.dim", False), ("fastnnef.op.aten.conv", True), ("fastnnef.op.aten.shape", True),
    ]
    assert "fastnnef.op.aten.shape" in _imports(deferred=True)[0]["fastnnef.op.families"]
    assert "fastnnef.op.aten.shape" in modules


def test_the_walk_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == {frozenset("abc")}


def without_facades(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if (m, t) not in FACADE_EDGES} for m, targets in graph.items()}


def test_no_import_circle():
    graph = _imports(deferred=True)[0]
    circles = import_circles(without_facades(graph))
    deferred = deferred_only_edges()
    assert not circles, "import circles (deferred imports marked *): " + "; ".join(
        " <-> ".join(sorted(c)) + " via " + ", ".join(
            f"{m} -> {t}{'*' if (m, t) in deferred else ''}" for m in sorted(c) for t in sorted(graph[m] & c)
        )
        for c in circles
    )


def test_facade_edges_are_deferred_and_current():
    graph, module_level = _imports(deferred=True)[0], import_graph()
    for (importer, imported), reason in FACADE_EDGES.items():
        assert imported in graph[importer], f"FACADE_EDGES: {importer} no longer imports {imported}; drop the entry"
        assert imported not in module_level[importer], \
            f"{importer} -> {imported} ({reason}) must stay inside a function"


# The stages, in the order an export runs; a module imports from its own stage and earlier
# ones only. A unit is a top-level module or package of fastnnef (``fastnnef`` itself is
# its ``__init__``). The foundation is left out of the dependency table: everything uses it.
FOUNDATION = "foundation"
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FOUNDATION, ("exceptions", "log", "utils", "dim", "version", "reference_names", "console", "collect_env")),
    ("Rust core and the linked tract", ("_native", "check")),
    ("weights that are not plain tensors", ("tensor", "nnef_io")),
    ("trace: torch model -> IR", ("torch_graph", "fx_graph")),
    ("NNEF graph, artefact writing", ("nnef", "artefact", "tensor_export", "compress", "dtypes")),
    ("inference targets", ("inference_target", "model_wrapper")),
    ("conversion: IR -> NNEF", ("op",)),
    ("export", ("export_options", "export", "exporter_run", "fastnnef", "nnef_graph")),
    ("exporters and commands", ("llm", "peft", "remodeler", "nemo", "cli", "cli_exit", "examples")),
    ("exporters built on the LLM one", ("multimodal",)),
    ("the drop-in wing, on top", ("compat",)),
)


def unit(module: str) -> str:
    """The top-level module or package a module belongs to (``fastnnef`` for the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def stage_of() -> dict[str, int]:
    return {u: i for i, (_, units) in enumerate(STAGES) for u in units}


def unit_imports(deferred: bool) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Unit -> the other units it imports; unit -> the third-party packages it imports."""
    graph, external = _imports(deferred)
    units: dict[str, set[str]] = {unit(m): set() for m in graph}
    third: dict[str, set[str]] = {u: set() for u in units}
    for module, targets in graph.items():
        units[unit(module)] |= {unit(t) for t in targets} - {unit(module)}
        third[unit(module)] |= external[module]
    return units, third


def later_stage_imports(graph: dict[str, set[str]], stages: dict[str, int]) -> set[tuple[str, str]]:
    """The imports of a module of a later stage (units without a stage: test_every_unit_has_a_stage)."""
    unknown = len(stages)
    return {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if unknown > stages.get(unit(t), unknown) > stages.get(unit(m), unknown)
    }


def test_every_unit_has_a_stage():
    graph, _ = _imports(deferred=True)
    missing = {unit(m) for m in graph} - set(stage_of())
    assert not missing, f"add {sorted(missing)} to STAGES in tests/test_import_layers.py (and regenerate the table)"
    stale = set(stage_of()) - {unit(m) for m in graph} - {unit(NATIVE)}
    assert not stale, f"STAGES names units that no longer exist: {sorted(stale)}"


def test_no_stage_imports_a_later_stage():
    stages = stage_of()
    at_module_level = later_stage_imports(import_graph(), stages)
    assert not at_module_level, "imports of a later stage: " + "; ".join(
        f"{m} -> {t}" for m, t in sorted(at_module_level)
    )
    in_functions = later_stage_imports(_imports(deferred=True)[0], stages) - set(FACADE_EDGES)
    assert not in_functions, "imports of a later stage (in a function): " + "; ".join(
        f"{m} -> {t}" for m, t in sorted(in_functions)
    )


def test_the_stage_check_finds_a_later_stage():
    graph = {"fastnnef.torch_graph.ir": {"fastnnef.op.registry"}, "fastnnef.op.registry": {"fastnnef.torch_graph.ir"}}
    assert later_stage_imports(graph, stage_of()) == {("fastnnef.torch_graph.ir", "fastnnef.op.registry")}


def _unit_file(name: str) -> str:
    if name == "fastnnef":
        return "`__init__.py`"
    if name == unit(NATIVE):
        return "`_native`"
    path = name.replace(".", "/")
    return f"`{path}/`" if (PACKAGE / path).is_dir() else f"`{path}.py`"


def dependency_table() -> str:
    """docs/architecture.md's dependency table: per stage, each unit's imports of other
    units (module level; those only inside functions in parentheses) and of third-party
    packages."""
    module_level, _ = unit_imports(deferred=False)
    everywhere, third_party = unit_imports(deferred=True)
    foundation = set(STAGES[0][1])
    lines = [
        "| stage | module / package | imports (fastnnef) | imports (other packages) |",
        "|---|---|---|---|",
    ]
    for number, (stage, units) in enumerate(STAGES):
        for name in units:
            own = sorted(module_level.get(name, set()) - foundation)
            late = sorted(everywhere.get(name, set()) - module_level.get(name, set()) - foundation)
            listed = ", ".join(_unit_file(u) for u in own)
            if late:
                listed += (" " if listed else "") + "(" + ", ".join(_unit_file(u) for u in late) + ")"
            others = ", ".join(sorted(third_party.get(name, set())))
            first = name == units[0]
            lines.append(
                f"| {f'{number} {stage}' if first else ''} | {_unit_file(name)} | {listed or '-'} | {others or '-'} |"
            )
    return "\n".join(lines) + "\n"


BEGIN = "<!-- dependency table: generated by `python tests/test_import_layers.py --write` -->\n"
END = "<!-- end of the dependency table -->\n"


def documented_table() -> tuple[str, str, str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    table, _, tail = rest.partition(END)
    assert BEGIN in text and END in rest, f"{ARCHITECTURE} lost its dependency table markers"
    return head, table, tail


def test_architecture_dependency_table_is_the_imports():
    _, table, _ = documented_table()
    assert table == dependency_table(), "docs/architecture.md: run `python tests/test_import_layers.py --write`"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        head, _, tail = documented_table()
        ARCHITECTURE.write_text(head + BEGIN + dependency_table() + END + tail, encoding="utf-8")
    else:
        print(dependency_table(), end="")
