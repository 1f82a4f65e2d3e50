"""The ``tract_core_properties`` fragment: model metadata that tract reads (nnef-format.md §6.8)."""

from __future__ import annotations

import re
from typing import Iterable, Tuple

PROPERTIES_FRAGMENT_NAME = "tract_core_properties"

# Characters that cannot appear raw in an NNEF string literal (nnef-format.md §6.2).
_ESCAPED = {"\\": "\\\\", '"': '\\"', "'": "\\'"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Some tract versions render graph.nnef as a template before parsing, so `{{`, `{%` and `{#`
# must never appear: a space goes between `{` and the next character.
_TEMPLATE_OPENER = re.compile(r"\{(?=[{%#])")


def nnef_string_literal(value: object) -> str:
    """``str(value)`` as a double-quoted NNEF string literal that tract's parser accepts.

    Backslashes and both quote kinds are backslash-escaped, control characters (newlines,
    tabs, ...) become spaces, and the template openers ``{{``, ``{%``, ``{#`` get a space
    after the ``{`` (``{ {``). Unlike torch_to_nnef, quotes are kept (escaped) rather than
    swapped for ``'``, which tract rejects.
    """
    text = "".join(_ESCAPED.get(c, c) for c in str(value))
    text = _CONTROL.sub(" ", text)
    return '"' + _TEMPLATE_OPENER.sub("{ ", text) + '"'


def properties_fragment(properties: Iterable[Tuple[object, object]]) -> str:
    """The text of the ``tract_core_properties`` fragment for ``(key, value)`` pairs, in order."""
    entries = ",\n".join(
        f"    ({nnef_string_literal(key)}, {nnef_string_literal(value)})"
        for key, value in properties
    )
    return (
        f"fragment {PROPERTIES_FRAGMENT_NAME}(\n"
        ") -> (properties: (string, tensor<scalar>)[])\n"
        "{\n"
        "  properties = [\n"
        f"{entries}\n"
        "  ];\n"
        "}\n"
    )
