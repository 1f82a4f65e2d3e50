"""Lookups (op/aten/lookup.py) exported and run in tract, compared with torch; ops with
data-dependent output sizes refused with what to use instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def sorted_(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).sort(-1).values


W = lambda: randn(7, 3)  # noqa: E731 - an embedding table

# embedding_bag's offsets must start at 0 and rise within the indices: a fresh draw of
# them is no valid input, so they stay as traced (test_embedding_bag_offsets_follow_the_input
# runs other offsets).
OFFSETS = {2: "embedding_bag offsets must start at 0 and rise: a fresh draw is invalid"}

# (id, fn, inputs factory, dynamic axes or None[, inputs kept on the redraw: position -> why])
CASES = [
    ("take", lambda x, i: torch.take(x, i), lambda: (randn(3, 4), idx(0, 11, -1, 5)), None),
    ("take_2d_index", lambda x, i: x.take(i), lambda: (randn(2, 3), torch.tensor([[5, -6], [2, 2]])), None),
    ("take_int", lambda x, i: torch.take(x, i), lambda: (torch.randint(0, 9, (3, 3)), idx(8, 0)), None),
    ("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), lambda: (randn(3, 5), torch.randint(-5, 5, (3, 2))),
     None),
    ("take_along_dim_argmax", lambda x: torch.take_along_dim(x, x.argmax(-1, keepdim=True), -1),
     lambda: (randn(2, 3, 5),), None),
    ("take_along_dim_broadcast", lambda x, i: torch.take_along_dim(x, i, 0),
     lambda: (randn(4, 1, 3), torch.randint(0, 4, (2, 5, 1))), None),
    ("take_along_dim_flat", lambda x, i: torch.take_along_dim(x, i),
     lambda: (randn(2, 3), torch.tensor([[0, 5], [4, 2]])), None),
    ("take_along_dim_dyn", lambda x, i: torch.take_along_dim(x, i, 1),
     lambda: (randn(2, 5), torch.randint(0, 5, (2, 3))), {0: {0: "B"}, 1: {0: "B"}}),
    ("take_along_dim_f16", lambda x, i: torch.take_along_dim(x.half(), i, 0),
     lambda: (randn(3, 2), idx(2, 0).view(2, 1)), None),
    ("embedding_bag_sum", lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"),
     lambda: (W(), idx(0, 2, 6, 1, 1), idx(0, 2)), None, OFFSETS),
    ("embedding_bag_mean_empty_bag", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
     lambda: (W(), idx(3, 2, 6, 1), idx(0, 0, 3)), None, OFFSETS),
    ("embedding_bag_max", lambda w, i, o: F.embedding_bag(i, w, o, mode="max"),
     lambda: (W(), idx(4, 2, 6, 1, 0), idx(0, 3)), None, OFFSETS),
    ("embedding_bag_max_empty_bag", lambda w, i, o: F.embedding_bag(i, w, o, mode="max"),
     lambda: (W(), idx(4, 2, 6), idx(0, 3, 3)), None, OFFSETS),
    ("embedding_bag_last_offset", lambda w, i, o: F.embedding_bag(i, w, o, mode="sum", include_last_offset=True),
     lambda: (W(), idx(0, 1, 2, 3, 4), idx(0, 2, 4)), None, OFFSETS),
    ("embedding_bag_weights", lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
     lambda: (W(), idx(5, 2, 6), idx(0, 1), randn(3)), None, OFFSETS),
    ("embedding_bag_padding_idx_mean", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean", padding_idx=2),
     lambda: (W(), idx(2, 3, 2, 2, 5), idx(0, 2)), None, OFFSETS),
    ("embedding_bag_dyn_indices", lambda w, i: F.embedding_bag(i, w, torch.tensor([0, 2]), mode="mean"),
     lambda: (W(), torch.randint(0, 3, (6,))), {1: {0: "N"}}),
    ("_embedding_bag_max", lambda w, i, o: torch.ops.aten._embedding_bag(w, i, o, False, 2)[0],
     lambda: (W(), idx(3, 3, 0, 6), idx(0, 1)), None, OFFSETS),
    ("embedding_bag_f16", lambda w, i, o: F.embedding_bag(i, w.half(), o, mode="sum"),
     lambda: (W(), idx(1, 2, 3), idx(0, 1)), None, OFFSETS),
    ("bucketize", lambda x, b: torch.bucketize(x, b), lambda: (randn(3, 4), sorted_(5)), None),
    ("bucketize_right_ties", lambda x, b: torch.bucketize(x, b, right=True), lambda: (idx(0, 1, 2, 3, 4), idx(1, 1, 3)),
     None),
    ("bucketize_int32", lambda x, b: torch.bucketize(x, b, out_int32=True), lambda: (randn(5), sorted_(3)), None),
    ("bucketize_promote", lambda x, b: torch.bucketize(x, b), lambda: (randn(4) * 3, idx(-1, 0, 2)), None),
    ("bucketize_dyn", lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5])), lambda: (randn(2, 5),),
     {0: {1: "S"}}),
    ("searchsorted", lambda s, x: torch.searchsorted(s, x), lambda: (sorted_(6), randn(2, 3)), None),
    ("searchsorted_right", lambda s, x: torch.searchsorted(s, x, right=True),
     lambda: (idx(0, 2, 2, 5), idx(2, 5, 6, -1)), None),
    ("searchsorted_side_right", lambda s, x: torch.searchsorted(s, x, side="right"),
     lambda: (idx(1, 1, 4), idx(1, 4, 0)), None),
    ("searchsorted_rows", lambda s, x: torch.searchsorted(s, x), lambda: (sorted_(2, 5), randn(2, 3)), None),
    ("searchsorted_sorter", lambda s, x, o: torch.searchsorted(s, x, sorter=o),
     lambda: (lambda s: (s, randn(4), s.argsort()))(randn(5)), None,
     {0: "the sorter is this sequence's argsort", 2: "the sorter is the sequence's argsort"}),
    ("searchsorted_scalar", lambda s: torch.searchsorted(s, 0.5) + s.sum().long() * 0, lambda: (sorted_(5),), None),
]


@pytest.mark.parametrize("fn, make, dyn, kept", [pytest.param(*c[1:4], c[4] if len(c) > 4 else None, id=c[0])
                                                  for c in CASES])
def test_lookup(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, kept: Any,
                tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3, kept_on_redraw=kept)


class Bag(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(9, 4, mode=mode)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bag(ids, offsets)


def test_embedding_bag_module(tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Bag("mean"), (idx(1, 8, 3, 3, 0, 2), idx(0, 1, 4)), tmp_path,
                     kept_on_redraw={1: "offsets must start at 0 and rise: a fresh draw is invalid"})


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_offsets_follow_the_input(mode: str, tmp_path: Any) -> None:
    """Other offsets than the traced ones (bags of other sizes, an empty one) at run time."""
    torch.manual_seed(0)
    export_and_check(Bag(mode), (idx(1, 8, 3, 3, 0, 2), idx(0, 1, 4)), tmp_path,
                     run_inputs=[idx(5, 2, 2, 7, 0, 1), idx(0, 3, 3)])


class Bag2d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(9, 4, mode="max")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.bag(ids)


def test_embedding_bag_2d_input(tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Bag2d(), (torch.randint(0, 9, (3, 4)),), tmp_path)


@pytest.mark.parametrize("fn, message", [
    pytest.param(lambda x: torch.nonzero(x), "nonzero.*depends on the values.*torch.where", id="nonzero"),
    pytest.param(lambda x: torch.nonzero(x, as_tuple=True)[0], "nonzero_numpy.*depends on the values",
                 id="nonzero_tuple"),
    pytest.param(lambda x: torch.argwhere(x), "argwhere.*depends on the values", id="argwhere"),
    pytest.param(lambda x: torch.masked_select(x, x > 0), "masked_select.*depends on the values.*torch.where",
                 id="masked_select"),
    pytest.param(lambda x: torch.unique(x), "unique.*depends on the values", id="unique"),
    pytest.param(lambda x: torch.unique(x, dim=0), "unique_dim.*depends on the values", id="unique_dim"),
    pytest.param(lambda x: torch.unique_consecutive(x), "unique_consecutive.*depends on the values",
                 id="unique_consecutive"),
    pytest.param(lambda x: torch.ops.aten.unique_dim_consecutive(x, 0)[0],
                 "unique_dim_consecutive.*depends on the values", id="unique_dim_consecutive"),
    pytest.param(lambda x: torch.ops.aten._unique(x)[0], "_unique.*depends on the values", id="_unique"),
])
def test_data_dependent_sizes_refused(fn: Callable[..., Any], message: str, tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), (randn(3, 4),), tmp_path, target=TractNNEF.latest())
