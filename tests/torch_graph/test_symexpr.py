"""Linear size expressions: canonical text, cancellation, and what stays as written."""

from __future__ import annotations

import pytest

from fastnnef.torch_graph import symexpr


@pytest.mark.parametrize("text, expected", [
    ("(P+S)", "P+S"),
    ("(S+P)", "P+S"),
    ("((P+S)-P)", "S"),
    ("(P+S)-S-P", 0),
    ("2*S-(S+1)", "S-1"),
    ("S*3+2", "3*S+2"),
    ("-P+S", "S-P"),  # tract parses no leading minus
    ("-S-1", "0-S-1"),
    ("(S)/2", "(S)/2"),   # floor division is not linear: kept as written
    ("S*P", "S*P"),       # a product of symbols: kept as written
    ("S+", "S+"),         # not an expression: kept as written
])
def test_simplify(text: str, expected: object) -> None:
    assert symexpr.simplify(text) == expected


def test_add_and_subtract() -> None:
    assert symexpr.add("P", "S") == "P+S"
    assert symexpr.add("P+S", "P", -1) == "S"
    assert symexpr.add(3, "S") == "S+3"
    assert symexpr.add(3, 4) == 7
    assert symexpr.add("(S)/2", 1) is None
