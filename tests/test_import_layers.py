"""The import structure of ``fastnnef``, read from the sources with ``ast`` (nothing is
imported, so the tests need only the repository):

- No import circles: every module-level import (``if TYPE_CHECKING:`` blocks included: they
  tie two modules' designs together just the same) points to a module that does not import
  it back, directly or through others. Imports inside functions are not counted; a circle is
  broken by moving what both sides need down to the module that owns it, not by deferring
  an import.
- Stages: every top-level module or package of ``fastnnef`` belongs to one of ``STAGES``,
  in the order an export runs, and imports nothing from a later stage (imports inside
  functions included, but for the few named with their reason).
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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements outside any function or class body (under ``if``/``try`` too)."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for block in ("body", "orelse", "finalbody", "handlers"):
            pending.extend(getattr(node, block, None) or [])


def imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted names an import statement may refer to (a module, or a name inside one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: anchored at the importing module's package
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level (its own parents excluded:
    importing a submodule runs its packages' ``__init__`` anyway)."""
    return _imports(deferred=False)[0]


@functools.cache  # the sources are parsed once per mode (read-only results)
def _imports(deferred: bool) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module -> the package modules it imports, and module -> the top-level names of the
    other packages it imports (the standard library left out); with ``deferred``, imports
    inside functions and classes count too."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in [*files, NATIVE]}
    external: dict[str, set[str]] = {m: set() for m in graph}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        nodes = (
            [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            if deferred
            else module_level_imports(tree)
        )
        for node in nodes:
            names = imported_names(module, path.name == "__init__.py", node)
            if not names[0].startswith("fastnnef") and names[0]:
                top = names[0].split(".")[0]
                if top not in sys.stdlib_module_names and top != "__future__":
                    external[module].add(top)
                continue
            for name in names:
                if name == NATIVE or name.startswith(NATIVE + "."):
                    graph[module].add(NATIVE)
                    continue
                while name and name not in files:  # a name inside a module: that module
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):
                    graph[module].add(name)
    return graph, external


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


def test_the_walk_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == {frozenset("abc")}


def test_no_import_circle():
    circles = import_circles(import_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)


# The stages, in the order an export runs; a module imports from its own stage and earlier
# ones only. A unit is a top-level module or package of fastnnef (``fastnnef`` itself is
# its ``__init__``). The foundation is left out of the dependency table: everything uses it.
FOUNDATION = "foundation"
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FOUNDATION, ("exceptions", "log", "utils", "dim", "compat", "compat.process_patch", "compat.empty_weights")),
    ("Rust core and the linked tract", ("_native", "check")),
    ("weights that are not plain tensors", ("tensor", "nnef_io", "compat.offload_loading")),
    ("trace: torch model -> IR", ("torch_graph", "compat.ir_names", "compat.jit_mutation")),
    ("NNEF graph, artefact writing", ("nnef", "artefact", "tensor_export", "compress")),
    ("inference targets", ("inference_target", "compat.tract_downloader")),
    ("conversion: IR -> NNEF", ("op", "compat.extractors", "compat.op_helper")),
    ("export", ("export", "fastnnef")),
    ("exporters and commands", ("llm", "peft", "nemo", "cli", "cli_exit", "examples")),
    ("exporters built on the LLM one", ("multimodal",)),
)
# Imports inside a function that reach a later stage, each with its reason. Keep it short:
# what an earlier stage needs from a later one usually belongs in the earlier one.
LATER_STAGE_IMPORTS_IN_FUNCTIONS = {
    # the tract CLI fallback of the check builds its command with TractCli
    ("fastnnef.check", "fastnnef.inference_target.tract_cli"),
}


def unit(module: str) -> str:
    """The top-level module or package a module belongs to (``fastnnef`` for the package).

    ``compat/`` is the exception: each of its modules serves one reference path and stands at
    that path's stage (``compat.ir_names`` beside ``torch_graph``), so it is its own unit."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "compat":
        return f"compat.{parts[2]}"
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
    in_functions = later_stage_imports(_imports(deferred=True)[0], stages) - LATER_STAGE_IMPORTS_IN_FUNCTIONS
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
    path = name.replace(".", "/")  # compat.ir_names -> compat/ir_names.py
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
