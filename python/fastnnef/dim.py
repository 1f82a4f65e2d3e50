"""The size of a dimension that varies with a dynamic axis: one typed, normalized expression.

An export's dynamic axes are named by symbols (``S``, ``P``). Every size computed from
them — by the IR while it is built (``torch_graph``), by the NNEF shape rules
(``nnef/shapes.py``), by handlers — is a ``DimExpr``: integers and symbols combined by
``+ - *``, floor division and remainder by a positive constant, ``min``/``max`` and
ceiling division (``ceil_div``). It is imported by both ``torch_graph`` and ``nnef`` and
imports neither.

Normal form: a polynomial (integer coefficients) over *atoms* — symbols, quotients
``(n / k)`` and ``min``/``max`` of expressions — so equal sizes are equal objects
(``S+1-1 == S``, ``2*S == S+S``). A quotient keeps only the part of its numerator that
``k`` does not divide (``(2*S+3)/2`` is ``S+1``); ``a % k`` is ``a - k*(a/k)``;
``ceil_div(a, k)`` is ``(a+k-1)/k``. Sizes are never negative, which the normal form uses
only where it says so (``is_negative``).

What is constant is an ``int``: every operation, and ``DimExpr(text)``, returns a plain
int when no symbol is left. ``UNKNOWN`` is a dynamic size whose expression was lost (it
absorbs every operation, renders ``?``).

``str()`` writes tract's size syntax, as graph.nnef carries it: terms with positive
coefficients first, each group in the alphabetical order of its text, then the constant
(``P+S-1``); ``/`` is integer division; tract's parser takes no leading minus, so an
all-negative expression starts with ``0`` (``0-S``). ``parse`` reads that text back.

Example::

    >>> S = symbol("S")
    >>> str(S + 1 - 1), str(ceil_div(S, 4)), str(dmin(S, 10))
    ('S', '((S+3)/4)', 'min(S,10)')
    >>> DimExpr("(P+S)-P") == S
    True
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

__all__ = ["DimExpr", "DimSyntaxError", "UNKNOWN", "Size", "symbol", "parse", "ceil_div", "dmin", "dmax",
           "is_negative", "broadcast", "broadcast_all", "windows"]

Size = Union[int, "DimExpr"]
"""A dimension: an int, or a ``DimExpr`` when it varies with a dynamic axis."""


class DimSyntaxError(ValueError):
    """Text that is not a size expression in tract's syntax."""


# --- atoms ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Symbol:
    name: str

    def text(self) -> str:
        return self.name

    def value(self, bindings: Mapping[str, int]) -> int:
        return bindings[self.name]


@dataclass(frozen=True)
class _Quotient:
    """``num / k`` rounded down, ``k > 1``; ``num`` has coefficients in ``[0, k)``."""

    num: DimExpr
    k: int

    def text(self) -> str:
        inner = str(self.num)
        return f"({inner}/{self.k})" if _is_atom_text(inner) else f"(({inner})/{self.k})"

    def value(self, bindings: Mapping[str, int]) -> int:
        return self.num.evaluate(bindings) // self.k


@dataclass(frozen=True)
class _Extremum:
    """``min`` or ``max`` of two or more sizes, at least one symbolic."""

    op: str
    args: tuple[Size, ...]

    def text(self) -> str:
        return f"{self.op}({','.join(str(a) for a in self.args)})"

    def value(self, bindings: Mapping[str, int]) -> int:
        values = [a if isinstance(a, int) else a.evaluate(bindings) for a in self.args]
        return min(values) if self.op == "min" else max(values)


_Atom = _Symbol | _Quotient | _Extremum
_Monomial = tuple[_Atom, ...]  # a product of atoms, sorted by text; () is the constant term
_Poly = dict[_Monomial, int]


