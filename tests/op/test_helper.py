"""fastnnef.op.helper's ``IMPLICIT_CAST_SUPPORTED_OPS``: every op, on every pair of dtypes
of ``DTYPES_EXPECTED_IMPLICIT_CAST_ORDER`` that torch accepts, exports and matches torch
through tract (one model per op holds all its pairs)."""

from __future__ import annotations

import itertools

import pytest
import torch

from fastnnef.op.helper import DTYPES_EXPECTED_IMPLICIT_CAST_ORDER as ORDER
from fastnnef.op.helper import IMPLICIT_CAST_SUPPORTED_OPS
from tests.helpers import export_and_check

BASE = torch.arange(6).reshape(2, 3)


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
    pairs = _pairs(op)
    assert len(pairs) >= 30
    xs = _inputs(op)
    export_and_check(
        _AllPairs(op, pairs), tuple(xs + [x.clone() for x in xs]), tmp_path, atol=1e-2, rtol=1e-3,
        check_io_names_qte_match=False,
    )
