"""No import circles inside ``fastnnef``: every module-level import (``if TYPE_CHECKING:``
blocks included: they tie two modules' designs together just the same) points to a module
that does not import it back, directly or through others. Imports inside functions are not
counted; a circle is broken by moving what both sides need down to the module that owns
it, not by deferring an import.

The import graph is read from the sources with ``ast`` (nothing is imported), so the test
needs only the repository.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "fastnnef"



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
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in module_level_imports(tree):
            for name in imported_names(module, path.name == "__init__.py", node):
                while name and name not in files:  # a name inside a module: that module
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):
                    graph[module].add(name)
    return graph


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
    return {
        frozenset({m} | {o for o in reach[m] if m in reach[o]})
        for m in graph
        if m in reach[m]
    }


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
