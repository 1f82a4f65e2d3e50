"""topk, sort and argsort exported and run in tract, compared with torch (one entry per
variant). Inputs are tie-free (a permutation of distinct values), since torch's default
sort may order equal values either way; the stable variants also get ties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from tests.op._table import check


def distinct(*shape: int) -> torch.Tensor:
    """Distinct values in a random order (no ties), scaled to straddle zero."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n).float() - n / 2).reshape(shape) / 7


def ties(*shape: int) -> torch.Tensor:
    return torch.randint(-2, 3, shape).float()


X = lambda: (distinct(3, 7, 5),)  # noqa: E731 - table shorthand
DYN_T = {0: {1: "T"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("topk_last", lambda x: torch.topk(x, 2), X, None),
    ("topk_smallest", lambda x: torch.topk(x, 3, largest=False), X, None),
    ("topk_negative_dim", lambda x: x.topk(4, dim=-2), X, None),
    ("topk_dim0_k1", lambda x: x.topk(1, dim=0), X, None),
    ("topk_unsorted", lambda x: x.topk(2, sorted=False), X, None),  # torch sorts anyway on CPU
    ("topk_values_only", lambda x: x.topk(2, dim=1)[0] * 2, X, None),
    ("topk_indices_only", lambda x: x.topk(3)[1] + 1, X, None),
    ("topk_int", lambda x: x.topk(2), lambda: (torch.randperm(35).reshape(5, 7),), None),
    ("topk_f16", lambda x: x.topk(2), lambda: (distinct(4, 9).half(),), None),
    ("topk_dyn_rows", lambda x: x.topk(2), X, DYN_T),
    ("sort", lambda x: torch.sort(x), X, None),
    ("sort_descending_dim", lambda x: torch.sort(x, dim=1, descending=True), X, None),
    ("sort_stable_ties", lambda x: torch.sort(x, stable=True), lambda: (ties(4, 9),), None),
    ("sort_stable_descending_ties", lambda x: torch.sort(x, dim=0, descending=True, stable=True),
     lambda: (ties(9, 4),), None),
    ("sort_static_axis_dyn_rows", lambda x: x.sort(dim=2)[0], X, DYN_T),
    ("sort_f16", lambda x: x.sort(descending=True), lambda: (distinct(3, 11).half(),), None),
    ("argsort", lambda x: torch.argsort(x), X, None),
    ("argsort_descending_negative_dim", lambda x: x.argsort(dim=-3, descending=True), X, None),
    ("argsort_stable_ties", lambda x: torch.argsort(x, dim=1, stable=True), lambda: (ties(5, 8),), None),
    ("argsort_dyn_rows", lambda x: x.argsort(dim=0), X, DYN_T),
    ("argsort_1d_odd", lambda x: x.argsort(), lambda: (distinct(13),), None),
    # Along a dynamic axis: k is a size (T, 2*T, T//2) that tract computes at run time.
    ("sort_dynamic_axis", lambda x: x.sort(dim=1)[0], X, DYN_T),
    ("argsort_dynamic_axis_descending", lambda x: x.argsort(dim=-2, descending=True), X, DYN_T),
    ("topk_k_of_dynamic_size", lambda x: x.topk(x.shape[1], dim=1)[1], X, DYN_T),
    ("topk_half_of_dynamic_size", lambda x: x.topk(x.shape[1] // 2, dim=1, largest=False), X, DYN_T),
    ("topk_static_axis_k_of_dynamic_size", lambda x: x.topk(x.shape[1] - 5, dim=2)[0], X, DYN_T),
    # k = 2*T, then reshaped and added to x: the ops after the sort see its size as 2*T.
    ("sort_twice_dynamic_reshaped", lambda x: torch.cat([x, x + 100], 1).sort(dim=1)[0].reshape(3, 2, -1)[:, 0]
     + x.flatten(1), X, DYN_T),
]


@pytest.mark.parametrize("fn, inputs, dyn", [pytest.param(f, i, d, id=n) for n, f, i, d in CASES])
def test_sorting(fn: Callable[..., Any], inputs: Callable[[], tuple], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, inputs(), tmp_path, dyn=dyn, atol=0, rtol=0)


def test_sorting_a_scalar_is_refused(tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match="sorting a 0-d tensor"):
        check(lambda x: torch.sort(x)[0], (torch.tensor(3.0),), tmp_path)