def _is_atom_text(text: str) -> bool:
    """Whether ``text`` needs no parentheses as an operand of ``*`` or ``/``."""
    if text.isidentifier():
        return True
    if not text.startswith("(") and not re.fullmatch(r"(min|max)\(.*\)", text):
        return False
    depth = 0
    start = text.index("(")
    for i, char in enumerate(text[start:], start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return False
    return depth == 0


def _mono_text(mono: _Monomial) -> str:
    return "*".join(atom.text() for atom in mono)


# --- the expression ------------------------------------------------------------------------
class DimExpr:
    """A normalized symbolic size (see the module docstring). Immutable and hashable; equal
    expressions compare equal. ``DimExpr(x)`` takes text in tract's syntax, an int or a
    ``DimExpr``, and returns an int when ``x`` is constant."""

    __slots__ = ("_terms", "_unknown", "_text", "_hash")
    _terms: tuple[tuple[_Monomial, int], ...]
    _unknown: bool
    _text: str
    _hash: int

    def __new__(cls, source: str | int | DimExpr) -> DimExpr:
        if isinstance(source, DimExpr):
            return source
        if isinstance(source, int) and not isinstance(source, bool):
            return source  # type: ignore[return-value]
        if isinstance(source, str):
            return parse(source)  # type: ignore[return-value]
        raise TypeError(f"a size is an int, a DimExpr or its text, not {type(source).__name__}")

    @classmethod
    def _make(cls, poly: _Poly, unknown: bool = False) -> Size:
        """The normal form of ``poly``: an int when only a constant is left."""
        terms = {m: c for m, c in poly.items() if c}
        if not unknown and set(terms) <= {()}:
            return terms.get((), 0)
        self = object.__new__(cls)
        const = terms.pop((), 0)
        ordered = sorted(terms.items(), key=lambda mc: (mc[1] < 0, _mono_text(mc[0])))
        self._terms = tuple(ordered) + (((), const),) if const else tuple(ordered)
        self._unknown = unknown
        self._text = "?" if unknown else _render(self._terms)
        self._hash = hash(self._text)
        return self

    # -- what it is --
    @property
    def is_unknown(self) -> bool:
        """A dynamic size whose expression was lost."""
        return self._unknown

    @property
    def is_linear(self) -> bool:
        """A sum of symbols and quotients times constants (no product of two atoms, no
        ``min``/``max``)."""
        return not self._unknown and all(
            len(mono) <= 1 and not any(isinstance(a, _Extremum) for a in mono) for mono, _ in self._terms
        )

    @property
    def constant(self) -> int:
        """Its constant term (``-1`` for ``S-1``)."""
        return dict(self._terms).get((), 0)

    def has_division(self) -> bool:
        """Whether a quotient (tract's integer division) appears in it."""
        return any(isinstance(a, _Quotient) for mono, _ in self._terms for a in mono)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """Its value when each symbol takes the size ``bindings`` gives it."""
        if self._unknown:
            raise ValueError("the size of an unknown dim cannot be evaluated")
        total = 0
        for mono, coef in self._terms:
            product = coef
            for atom in mono:
                product *= atom.value(bindings)
            total += product
        return total

    # -- arithmetic --
    def _poly(self) -> _Poly:
        return dict(self._terms)

    def __add__(self, other: Size) -> Size:
        return _add(self, other, 1)

    def __radd__(self, other: Size) -> Size:
        return _add(other, self, 1)

    def __sub__(self, other: Size) -> Size:
        return _add(self, other, -1)

    def __rsub__(self, other: Size) -> Size:
        return _add(other, self, -1)

    def __neg__(self) -> Size:
        return _add(0, self, -1)

    def __mul__(self, other: Size) -> Size:
        return _mul(self, other)

    def __rmul__(self, other: Size) -> Size:
        return _mul(other, self)

    def __floordiv__(self, k: Size) -> Size:
        return _floordiv(self, _divisor(k))

    def __mod__(self, k: Size) -> Size:
        d = _divisor(k)
        return self - (self // d) * d

    # -- identity and text --
    def __eq__(self, other: object) -> bool:
        return isinstance(other, DimExpr) and self._text == other._text

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"DimExpr({self._text!r})"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (DimExpr, (self._text,))

    def __int__(self) -> int:
        # A DimExpr is never a constant (those normalize to int), so int() of one fails, as
        # it did before this method existed (TypeError), naming the size: handlers call int()
        # on sizes they checked static (ctx.static, is_static), and the type check sees it.
        raise TypeError(f"the size {self._text} varies with a dynamic axis: it has no int value")


def _render(terms: tuple[tuple[_Monomial, int], ...]) -> str:
    parts: list[str] = []
    for mono, coef in terms:
        sign = "-" if coef < 0 else "+"
        if not mono:
            parts.append(f"{sign}{abs(coef)}")
            continue
        body = _mono_text(mono)
        parts.append(f"{sign}{body}" if abs(coef) == 1 else f"{sign}{abs(coef)}*{body}")
    text = "".join(parts)
    return text[1:] if text.startswith("+") else "0" + text


UNKNOWN: DimExpr = DimExpr._make({}, unknown=True)  # type: ignore[assignment]
"""A dynamic size whose expression was lost; every operation on it gives ``UNKNOWN``."""


def symbol(name: str) -> DimExpr:
    """The size of the dynamic axis ``name``."""
    if not name.isidentifier():
        raise DimSyntaxError(f"a dynamic axis symbol is an identifier, not {name!r}")
    return DimExpr._make({(_Symbol(name),): 1})  # type: ignore[return-value]


def _poly_of(x: Size) -> _Poly:
    if isinstance(x, DimExpr):
        return x._poly()
    if isinstance(x, int) and not isinstance(x, bool):
        return {(): x} if x else {}
    raise TypeError(f"a size is an int or a DimExpr, not {type(x).__name__}")


def _unknown(*xs: Size) -> bool:
    return any(isinstance(x, DimExpr) and x.is_unknown for x in xs)


def _add(a: Size, b: Size, sign: int) -> Size:
    if _unknown(a, b):
        return UNKNOWN
    out = _poly_of(a)
    for mono, coef in _poly_of(b).items():
        out[mono] = out.get(mono, 0) + sign * coef
    return DimExpr._make(out)


def _mul(a: Size, b: Size) -> Size:
    if _unknown(a, b):
        return UNKNOWN
    out: _Poly = {}
    for ma, ca in _poly_of(a).items():
        for mb, cb in _poly_of(b).items():
            mono = tuple(sorted(ma + mb, key=lambda atom: atom.text()))
            out[mono] = out.get(mono, 0) + ca * cb
    return DimExpr._make(out)


def _divisor(k: Size) -> int:
    if isinstance(k, int) and not isinstance(k, bool) and k > 0:
        return k
    raise ValueError(f"a size divides only by a positive constant (tract's sizes), not by {k}")


def _floordiv(a: Size, k: int) -> Size:
    """``a // k``: what ``k`` divides comes out of the quotient, the rest stays in one atom."""
    if _unknown(a):
        return UNKNOWN
    if k == 1:
        return a
    poly = _poly_of(a)
    whole = {m: c // k for m, c in poly.items() if c // k}
    rest = {m: c % k for m, c in poly.items() if c % k}
    if set(rest) <= {()}:  # only a constant remainder in [0, k): the floor adds nothing
        return DimExpr._make(whole)
    num = DimExpr._make(rest)
    inner = next(iter(rest)) if len(rest) == 1 else ()
    if rest.get(inner) == 1 and len(inner) == 1 and isinstance(inner[0], _Quotient):
        # (n / j) / k is n / (j*k) for positive divisors
        return _add(DimExpr._make(whole), _floordiv(inner[0].num, inner[0].k * k), 1)
    whole[(_Quotient(num, k),)] = whole.get((_Quotient(num, k),), 0) + 1  # type: ignore[arg-type]
    return DimExpr._make(whole)


def ceil_div(a: Size, k: int) -> Size:
    """``ceil(a / k)`` for a size ``a`` and a constant ``k > 0``: ``(a + k - 1) / k``."""
    return _floordiv(_add(a, _divisor(k) - 1, 1), k)


def _extremum(op: str, args: tuple[Size, ...]) -> Size:
    if not args:
        raise ValueError(f"{op} of no size")
    if _unknown(*args):
        return UNKNOWN
    flat: list[Size] = []
    for a in args:  # min(min(a, b), c) is min(a, b, c)
        atom = _single_atom(a)
        flat += list(atom.args) if isinstance(atom, _Extremum) and atom.op == op else [a]
    kept: list[Size] = []
    for a in flat:
        for i, b in enumerate(kept):
            gap = _add(a, b, -1)  # two sizes a constant apart: which one is smaller is known
            if isinstance(gap, int):
                kept[i] = a if (gap < 0) == (op == "min") else b
                break
        else:
            kept.append(a)
    if len(kept) == 1:
        return kept[0]
    ordered = tuple(sorted(kept, key=lambda x: (isinstance(x, int), str(x))))
    return DimExpr._make({(_Extremum(op, ordered),): 1})


def _single_atom(x: Size) -> _Atom | None:
    """The atom ``x`` is, if it is one atom alone (coefficient 1)."""
    if isinstance(x, DimExpr) and len(x._terms) == 1 and x._terms[0][1] == 1 and len(x._terms[0][0]) == 1:
        return x._terms[0][0][0]
    return None


def dmin(*args: Size) -> Size:
    """``min`` of sizes (folded where two differ by a constant)."""
    return _extremum("min", args)


def dmax(*args: Size) -> Size:
    """``max`` of sizes (folded where two differ by a constant)."""
    return _extremum("max", args)


def is_negative(x: Size) -> bool:
    """Whether ``x`` is below zero for every size its symbols may take (``0-S``,
    ``0-S-1``): a bound counted from the end, as torch reads a negative index. Atoms are
    sizes, never negative."""
    if isinstance(x, int):
        return x < 0
    return not x.is_unknown and all(c <= 0 for _, c in x._terms)


# --- broadcasting ---------------------------------------------------------------------------
def broadcast(a: Size, b: Size) -> Size:
    """The size two broadcast dims give (torch's, numpy's and tract's rule, the one the IR's
    dynamic marks and nnef/shapes.py both apply): a 1 yields; of a constant and a symbolic
    size the constant (the other must be 1 or equal to it); two different symbolic sizes
    give ``UNKNOWN``. Raises ``ValueError`` for two different constants, neither 1."""
    if a == b and not (isinstance(a, DimExpr) and a.is_unknown):
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"dims {a} and {b} do not broadcast")
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return UNKNOWN


def broadcast_all(shapes: Sequence[Sequence[Size]]) -> tuple[Size, ...]:
    """The broadcast of ``shapes``, aligned on their trailing dims."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Size] = []
    for i in range(rank):
        size: Size = 1
        for s in shapes:
            k = i - rank + len(s)
            if k >= 0:
                size = broadcast(size, s[k])
        out.append(size)
    return tuple(out)


def windows(size: Size, kernel: Size, stride: int = 1, dilation: int = 1, padding: int = 0) -> Size:
    """How many windows of ``kernel`` cells (``dilation`` apart), every ``stride``, fit in
    ``size`` cells padded by ``padding`` in all: ``(size + padding - dilation*(kernel-1) -
    1) / stride + 1``, the output length of convolutions, pools, unfold and STFT frames."""
    return _floordiv(_add(_add(size, padding - 1, 1), _mul(dilation, _add(kernel, 1, -1)), -1), _divisor(stride)) + 1


# --- parsing -------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\S))")


class _Parser:
    """Recursive descent: ``+ -`` over ``* / %`` over unary minus over integers, symbols,
    ``min(..)``/``max(..)``, parentheses and ``?``."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        for match in _TOKEN.finditer(text):
            self.tokens.append(match.group(0).strip())
            pos = match.end()
        if text[pos:].strip():
            raise self.error()
        self.pos = 0

    def error(self) -> DimSyntaxError:
        return DimSyntaxError(f"{self.text!r} is not a size expression (integers, symbols, "
                              "+ - * / %, min, max, parentheses)")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise self.error()
        self.pos += 1
        return token

    def expr(self) -> Size:
        result = self.term()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            result = _add(result, self.term(), sign)
        return result

    def term(self) -> Size:
        result = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            rhs = self.unary()
            if op == "*":
                result = _mul(result, rhs)
                continue
            if not isinstance(rhs, int) or rhs <= 0:
                raise DimSyntaxError(f"{self.text!r}: a size divides only by a positive constant")
            result = _floordiv(result, rhs) if op == "/" else _add(result, _mul(_floordiv(result, rhs), rhs), -1)
        return result

    def unary(self) -> Size:
        if self.peek() == "-":
            self.take()
            return _add(0, self.unary(), -1)
        return self.primary()

    def primary(self) -> Size:
        token = self.take()
        if token.isdigit():
            return int(token)
        if token == "?":
            return UNKNOWN
        if token == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if token in ("min", "max") and self.peek() == "(":
            self.take("(")
            args = [self.expr()]
            while self.peek() == ",":
                self.take()
                args.append(self.expr())
            self.take(")")
            return _extremum(token, tuple(args))
        if token.isidentifier():
            return symbol(token)
        raise self.error()


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Size:
    parser = _Parser(text)
    result = parser.expr()
    if parser.peek() is not None:
        raise parser.error()
    return result


def parse(text: str) -> Size:
    """Read a size written in tract's syntax (what ``str()`` writes): an int when it is
    constant. Raises ``DimSyntaxError`` on anything else."""
    return _parse_cached(text.strip())
