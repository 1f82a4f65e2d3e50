"""Linear expressions over dynamic-axis symbols (``S``, ``P+S``, ``2*S-1``).

The IR writes the size of a dynamic dim as an expression string. Sizes computed by a
model from several axes (a KV cache grown by ``cat`` has ``P+S`` rows; ``arange(P, P+S)``
has ``S`` entries) must compare and simplify, or later ops cannot tell that two dims are
the same. Expressions are normalized as linear combinations of symbols and of integer
quotients by a constant (``(S+1)/2``, tract's floor division of a size, which sizes
rounded up or down to a multiple need: ``((S+3)/4)``); a quotient is kept as one atom,
with what divides exactly taken out of it. Anything else is kept as written.

Example::

    >>> simplify("(P+S)-P")
    'S'
    >>> add("P", "S")
    'P+S'
"""

from __future__ import annotations

import re
from typing import Optional, Union

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")

Linear = dict[str, int]
"""Symbol -> coefficient; the constant term under the key ``""``."""


class _Parser:
    """Recursive descent over ``+ - *``, parentheses, integers and symbols."""

    def __init__(self, text: str):
        self.tokens: list[tuple[str, str]] = []
        for number, ident, other in _TOKEN.findall(text):
            if number:
                self.tokens.append(("int", number))
            elif ident:
                self.tokens.append(("sym", ident))
            elif other.strip():
                self.tokens.append(("op", other))
        self.pos = 0

    def peek(self) -> Optional[tuple[str, str]]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expr(self) -> Optional[Linear]:
        result = self.term()
        while result is not None and self.peek() in (("op", "+"), ("op", "-")):
            sign = 1 if self.take()[1] == "+" else -1
            rhs = self.term()
            if rhs is None:
                return None
            result = _combine(result, rhs, sign)
        return result

    def term(self) -> Optional[Linear]:
        result = self.factor()
        while result is not None and self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            rhs = self.factor()
            if rhs is None:
                return None
            result = _product(result, rhs) if op == "*" else _quotient(result, rhs)
        return result

    def factor(self) -> Optional[Linear]:
        token = self.peek()
        if token is None:
            return None
        kind, text = self.take()
        if kind == "int":
            return {"": int(text)}
        if kind == "sym":
            return {text: 1}
        if text == "-":
            inner = self.factor()
            return None if inner is None else {k: -v for k, v in inner.items()}
        if text == "(":
            inner = self.expr()
            if inner is None or self.peek() != ("op", ")"):
                return None
            self.take()
            return inner
        return None


def _combine(a: Linear, b: Linear, sign: int) -> Linear:
    out = dict(a)
    for key, coef in b.items():
        out[key] = out.get(key, 0) + sign * coef
    return {k: v for k, v in out.items() if v != 0}


def _product(a: Linear, b: Linear) -> Optional[Linear]:
    """Only a constant times a linear expression stays linear."""
    if set(a) <= {""}:
        a, b = b, a
    if not set(b) <= {""}:
        return None
    k = b.get("", 0)
    return {key: coef * k for key, coef in a.items() if coef * k != 0}


def _quotient(a: Linear, b: Linear) -> Optional[Linear]:
    """``a / k`` rounded down, for a constant ``k > 0``: the multiples of ``k`` in ``a``
    come out of the quotient, the rest (coefficients in ``[0, k)``) stays in one atom."""
    if not set(b) <= {""} or b.get("", 0) <= 0:
        return None
    k = b[""]
    whole = {key: coef // k for key, coef in a.items() if coef // k}
    rest = {key: coef % k for key, coef in a.items() if coef % k}
    if not rest:
        return whole
    if set(rest) == {""}:  # only a constant remainder in [1, k): floor adds nothing
        return whole
    text = render(rest)
    atom = f"({text}/{k})" if _is_atom(text) else f"(({text})/{k})"
    return _combine(whole, {atom: 1}, 1)


def _is_atom(text: Union[str, int]) -> bool:
    return isinstance(text, str) and (text.isidentifier() or (text.startswith("(") and _closes_at_end(text)))


def _closes_at_end(text: str) -> bool:
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return False
    return depth == 0


def parse(expr: Union[str, int]) -> Optional[Linear]:
    """The linear form of ``expr``, or None if it is not linear (or not parseable)."""
    if isinstance(expr, int):
        return {"": expr} if expr else {}
    parser = _Parser(expr)
    result = parser.expr()
    if result is None or parser.peek() is not None:
        return None
    return result


def render(linear: Linear) -> Union[str, int]:
    """Canonical text: symbols with positive coefficients first, each group in alphabetical
    order, then the constant (``P+S-1``, ``T-S``); a plain int when no symbol is left. tract's
    parser takes no leading minus, so an all-negative expression starts with ``0``."""
    parts: list[str] = []
    for sym in sorted((k for k in linear if k), key=lambda k: (linear[k] < 0, k)):
        coef = linear[sym]
        sign = "-" if coef < 0 else "+"
        body = sym if abs(coef) == 1 else f"{abs(coef)}*{sym}"
        parts.append(f"{sign}{body}")
    if not parts:
        return linear.get("", 0)
    const = linear.get("", 0)
    if const:
        parts.append(f"{'-' if const < 0 else '+'}{abs(const)}")
    text = "".join(parts)
    return text[1:] if text.startswith("+") else "0" + text


def is_negative(expr: Union[str, int]) -> bool:
    """Whether ``expr`` is below zero for every size its symbols may take (``0-S``,
    ``0-S-1``): a bound counted from the end, as torch reads a negative index."""
    linear = parse(expr)
    return linear is not None and any(linear.values()) and all(v <= 0 for v in linear.values())


def simplify(expr: str) -> Union[str, int]:
    """``expr`` in canonical form if linear, else unchanged."""
    linear = parse(expr)
    return expr if linear is None else render(linear)


def floordiv(a: Union[str, int], k: int) -> Optional[Union[str, int]]:
    """``a // k`` for a constant ``k > 0`` (tract's ``/`` on sizes), normalized."""
    la = parse(a)
    q = None if la is None or k <= 0 else _quotient(la, {"": k})
    return None if q is None else render(q)


def mod(a: Union[str, int], k: int) -> Optional[Union[str, int]]:
    """``a % k`` for a constant ``k > 0``, as ``a - (a/k)*k``."""
    q = floordiv(a, k)
    multiple = None if q is None else times(q, k)
    return None if multiple is None else add(a, multiple, -1)


def times(a: Union[str, int], k: int) -> Optional[Union[str, int]]:
    """``a * k`` for a constant ``k``."""
    la = parse(a)
    return None if la is None else render({key: coef * k for key, coef in la.items() if coef * k})


def product(a: Union[str, int], b: Union[str, int]) -> Optional[Union[str, int]]:
    """``a * b`` normalized where one side is a constant; else the product of both, as
    written (a product of sizes, ``S*P``, is a valid size for tract but not linear)."""
    la, lb = parse(a), parse(b)
    if la is None or lb is None:
        return None
    linear = _product(la, lb)
    if linear is not None:
        return render(linear)
    ra, rb = render(la), render(lb)
    return f"{ra if _is_atom(ra) else f'({ra})'}*{rb if _is_atom(rb) else f'({rb})'}"


def add(a: Union[str, int], b: Union[str, int], sign: int = 1) -> Optional[Union[str, int]]:
    """``a + sign*b`` simplified, or None if either side is not linear."""
    la, lb = parse(a), parse(b)
    if la is None or lb is None:
        return None
    return render(_combine(la, lb, sign))
