"""Reductions exported and run in tract, compared with torch (one entry per variant)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 6, shape)


X = lambda: (randn(3, 4, 5),)  # noqa: E731 - table shorthand
DYN_B = {0: {0: "B"}}
DYN_T = {0: {1: "T"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("sum_dim", lambda x: x.sum(1), X, None),
    ("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), X, None),
    ("sum_all", lambda x: x.sum(), X, None),
    ("sum_negative_dim", lambda x: torch.sum(x, -1), X, None),
    ("sum_dtype", lambda x: x.sum(1, dtype=torch.float64), X, None),
    ("sum_int", lambda x: x.sum(0), lambda: (ints(3, 4),), None),
    ("sum_int32_promotes", lambda x: x.sum(), lambda: (ints(3, 4).int(),), None),
    ("sum_bool", lambda x: (x > 0).sum(1), X, None),
    ("max_dim_bool", lambda x: (x > 0).max(-1), X, None),
    ("min_all_bool", lambda x: ((x > 0).min(), (x > 0).max()), X, None),
    ("amax_bool_dims", lambda x: (x > 0).amax((0, -1)), X, None),
    ("amin_bool_dyn", lambda x: (x > 0).amin(1, keepdim=True), X, DYN_T),
    ("aminmax_bool", lambda x: torch.aminmax(x > 0, dim=-1), X, None),
    ("max_other_bool", lambda x: torch.max(x > 0, x[0] < 0), X, None),
    ("sum_f16", lambda x: x.sum(-1), lambda: (randn(3, 8).half(),), None),
    ("sum_dyn_keeps_other_axes", lambda x: x.sum(2), X, DYN_T),
    ("sum_over_dyn_axis", lambda x: x.sum(1), X, DYN_T),
    ("mean_dim", lambda x: x.mean(-1), X, None),
    ("mean_keepdim", lambda x: x.mean((1, 2), keepdim=True), X, None),
    ("mean_all", lambda x: x.mean(), X, None),
    ("mean_f16", lambda x: x.mean(1), lambda: (randn(3, 8).half(),), None),
    ("mean_dyn", lambda x: x.mean(1), X, DYN_T),
    ("prod_dim", lambda x: x.prod(1), X, None),
    ("prod_all", lambda x: x.prod(), lambda: (randn(2, 3),), None),
    ("prod_keepdim_int", lambda x: x.prod(0, keepdim=True), lambda: (ints(3, 4),), None),
    ("amax", lambda x: x.amax(1), X, None),
    ("amin_dims_keepdim", lambda x: x.amin((0, 2), keepdim=True), X, None),
    ("max_all", lambda x: x.max(), X, None),
    ("min_all_int", lambda x: x.min(), lambda: (ints(3, 4),), None),
    ("max_dim", lambda x: x.max(1), X, None),
    ("min_dim_keepdim", lambda x: x.min(-1, keepdim=True), X, None),
    ("max_dim_values_only", lambda x: x.max(dim=2)[0], X, DYN_B),
    ("max_other", lambda x, y: torch.max(x, y), lambda: (randn(3, 4), randn(4)), None),
    ("argmax_dim", lambda x: x.argmax(1), X, None),
    ("argmin_keepdim", lambda x: x.argmin(-1, keepdim=True), X, None),
    ("argmax_flat", lambda x: x.argmax(), X, None),
    ("argmax_dyn", lambda x: x.argmax(-1), X, DYN_T),
    ("all_dim", lambda x: (x > -0.5).all(1), X, None),
    ("all_full", lambda x: (x > -3).all(), X, None),
    ("any_keepdim", lambda x: (x > 1).any(-1, keepdim=True), X, None),
    ("any_float_input", lambda x: x.any(0), lambda: (torch.tensor([[0.0, 1.0], [0.0, 0.0]]),), None),
    ("var_default", lambda x: x.var(1), X, None),
    ("var_biased_keepdim", lambda x: x.var(-1, unbiased=False, keepdim=True), X, None),
    ("var_all", lambda x: x.var(), X, None),
    ("var_correction", lambda x: torch.var(x, (0, 2), correction=2), X, None),
    ("std_default", lambda x: x.std(2), X, None),
    ("std_all_biased", lambda x: x.std(unbiased=False), X, None),
    ("std_dyn_biased", lambda x: x.std(1, correction=0), X, DYN_T),
    ("var_mean", lambda x: torch.var_mean(x, 1), X, None),
    ("std_mean_keepdim", lambda x: torch.std_mean(x, -1, keepdim=True), X, None),
    ("norm_p2", lambda x: x.norm(dim=1), X, None),
    ("norm_p1_keepdim", lambda x: x.norm(p=1, dim=-1, keepdim=True), X, None),
    ("norm_all", lambda x: x.norm(), X, None),
    ("vector_norm_inf", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1), X, None),
    ("vector_norm_p3", lambda x: torch.linalg.vector_norm(x, 3, dim=(1, 2)), X, None),
    ("vector_norm_p0", lambda x: torch.linalg.vector_norm(x.relu(), 0, dim=1), X, None),
    ("vector_norm_f16", lambda x: torch.linalg.vector_norm(x, dim=-1), lambda: (randn(3, 8).half(),), None),
    ("logsumexp", lambda x: x.logsumexp(1), X, None),
    ("logsumexp_keepdim", lambda x: torch.logsumexp(x, (0, 2), keepdim=True), X, None),
    ("aminmax_dim", lambda x: torch.aminmax(x, dim=1), X, None),
    ("aminmax_negative_dim_keepdim_dyn", lambda x: torch.aminmax(x, dim=-1, keepdim=True), X, DYN_B),
    ("aminmax_all_int", lambda x: torch.aminmax(x), lambda: (ints(3, 4),), None),
    ("count_nonzero_dim", lambda x: torch.count_nonzero(x.relu(), 1), X, None),
    ("count_nonzero_dims", lambda x: torch.count_nonzero(x.round(), (0, -1)), X, None),
    ("count_nonzero_all_int", lambda x: torch.count_nonzero(x), lambda: (ints(3, 4),), None),
    ("count_nonzero_bool_dyn", lambda x: torch.count_nonzero(x > 0, 2), X, DYN_T),
    ("nansum_dim", lambda x: torch.nansum(x.log(), 1), X, None),
    ("nansum_all_keepdim", lambda x: torch.nansum(x.log(), (0, 1, 2), keepdim=True), X, None),
    ("nansum_int", lambda x: torch.nansum(x, 0), lambda: (ints(3, 4),), None),
    ("nansum_f16", lambda x: torch.nansum(x.log(), -1), lambda: (randn(3, 8).half(),), None),
    ("nanmean_dim", lambda x: torch.nanmean(x.log(), 2), X, None),
    ("nanmean_all_nan_row", lambda x: torch.nanmean(x, 1),
     lambda: (torch.tensor([[float("nan")] * 3, [1.0, float("nan"), 2.0]]),), None),
    ("nanmean_dyn", lambda x: torch.nanmean(x.sqrt(), 1, keepdim=True), X, DYN_T),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_reduce(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    f16 = any(t.dtype == torch.float16 for t in inputs)
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=1e-2 if f16 else 1e-4)
