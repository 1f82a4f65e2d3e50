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
    ("(S)/2", "(S/2)"),   # floor division by a constant: one atom
    ("(2*S+3)/2", "S+1"),  # what divides exactly comes out of the quotient
    ("((S+1)/2)*2-((1+S)/2)", "((S+1)/2)"),
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
    assert symexpr.add("(S)/2", 1) == "(S/2)+1"
    assert symexpr.add("min(S,10)", 1) is None  # not parsed: no arithmetic on it


def _value(expr: object, s: int) -> int:
    """tract's reading of a size expression (``/`` is floor division of a size)."""
    return expr if isinstance(expr, int) else eval(str(expr).replace("/", "//"), {"S": s})  # noqa: S307


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_floordiv_mod_ceil_match_python(k: int) -> None:
    for text, expected in [
        (symexpr.floordiv("S", k), lambda s: s // k),
        (symexpr.mod("S", k), lambda s: s % k),
        (symexpr.mod(symexpr.add(k, symexpr.mod("S", k) or 0, -1), k), lambda s: (k - s % k) % k),
        (symexpr.floordiv(symexpr.add("S", k - 1) or 0, k), lambda s: -(-s // k)),
        (symexpr.add("S", symexpr.mod(symexpr.add(k, symexpr.mod("3*S+1", k) or 0, -1), k) or 0),
         lambda s: s + (k - (3 * s + 1) % k) % k),
    ]:
        assert text is not None
        for s in range(0, 40):
            assert _value(text, s) == expected(s), (text, s)
