"""Distances and similarities (op/aten/distance.py) exported and run in tract, compared with
torch: several p, broadcasting batches, eps clamps, dynamic batch axes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check

INF = float("inf")


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


XY = lambda: (randn(4, 5), randn(4, 5))  # noqa: E731 - table shorthand
DYN_B2 = {0: {0: "B"}, 1: {0: "B"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("dist", torch.dist, XY, None),
    ("dist_p3_broadcast", lambda a, b: torch.dist(a, b, 3), lambda: (randn(2, 4, 5), randn(5)), None),
    ("dist_inf", lambda a, b: torch.dist(a, b, INF), XY, None),
    ("dist_p0", lambda a, b: torch.dist(a.round(), b.round(), 0), XY, None),
    ("cdist", torch.cdist, lambda: (randn(5, 3), randn(4, 3)), None),
    ("cdist_p1_batched", lambda a, b: torch.cdist(a, b, p=1), lambda: (randn(2, 5, 3), randn(2, 4, 3)), None),
    ("cdist_p_half_broadcast_batch", lambda a, b: torch.cdist(a, b, p=0.5), lambda: (randn(2, 5, 3), randn(1, 4, 3)),
     None),
    ("cdist_inf", lambda a, b: torch.cdist(a, b, p=INF), lambda: (randn(5, 3), randn(4, 3)), None),
    ("cdist_same_points", lambda a: torch.cdist(a, a), lambda: (randn(6, 3),), None),
    ("cdist_dyn", torch.cdist, lambda: (randn(2, 5, 3), randn(2, 4, 3)), {0: {1: "P"}, 1: {1: "R"}}),
    ("pdist", F.pdist, lambda: (randn(5, 3),), None),
    ("pdist_p1", lambda x: F.pdist(x, p=1), lambda: (randn(4, 6),), None),
    ("pairwise_distance", F.pairwise_distance, XY, None),
    ("pairwise_distance_p1_keepdim", lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True), XY, None),
    ("pairwise_distance_broadcast_eps", lambda a, b: F.pairwise_distance(a, b, eps=0.1),
     lambda: (randn(2, 4, 5), randn(5)), None),
    ("pairwise_distance_vectors", F.pairwise_distance, lambda: (randn(5), randn(5)), None),
    ("pairwise_distance_dyn", F.pairwise_distance, XY, DYN_B2),
    ("cosine_similarity", F.cosine_similarity, XY, None),
    ("cosine_similarity_dim_last_broadcast", lambda a, b: F.cosine_similarity(a, b, dim=-1),
     lambda: (randn(2, 4, 5), randn(4, 5)), None),
    ("cosine_similarity_eps_clamps", lambda a, b: F.cosine_similarity(a * 1e-3, b, eps=0.1), XY, None),
    ("cosine_similarity_zero_vector", F.cosine_similarity, lambda: (torch.zeros(2, 3), randn(2, 3)), None),
    ("cosine_similarity_f16", lambda a, b: F.cosine_similarity(a.half(), b.half()), XY, None),
    ("cosine_similarity_dyn", F.cosine_similarity, XY, DYN_B2),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_distance(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                  tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    f16 = fn(*inputs).dtype == torch.float16
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4)


def test_pdist_needs_a_static_row_count(tmp_path: Any) -> None:
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "N"}})
    with pytest.raises(T2NErrorNotImplemented, match="pdist needs axis 0 of x as a constant"):
        export_and_check(Fn(F.pdist), (randn(4, 3),), tmp_path, target=target, input_names=["x"])
