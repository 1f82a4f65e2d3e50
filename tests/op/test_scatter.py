"""Scatters (op/aten/scatter.py) exported and run in tract, compared with torch; the
reductions both natively (tract >= 0.23.0) and in their one-hot form (older targets)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.utils import SemanticVersion
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 9, shape)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


# Duplicated targets on purpose: reductions must combine them.
ROWS = lambda: idx(0, 2, 2, 0, 1).view(1, 5).repeat(2, 1)  # noqa: E731 - into a [3, 5] self, dim 0
COLS = lambda: torch.tensor([[0, 3, 3], [4, 4, 1], [2, 2, 2]])  # noqa: E731 - into a [3, 5] self, dim 1

# Reductions: (id, fn, inputs factory, dynamic axes or None); each runs native and masked.
REDUCTIONS = [
    ("scatter_add", lambda x, i, s: x.scatter_add(0, i, s), lambda: (randn(3, 5), ROWS(), randn(2, 5)), None),
    ("scatter_add_src_larger", lambda x, i, s: torch.scatter_add(x, 1, i, s),
     lambda: (randn(3, 5), COLS(), randn(3, 4)), None),
    ("scatter_add_int", lambda x, i, s: x.scatter_add(1, i, s), lambda: (ints(3, 5), COLS(), ints(3, 3)), None),
    ("scatter_add_f16", lambda x, i, s: x.half().scatter_add(-1, i, s.half()),
     lambda: (randn(3, 5), COLS(), randn(3, 3)), None),
    ("scatter_add_dyn", lambda x, i, s: x.scatter_add(1, i, s),
     lambda: (randn(3, 5), torch.randint(0, 5, (3, 4)), randn(3, 4)), {0: {0: "B"}, 1: {0: "B"}, 2: {0: "B"}}),
    ("scatter_reduce_sum_exclude", lambda x, i, s: x.scatter_reduce(0, i, s, "sum", include_self=False),
     lambda: (randn(3, 5), ROWS(), randn(2, 5)), None),
    ("scatter_reduce_prod", lambda x, i, s: x.scatter_reduce(1, i, s, "prod"),
     lambda: (randn(3, 5), COLS(), randn(3, 3)), None),
    ("scatter_reduce_prod_exclude", lambda x, i, s: x.scatter_reduce(1, i, s, "prod", include_self=False),
     lambda: (randn(3, 5), COLS(), randn(3, 3)), None),
    ("scatter_reduce_mean", lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),
     lambda: (randn(3, 5), ROWS(), randn(2, 5)), None),
    ("scatter_reduce_mean_exclude", lambda x, i, s: x.scatter_reduce(1, i, s, "mean", include_self=False),
     lambda: (randn(3, 5), COLS(), randn(3, 3)), None),
    ("scatter_reduce_mean_int", lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),
     lambda: (ints(3, 5), ROWS(), ints(2, 5)), None),
    ("scatter_reduce_amax", lambda x, i, s: x.scatter_reduce(1, i, s, "amax"),
     lambda: (randn(3, 5), COLS(), randn(3, 3)), None),
    ("scatter_reduce_amax_exclude_int", lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
     lambda: (ints(3, 5), COLS(), ints(3, 3)), None),
    ("scatter_reduce_amin_exclude", lambda x, i, s: x.scatter_reduce(0, i, s, "amin", include_self=False),
     lambda: (randn(3, 5), ROWS(), randn(2, 5)), None),
    ("scatter_legacy_add", lambda x, i, s: x.scatter(0, i, s, reduce="add"), lambda: (randn(3, 5), ROWS(), randn(2, 5)),
     None),
    ("scatter_legacy_multiply_int", lambda x, i, s: x.scatter(-1, i, s, reduce="multiply"),
     lambda: (ints(3, 5), COLS(), ints(3, 3)), None),
    ("scatter_legacy_add_value_f16", lambda x, i: x.half().scatter(0, i, 1.5, reduce="add"),
     lambda: (randn(3, 5), ROWS()), None),
    ("scatter_legacy_multiply_value_dyn", lambda x, i: x.scatter(1, i, -2.0, reduce="multiply"),
     lambda: (randn(3, 5), COLS()), {0: {0: "B"}, 1: {0: "B"}}),
    ("index_add", lambda x, i, s: x.index_add(0, i, s), lambda: (randn(4, 3), idx(3, 0, 3), randn(3, 3)), None),
    ("index_add_alpha_dim1", lambda x, i, s: torch.index_add(x, -1, i, s, alpha=2),
     lambda: (randn(2, 5), idx(4, 4, 1), randn(2, 3)), None),
    ("index_add_dyn", lambda x, i, s: x.index_add(1, i, s), lambda: (randn(2, 5), idx(1, 1), randn(2, 2)),
     {0: {0: "B"}, 2: {0: "B"}}),
    ("index_reduce_prod", lambda x, i, s: x.index_reduce(0, i, s, "prod"),
     lambda: (randn(4, 3), idx(1, 3, 1), randn(3, 3)), None),
    ("index_reduce_mean_exclude", lambda x, i, s: x.index_reduce(1, i, s, "mean", include_self=False),
     lambda: (randn(2, 4), idx(0, 2, 0), randn(2, 3)), None),
    ("index_reduce_amax", lambda x, i, s: x.index_reduce(0, i, s, "amax"),
     lambda: (randn(4, 3), idx(2, 2, 0), randn(3, 3)), None),
    ("index_reduce_amin_exclude", lambda x, i, s: x.index_reduce(0, i, s, "amin", include_self=False),
     lambda: (randn(4, 3), idx(2, 2, 0), randn(3, 3)), None),
]
OLD_TRACT = TractNNEF(SemanticVersion.from_str("0.22.4"))

# Writes without reduction: (id, fn, inputs factory, dynamic axes or None).
WRITES = [
    ("index_copy", lambda x, i, s: x.index_copy(0, i, s), lambda: (randn(4, 3), idx(3, 0), randn(2, 3)), None),
    ("index_copy_dim1_int", lambda x, i, s: x.index_copy(1, i, s), lambda: (ints(2, 5), idx(4, 1, 2), ints(2, 3)),
     None),
    ("index_copy_dyn", lambda x, i, s: x.index_copy(1, i, s), lambda: (randn(2, 4), idx(0, 3), randn(2, 2)),
     {0: {0: "B"}, 2: {0: "B"}}),
    ("select_scatter", lambda x, s: torch.select_scatter(x, s, 0, 1), lambda: (randn(3, 4), randn(4)), None),
    ("select_scatter_negative", lambda x, s: torch.select_scatter(x, s, -1, -1), lambda: (randn(3, 4), randn(3)), None),
    ("select_scatter_first", lambda x, s: torch.select_scatter(x, s, 1, 0), lambda: (randn(2, 3, 4), randn(2, 4)),
     None),
    ("select_scatter_dyn", lambda x, s: torch.select_scatter(x, s, 1, -1), lambda: (randn(2, 5), randn(2)),
     {0: {1: "S"}}),
    ("select_scatter_promote", lambda x, s: torch.select_scatter(x, s, 0, 0), lambda: (randn(2, 3), randn(3).half()),
     None),
    ("slice_scatter", lambda x, s: torch.slice_scatter(x, s, 1, 1, 3), lambda: (randn(3, 5), randn(3, 2)), None),
    ("slice_scatter_to_end", lambda x, s: torch.slice_scatter(x, s, 0, 2), lambda: (randn(4, 3), randn(2, 3)), None),
    ("slice_scatter_negative", lambda x, s: torch.slice_scatter(x, s, -1, -3, -1), lambda: (randn(3, 5), randn(3, 2)),
     None),
    ("slice_scatter_step", lambda x, s: torch.slice_scatter(x, s, 1, 0, 5, 2), lambda: (randn(3, 5), randn(3, 3)),
     None),
    ("slice_scatter_step_inner", lambda x, s: torch.slice_scatter(x, s, 0, 1, None, 3),
     lambda: (ints(7, 2), ints(2, 2)), None),
    ("slice_scatter_dyn", lambda x, s: torch.slice_scatter(x, s, 1, 0, 2), lambda: (randn(2, 5), randn(2, 2)),
     {0: {1: "S"}}),
]


# torch warns that index_reduce is in beta, and that scatter's reduce argument is deprecated.
@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in REDUCTIONS + WRITES])
def test_scatter(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("fn, make", [pytest.param(*c[1:3], id=c[0]) for c in REDUCTIONS])
def test_scatter_reduction_before_native(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
                                         tmp_path: Any) -> None:
    """tract < 0.23.0 has no scatter reductions: the one-hot form gives the same values
    (and the graph has no reduction attribute for the old tract to reject)."""
    torch.manual_seed(0)
    path = export_and_check(Fn(fn), make(), tmp_path, target=OLD_TRACT, compression_level=None, atol=1e-3, rtol=1e-3)
    assert "reduction" not in (path / "graph.nnef").read_text()


def test_scatter_reduction_masked_needs_full_index(tmp_path: Any) -> None:
    """The one-hot form needs the index to cover self on the other axes; the error says
    which tract version does it natively."""
    with pytest.raises(T2NErrorNotImplemented, match="tract >= 0.23.0"):
        export_and_check(Fn(lambda x, i, s: x.scatter_add(1, i, s)), (randn(3, 5), COLS()[:2], randn(2, 3)),
                         tmp_path, target=OLD_TRACT)


@pytest.mark.parametrize("fn, make", [
    pytest.param(lambda x, i, s: x.scatter_add(0, i, s), lambda: (randn(3, 5), ROWS(), randn(2, 5)), id="scatter_add"),
    pytest.param(lambda x, i, s: x.index_add(1, i, s), lambda: (randn(2, 4), idx(3, 3, 0), randn(2, 3)),
                 id="index_add"),
    pytest.param(lambda x, s: torch.slice_scatter(x, s, 1, 1, 3), lambda: (randn(3, 5), randn(3, 2)),
                 id="slice_scatter"),
])
def test_scatter_khronos_strict(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
                                tmp_path: Any) -> None:
    """Strict NNEF has no tract scatter: float sums take the one-hot form, slices a concat."""
    torch.manual_seed(0)
    path = export_and_check(Fn(fn), make(), tmp_path, target=KhronosNNEF("1.0.5"), compression_level=None)
    assert "tract_" not in (path / "graph.nnef").read_text()
