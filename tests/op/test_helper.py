"""fastnnef.op.helper's ``IMPLICIT_CAST_SUPPORTED_OPS``: every op, on every pair of dtypes
of ``DTYPES_EXPECTED_IMPLICIT_CAST_ORDER`` that torch accepts, exports and matches torch
through tract (one model per op holds all its pairs; known failures are strict xfails)."""

from __future__ import annotations

import itertools

import pytest
import torch

from fastnnef.op.helper import DTYPES_EXPECTED_IMPLICIT_CAST_ORDER as ORDER
from fastnnef.op.helper import IMPLICIT_CAST_SUPPORTED_OPS
from tests.helpers import export_and_check

BASE = torch.arange(6).reshape(2, 3)
_BOOL = torch.bool
_SMALL_INTS = (torch.int16, torch.int8, torch.uint8)

# (op, dtype a, dtype b) -> why it fails today.
KNOWN_FAILURES = {
    **{(op, _BOOL, _BOOL): f"bool {op} bool is {'and' if op == 'mul' else 'or'} in torch; "
       f"the handler emits {op}, which tract has no bool kernel for" for op in ("mul", "add")},
    **{("pow", a, b): "tract's pow has no i8/i16/u8 kernel (the handler does not widen to i32)"
       for a, b in itertools.combinations_with_replacement(ORDER, 2)
       if torch.promote_types(a, b) in _SMALL_INTS},
}


def _inputs(op: str) -> list[torch.Tensor]:
    base = BASE + 1 if op in ("div", "pow") else BASE  # no division by zero, no 0 ** 0 edge
    return [base.to(dtype) for dtype in ORDER]


def _pairs(op: str) -> list[tuple[int, int]]:
    """Index pairs whose dtypes torch combines for ``op`` (bool - bool raises, ...)."""
    xs = _inputs(op)
    pairs = []
    for i, j in itertools.combinations_with_replacement(range(len(ORDER)), 2):
        try:
            getattr(torch, op)(xs[i], xs[j])
        except RuntimeError:
            continue
        pairs.append((i, j))
    return pairs


class _AllPairs(torch.nn.Module):
    """``op(a[i], b[j])`` for each pair: inputs ``a`` then ``b``, one tensor per dtype (two
    distinct tensors even for equal dtypes, so ``x op x`` simplifications stay out)."""

    def __init__(self, op: str, pairs: list[tuple[int, int]]):
        super().__init__()
        self.op, self.pairs = op, pairs

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = xs[: len(xs) // 2], xs[len(xs) // 2 :]
        return tuple(getattr(torch, self.op)(a[i], b[j]) for i, j in self.pairs)


@pytest.mark.parametrize("op", IMPLICIT_CAST_SUPPORTED_OPS)
def test_mixed_dtypes(op, tmp_path):
    pairs = [(i, j) for i, j in _pairs(op) if (op, ORDER[i], ORDER[j]) not in KNOWN_FAILURES]
    assert len(pairs) >= 30
    xs = _inputs(op)
    export_and_check(
        _AllPairs(op, pairs), tuple(xs + [x.clone() for x in xs]), tmp_path, atol=1e-2, rtol=1e-3,
        check_io_names_qte_match=False,
    )


@pytest.mark.parametrize("op, a, b", [
    pytest.param(op, a, b, marks=pytest.mark.xfail(strict=True, reason=reason), id=f"{op}-{a}-{b}")
    for (op, a, b), reason in KNOWN_FAILURES.items()
])
def test_known_failures(op, a, b, tmp_path):
    xs = _inputs(op)
    export_and_check(_AllPairs(op, [(0, 0)]), (xs[ORDER.index(a)], xs[ORDER.index(b)]), tmp_path)
