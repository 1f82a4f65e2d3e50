"""The symbolic size algebra (``fastnnef.dim``): normal form, evaluation against Python's
integer arithmetic, and tract's text read back."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastnnef import dim
from fastnnef.dim import UNKNOWN, DimExpr, DimSyntaxError, ceil_div, dmax, dmin, parse, symbol

SYMBOLS = ("S", "P", "T")
Bindings = dict[str, int]
# A size built by the algebra, and the same computation on Python ints.
Pair = tuple[int | DimExpr, Callable[[Bindings], int]]


def _leaf() -> st.SearchStrategy[Pair]:
    ints = st.integers(-6, 12).map(lambda k: (k, lambda b, k=k: k))
    syms = st.sampled_from(SYMBOLS).map(lambda s: (symbol(s), lambda b, s=s: b[s]))
    return st.one_of(ints, syms)


def _extend(children: st.SearchStrategy[Pair]) -> st.SearchStrategy[Pair]:
    def binary(op: Callable[[object, object], object]) -> st.SearchStrategy[Pair]:
        return st.tuples(children, children).map(
            lambda ab: (op(ab[0][0], ab[1][0]), lambda b, ab=ab: op(ab[0][1](b), ab[1][1](b))))

    def by_constant(op: Callable[[object, int], object]) -> st.SearchStrategy[Pair]:
        return st.tuples(children, st.integers(1, 7)).map(
            lambda ak: (op(ak[0][0], ak[1]), lambda b, ak=ak: op(ak[0][1](b), ak[1])))

    return st.one_of(
        binary(operator.add), binary(operator.sub), binary(operator.mul),
        binary(lambda x, y: dmin(x, y) if not all(isinstance(v, int) for v in (x, y)) else min(x, y)),
        binary(lambda x, y: dmax(x, y) if not all(isinstance(v, int) for v in (x, y)) else max(x, y)),
        by_constant(operator.floordiv), by_constant(operator.mod),
        by_constant(lambda x, k: ceil_div(x, k) if not isinstance(x, int) else -(-x // k)),
        children.map(lambda a: (-a[0], lambda b, a=a: -a[1](b))),
    )


EXPRESSIONS = st.recursive(_leaf(), _extend, max_leaves=8)
BINDINGS = st.fixed_dictionaries({s: st.integers(0, 40) for s in SYMBOLS})


def _tract_reading(text: str, bindings: Bindings) -> int:
    """How tract reads a size's text: ``/`` is integer division rounded down."""
    return eval(text.replace("/", "//"), {"min": min, "max": max}, dict(bindings))  # noqa: S307


@settings(max_examples=300, deadline=None)
@given(EXPRESSIONS, BINDINGS)
def test_evaluation_agrees_with_python_ints(pair: Pair, bindings: Bindings) -> None:
    expr, python = pair
    value = expr if isinstance(expr, int) else expr.evaluate(bindings)
    assert value == python(bindings), str(expr)


@settings(max_examples=300, deadline=None)
@given(EXPRESSIONS, BINDINGS)
def test_text_round_trips_and_reads_as_tract_reads_it(pair: Pair, bindings: Bindings) -> None:
    expr, python = pair
    text = str(expr)
    assert parse(text) == expr, text
    assert str(parse(text)) == text  # normalizing twice changes nothing
    assert DimExpr(expr) is expr if isinstance(expr, DimExpr) else DimExpr(expr) == expr
    assert _tract_reading(text, bindings) == python(bindings), text
    assert isinstance(expr, int) or not text.startswith("-")  # tract reads no leading minus


@settings(max_examples=200, deadline=None)
@given(EXPRESSIONS, EXPRESSIONS)
def test_equal_expressions_are_one_object(a: Pair, b: Pair) -> None:
    (x, _), (y, _) = a, b
    assert (x + y) - y == x
    assert x + y == y + x
    assert x * y == y * x
    assert 2 * x == x + x
    assert hash(parse(str(x))) == hash(x)


def test_constants_are_ints() -> None:
    s = symbol("S")
    assert s + 1 - 1 == s
    assert (s - s) == 0 and isinstance(s - s, int)
    assert DimExpr("(P+S)-S-P") == 0
    assert DimExpr(7) == 7
    assert dmin(3, 5) == 3
    assert (2 * s + 3) // 2 == s + 1


