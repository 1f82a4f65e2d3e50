"""The ``tract_core_properties`` fragment: model metadata that tract reads (nnef-format.md §6.8)."""

from __future__ import annotations

from collections.abc import Iterable

from fastnnef.nnef.writer import format_string

PROPERTIES_FRAGMENT_NAME = "tract_core_properties"

def properties_fragment(properties: Iterable[tuple[object, object]]) -> str:
    """The text of the ``tract_core_properties`` fragment for ``(key, value)`` pairs, in order
    (double-quoted, as the reference writes them: tools reading its properties by text hold)."""
    quote = '"'
    entries = ",\n".join(
        f"    ({format_string(key, quote)}, {format_string(value, quote)})"
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
