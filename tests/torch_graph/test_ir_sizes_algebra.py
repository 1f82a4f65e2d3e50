"""The IR's scalar size arithmetic (``ir/sizes.py``) on random chains of traced ops: where
it keeps an expression, that expression gives, at every length of the dynamic axis, what
the same ops compute on Python numbers (true division exact until rounded, as torch's
``/`` then ``ceil``/``floor``/``int()``). Models built on it are run in tract by
``test_size_arithmetic.py``."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from fastnnef.dim import symbol
from fastnnef.torch_graph.ir import sizes as ir_sizes
from fastnnef.torch_graph.ir.data import Const, IRValue, SymInt, SymRatio

Number = int | Fraction
# One step: what it does to an IR value, and to the number it stands for.
Step = tuple[Callable[[IRValue], IRValue], Callable[[Number], Number], str]


def _steps() -> st.SearchStrategy[Step]:
    k = st.integers(1, 6)
    return st.one_of(
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::add", [v, Const("k", k)], "r"), lambda n: n + k,
                         f"+{k}")),
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::mul", [v, Const("k", k)], "r"), lambda n: n * k,
                         f"*{k}")),
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::rsub", [v, Const("k", 0)], "r"), lambda n: -n, "neg")),
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::div", [v, Const("k", k)], "r"),
                         lambda n: Fraction(n) / k, f"/{k}")),
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::floordiv", [v, Const("k", k)], "r"),
                         lambda n: math.floor(Fraction(n) / k), f"//{k}")),
        k.map(lambda k: (lambda v: ir_sizes.arithmetic("aten::remainder", [v, Const("k", k)], "r"),
                         lambda n: n % k, f"%{k}")),
        st.just((lambda v: ir_sizes.rounding("aten::ceil", v, "r", floating=False), lambda n: math.ceil(n), "ceil")),
        st.just((lambda v: ir_sizes.rounding("aten::floor", v, "r", floating=False), lambda n: math.floor(n), "floor")),
    )


def _value(v: IRValue, s: int) -> Number | None:
    """What an IR value stands for when the axis has length ``s`` (None: not written)."""
    if isinstance(v, Const):
        return v.value
    if isinstance(v, SymInt):
        return None if v.expr.is_unknown else v.expr.evaluate({"S": s})
    assert isinstance(v, SymRatio)
    num = v.num if isinstance(v.num, int) else v.num.evaluate({"S": s})
    return Fraction(num, v.den)


@settings(max_examples=300, deadline=None)
@given(st.lists(_steps(), min_size=1, max_size=6), st.integers(0, 30), st.lists(st.integers(0, 60), max_size=5))
def test_expressions_agree_with_the_ops_at_every_length(steps: list[Step], traced: int, lengths: list[int]) -> None:
    value: IRValue = SymInt("s", traced, symbol("S"))
    numbers: dict[int, Number] = {s: s for s in [traced, *lengths]}
    for apply, compute, _ in steps:
        value = apply(value)
        numbers = {s: compute(n) for s, n in numbers.items()}
        for s, n in numbers.items():
            got = _value(value, s)
            assert got is None or got == n, ([name for *_, name in steps], s, value)
        if isinstance(value, Const):
            break  # the symbols cancelled: the same number at every length, checked above
