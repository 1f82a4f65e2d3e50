"""transformers' internals are reached from one adapter module, ``fastnnef/llm/transformers_api.py``
(issue 27): no other module of fastnnef imports a transformers submodule but its public
logging, nor reads one as an attribute (``transformers.cache_utils.X``). AST only."""

from __future__ import annotations

import ast
from pathlib import Path

import fastnnef

PACKAGE = Path(fastnnef.__file__).parent
ADAPTER = PACKAGE / "llm" / "transformers_api.py"
# transformers' submodules that are its public API.
PUBLIC = frozenset({"transformers.utils.logging"})


def internal_uses(source: str) -> list[str]:
    """The transformers submodules ``source`` imports or reads, its public ones left out."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("transformers."):
            found += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" not in PUBLIC]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("transformers.") and a.name not in PUBLIC]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "transformers" \
                and node.attr[:1].islower():
            found.append(f"transformers.{node.attr}")
    return found


def test_only_the_adapter_reaches_transformers_internals():
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ADAPTER and (uses := internal_uses(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, f"reach transformers' internals through fastnnef/llm/transformers_api.py: {offenders}"
    assert internal_uses(ADAPTER.read_text(encoding="utf-8"))  # the adapter is where they are


def test_the_check_finds_each_form():
    source = ("from transformers.cache_utils import DummyLayer\nimport transformers.masking_utils\n"
              "x = transformers.models.llama\nfrom transformers.utils import logging\n"
              "from transformers import AutoConfig\n")
    assert internal_uses(source) == ["transformers.cache_utils.DummyLayer", "transformers.masking_utils",
                                     "transformers.models"]
