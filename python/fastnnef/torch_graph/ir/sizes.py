"""Scalar size arithmetic while the IR is built: folded on constants, symbolic on sizes
of dynamic axes.

Tracing records arithmetic on sizes as ops on 0-d tensors (``x.size(1) * 2`` is
``mul(NumToTensor(size), 2)``). The builder (``builder.py``) hands such ops here when
their inputs are numbers (``Const``), sizes (``SymInt``) or exact ratios of sizes
(``SymRatio``, a true division ``(L - 3) / 3`` not yet rounded). The result is a number,
or an expression tract's sizes accept: ``+ - *``, integer division by a constant (``//``,
``ceil`` as ``(a + k - 1) / k``), ``%`` as ``a - (a / k) * k`` (``fastnnef.dim``). What
tract cannot express (a division by a size, a comparison) becomes ``UNKNOWN``, which
handlers refuse where they need the value, naming the op.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from fastnnef.dim import UNKNOWN, Size, ceil_div
from fastnnef.torch_graph.ir.data import Const, IRValue, SymInt, SymRatio

ARITHMETIC: dict[str, Callable[..., Any]] = {
    "aten::add": operator.add,
    "aten::sub": operator.sub,
    "aten::rsub": lambda a, b: b - a,
    "aten::mul": operator.mul,
    "aten::floordiv": operator.floordiv,
    "aten::floor_divide": operator.floordiv,
    "aten::div": operator.truediv,
    "aten::remainder": operator.mod,
    "aten::neg": operator.neg,
    "aten::eq": operator.eq,
    "aten::ne": operator.ne,
    "aten::lt": operator.lt,
    "aten::gt": operator.gt,
    "aten::le": operator.le,
    "aten::ge": operator.ge,
}
# Rounding a number to an integral value (torch.ceil on a 0-d tensor, math.ceil is not traced).
ROUNDING: dict[str, Callable[[float], int]] = {
    "aten::ceil": math.ceil,
    "aten::floor": math.floor,
    "aten::trunc": math.trunc,
}
# Conversions of a scalar: to a Python number (int(t), t.item()...), or to a 0-d tensor
# of a dtype (torch.tensor(n), t.to(torch.int64)); the traced output type says which.
CASTS = frozenset(
    """aten::Int aten::IntImplicit aten::Float aten::FloatImplicit aten::ScalarImplicit aten::item
    aten::to aten::_to_copy aten::type_as aten::tensor aten::scalar_tensor prim::NumToTensor""".split()
)


def is_scalar(value: IRValue) -> bool:
    """A number, a size or a ratio of sizes (what this module computes on)."""
    if isinstance(value, Const):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    return isinstance(value, (SymInt, SymRatio))


def is_symbolic(value: IRValue) -> bool:
    return isinstance(value, (SymInt, SymRatio))


def _traced(value: IRValue) -> Any:
    return value.value if isinstance(value, Const) else value.traced  # type: ignore[attr-defined]


def _expr(value: IRValue) -> Size | None:
    """The integer expression of a number or size; None for a ratio, a float, an unknown."""
    if isinstance(value, SymInt):
        return None if value.expr.is_unknown else value.expr
    if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    if isinstance(value, Const) and isinstance(value.value, float) and value.value.is_integer():
        return int(value.value)
    return None


def _positive(value: IRValue) -> int | None:
    """A constant positive integer divisor, else None."""
    k = _expr(value)
    return k if isinstance(k, int) and k > 0 else None


def size(name: str, traced: Any, expr: Size | None) -> IRValue:
    """A size value: a constant when the symbols cancelled out, ``UNKNOWN`` when no
    expression could be written."""
    if isinstance(expr, int):
        return Const(name, expr)
    return SymInt(name, traced, UNKNOWN if expr is None else expr)


def ratio(name: str, traced: Any, num: Size | None, den: int) -> IRValue:
    """``num / den`` exactly: an integer size when ``den`` divides the numerator."""
    if num is None:
        return SymInt(name, traced, UNKNOWN)
    if den == 1:
        return size(name, traced, num)
    whole = num // den
    if whole * den == num:
        return size(name, traced, whole)
    return SymRatio(name, traced, num, den)


def arithmetic(kind: str, values: list[IRValue], name: str) -> IRValue:
    """``kind`` on numbers, sizes and ratios (at least one of them symbolic)."""
    a_b = values[:1] if kind == "aten::neg" else values[:2]
    mode = values[2].value if kind == "aten::div" and len(values) == 3 and isinstance(values[2], Const) else None
    numbers = [v.value for v in a_b if isinstance(v, Const)]
    if len(numbers) == len(a_b):
        if mode is not None:  # torch.div(a, b, rounding_mode="floor" | "trunc")
            q = numbers[0] / numbers[1]
            return Const(name, math.floor(q) if mode == "floor" else math.trunc(q))
        return Const(name, ARITHMETIC[kind](*numbers))
    traced = ARITHMETIC[kind](*[_traced(v) for v in a_b])
    if mode is not None:
        traced = math.floor(traced) if mode == "floor" else math.trunc(traced)
    if any(isinstance(v, SymRatio) for v in a_b):
        return _ratio_arithmetic(kind, a_b, name, traced, mode)
    a = _expr(a_b[0])
    if kind == "aten::neg":
        return size(name, traced, None if a is None else -a)
    b = _expr(a_b[1])
    if a is None or b is None:
        return SymInt(name, traced, UNKNOWN)
    k = _positive(a_b[1])
    expr: Size | None
    if kind == "aten::add":
        expr = a + b
    elif kind == "aten::sub":
        expr = a - b
    elif kind == "aten::rsub":
        expr = b - a
    elif kind == "aten::mul":
        expr = a * b
    elif kind in ("aten::floordiv", "aten::floor_divide") or (kind == "aten::div" and mode is not None):
        # Sizes are not negative: floor and trunc agree.
        expr = None if k is None else a // k
    elif kind == "aten::div":
        return ratio(name, traced, a, k) if k is not None else SymInt(name, traced, UNKNOWN)
    elif kind == "aten::remainder":
        expr = None if k is None else a % k
    else:  # comparisons: the traced answer, which tract's sizes cannot express
        expr = None
    return size(name, traced, expr)


def _ratio_arithmetic(kind: str, a_b: list[IRValue], name: str, traced: Any, mode: str | None) -> IRValue:
    """A ratio ``n / d`` plus, minus or times an integer size, or divided by a constant."""
    if kind == "aten::neg":
        r = a_b[0]
        assert isinstance(r, SymRatio)
        return ratio(name, traced, -r.num, r.den)
    first, second = a_b
    if kind == "aten::rsub":
        kind, first, second = "aten::sub", second, first
    if isinstance(first, SymRatio) and isinstance(second, SymRatio) and kind in ("aten::add", "aten::sub"):
        num_a, num_b = first.num * second.den, second.num * first.den
        return ratio(name, traced, num_a + num_b if kind == "aten::add" else num_a - num_b, first.den * second.den)
    r, other = (first, second) if isinstance(first, SymRatio) else (second, first)
    assert isinstance(r, SymRatio)
    n = _expr(other)
    if n is None:
        return SymInt(name, traced, UNKNOWN)
    if kind in ("aten::add", "aten::sub"):
        scaled = n * r.den
        if kind == "aten::add":
            return ratio(name, traced, r.num + scaled, r.den)
        return ratio(name, traced, r.num - scaled if r is first else scaled - r.num, r.den)
    if kind == "aten::mul" and isinstance(n, int):
        return ratio(name, traced, r.num * n, r.den)
    k = _positive(other)
    if kind == "aten::div" and r is first and k is not None:
        if mode is not None:
            return size(name, traced, r.num // (r.den * k))
        return ratio(name, traced, r.num, r.den * k)
    if kind in ("aten::floordiv", "aten::floor_divide") and r is first and k is not None:
        return size(name, traced, r.num // (r.den * k))
    return SymInt(name, traced, UNKNOWN)


def rounding(kind: str, value: IRValue, name: str, floating: bool) -> IRValue:
    """ceil/floor/trunc of a number, a size (itself) or a ratio (an integer division)."""
    if isinstance(value, Const):
        rounded = ROUNDING[kind](value.value)
        return Const(name, float(rounded) if floating else rounded)
    if isinstance(value, SymInt):
        return SymInt(name, value.traced, value.expr)
    assert isinstance(value, SymRatio)
    traced = ROUNDING[kind](value.traced)
    if kind == "aten::ceil":
        return size(name, traced, ceil_div(value.num, value.den))
    return size(name, traced, value.num // value.den)


def cast(value: IRValue, name: str, integral: bool | None) -> IRValue:
    """A scalar converted: to an integer (truncated), to a float, or kept (``None``)."""
    if isinstance(value, Const):
        if integral is None:
            return Const(name, value.value)
        return Const(name, int(value.value) if integral else float(value.value))
    if isinstance(value, SymRatio):
        if integral:
            return size(name, math.trunc(value.traced), value.num // value.den)
        return SymRatio(name, value.traced, value.num, value.den)
    assert isinstance(value, SymInt)
    return SymInt(name, value.traced, value.expr)