@pytest.mark.parametrize("text, expected", [
    ("(S+P)", "P+S"),
    ("-P+S", "S-P"),
    ("-S-1", "0-S-1"),
    ("(S)/2", "(S/2)"),
    ("((S+1)/2)*2-((1+S)/2)", "((S+1)/2)"),
    ("((S+3)/4)/2", "((S+3)/8)"),
    ("min(S,10)+1", "min(S,10)+1"),
    ("min(S,S+1)", "S"),
    ("max(P,max(S,3))", "max(P,S,3)"),
    ("S*P*2", "2*P*S"),
])
def test_canonical_text(text: str, expected: str) -> None:
    assert str(parse(text)) == expected


def test_unknown_absorbs_everything() -> None:
    s = symbol("S")
    for result in (UNKNOWN + 1, s * UNKNOWN, UNKNOWN // 2, dmin(s, UNKNOWN), parse("?") - s):
        assert result is UNKNOWN or result == UNKNOWN
    assert str(UNKNOWN) == "?" and UNKNOWN.is_unknown
    with pytest.raises(ValueError):
        UNKNOWN.evaluate({})


@pytest.mark.parametrize("text", ["S+", "S/P", "S/0", "2**S", "f(S)", "", "S)"])
def test_not_a_size(text: str) -> None:
    with pytest.raises(DimSyntaxError):
        parse(text)


def test_division_by_a_size_is_refused() -> None:
    with pytest.raises(ValueError, match="positive constant"):
        symbol("S") // symbol("P")


def test_a_symbolic_size_has_no_int_value() -> None:
    # Handlers call int() on sizes they checked static; a symbolic one fails as an int()
    # of a non-number does (TypeError), naming the size.
    with pytest.raises(TypeError, match=r"the size S\+1 varies with a dynamic axis"):
        int(symbol("S") + 1)
    assert int(DimExpr("S-S+4")) == 4  # a constant is an int already


def test_negative_bounds() -> None:
    assert dim.is_negative(parse("0-S")) and dim.is_negative(parse("0-S-1"))
    assert not dim.is_negative(parse("S-1")) and not dim.is_negative(parse("P-S"))
    assert dim.is_negative(-3) and not dim.is_negative(0)


def test_copies_and_pickles_are_equal() -> None:
    import copy
    import pickle

    for expr in (parse("P+((S+3)/4)-1"), parse("min(S,10)*P"), UNKNOWN):
        assert pickle.loads(pickle.dumps(expr)) == expr
        assert copy.deepcopy(expr) == expr


@settings(deadline=None)  # the first call imports torch
@given(st.lists(st.lists(st.sampled_from([1, 2, 3]), max_size=3), min_size=1, max_size=3))
def test_broadcast_of_constants_is_torchs(shapes: list[list[int]]) -> None:
    """``dim.broadcast_all`` over constants is torch's broadcasting, refusals included."""
    try:
        expected = tuple(torch.broadcast_shapes(*[tuple(s) for s in shapes]))
    except RuntimeError:
        with pytest.raises(ValueError):
            dim.broadcast_all(shapes)
        return
    assert dim.broadcast_all(shapes) == expected


def test_broadcast_of_sizes() -> None:
    s, t = symbol("S"), symbol("T")
    assert dim.broadcast(s, 1) == s and dim.broadcast(1, s) == s
    assert dim.broadcast(s, 4) == 4 and dim.broadcast(4, s) == 4  # S must be 1 or 4
    assert dim.broadcast(s, s) == s and dim.broadcast(s + 1, 1 + s) == s + 1
    assert dim.broadcast(s, t) is UNKNOWN and dim.broadcast(UNKNOWN, UNKNOWN) is UNKNOWN
    assert dim.broadcast(UNKNOWN, 1) is UNKNOWN


# --- one name per concept -------------------------------------------------------------------------
def _aliases(source: str) -> list[str]:
    """Module-level names bound to ``DimExpr`` or ``Size`` themselves, or to ``int | DimExpr``
    (a second name for the symbolic size or for a size)."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            plain = isinstance(node.value, ast.Name) or isinstance(node.value, ast.BinOp)
            if plain and names and names <= {"DimExpr", "Size", "int"} and names & {"DimExpr", "Size"}:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [t.id for t in targets if isinstance(t, ast.Name)]
    return found


def test_a_size_has_one_name_in_the_package():
    package = Path(dim.__file__).parent
    aliases = {str(p.relative_to(package)): a for p in package.rglob("*.py") if (a := _aliases(p.read_text()))}
    assert aliases == {}, f"second names of DimExpr / Size (use fastnnef.dim's): {aliases}"


def test_the_alias_check_finds_one():
    assert _aliases("Sym = DimExpr\nDim = int | DimExpr\nShape = tuple[Size, ...]\n") == ["Sym", "Dim"]
