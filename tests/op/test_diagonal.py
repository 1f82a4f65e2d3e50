"""Diagonal ops (op/aten/diagonal.py) exported and run in tract, compared with torch."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 9, shape)


M = lambda: (randn(3, 5),)  # noqa: E731 - table shorthand
X3 = lambda: (randn(2, 4, 3),)  # noqa: E731

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("diagonal", lambda x: torch.diagonal(x), M, None),
    ("diagonal_offset", lambda x: torch.diagonal(x, 2), M, None),
    ("diagonal_negative_offset", lambda x: x.diagonal(-1), M, None),
    ("diagonal_dims", lambda x: torch.diagonal(x, 1, 2, 0), X3, None),
    ("diagonal_negative_dims", lambda x: x.diagonal(0, -1, -2), X3, None),
    ("diagonal_batch_dyn", lambda x: torch.diagonal(x, 0, 1, 2) * 2, X3, {0: {0: "B"}}),
    ("diagonal_int", lambda x: x.diagonal(), lambda: (ints(4, 4),), None),
    ("diagonal_f16", lambda x: x.half().diagonal(1), M, None),
    ("linalg_diagonal", lambda x: torch.linalg.diagonal(x, offset=-1), X3, None),
    ("diagonal_copy", lambda x: torch.diagonal_copy(x, 1), M, None),
    ("trace", lambda x: torch.trace(x), M, None),
    ("trace_int", lambda x: torch.trace(x), lambda: (ints(4, 3),), None),
    ("diag_vector", lambda x: torch.diag(x), lambda: (randn(4),), None),
    ("diag_vector_offset", lambda x: torch.diag(x, 2), lambda: (randn(3),), None),
    ("diag_vector_negative_offset", lambda x: torch.diag(x, -1), lambda: (ints(3),), None),
    ("diag_matrix", lambda x: torch.diag(x, 1), M, None),
    ("diag_embed", lambda x: torch.diag_embed(x), lambda: (randn(2, 3),), None),
    ("diag_embed_offset_dims", lambda x: torch.diag_embed(x, -1, 0, 2), lambda: (randn(2, 3),), None),
    ("diag_embed_dyn", lambda x: torch.diag_embed(x, 1), lambda: (randn(2, 3),), {0: {0: "B"}}),
    ("diagflat", lambda x: torch.diagflat(x), lambda: (randn(2, 2),), None),
    ("diagflat_offset", lambda x: torch.diagflat(x, 1), lambda: (randn(3),), None),
    ("diagonal_scatter", lambda x, s: torch.diagonal_scatter(x, s), lambda: (randn(3, 5), randn(3)), None),
    ("diagonal_scatter_offset", lambda x, s: torch.diagonal_scatter(x, s, 2), lambda: (randn(3, 5), randn(3)), None),
    ("diagonal_scatter_negative", lambda x, s: torch.diagonal_scatter(x, s, -1), lambda: (randn(4, 3), randn(3)), None),
    ("diagonal_scatter_dims", lambda x, s: torch.diagonal_scatter(x, s, 0, 2, 0), lambda: (randn(3, 2, 4), randn(2, 3)),
     None),
    ("diagonal_scatter_promote", lambda x, s: torch.diagonal_scatter(x, s), lambda: (randn(2, 2), ints(2).float()),
     None),
    ("diagonal_scatter_dyn", lambda x, s: torch.diagonal_scatter(x, s, 0, 1, 2), lambda: (randn(2, 3, 3), randn(2, 3)),
     {0: {0: "B"}, 1: {0: "B"}}),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_diagonal(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                  tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


def test_diagonal_of_dynamic_plane_refused(tmp_path: Any) -> None:
    """The plane's sizes set the slice stride: a dynamic one is refused, naming the axis."""
    with pytest.raises(T2NErrorNotImplemented, match="diagonal needs axis 1"):
        check(lambda x: x.diagonal(), M(), tmp_path, {0: {1: "S"}})


@pytest.mark.parametrize("fn, make", [
    pytest.param(lambda x: torch.diagonal(x, -1, 0, 2), X3, id="diagonal"),
    pytest.param(lambda x: torch.trace(x), M, id="trace"),
    pytest.param(lambda x: torch.diag_embed(x, 1), M, id="diag_embed"),
    pytest.param(lambda x, s: torch.diagonal_scatter(x, s, 1), lambda: (randn(3, 5), randn(3)), id="diagonal_scatter"),
])
def test_diagonal_khronos_strict(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
                                 tmp_path: Any) -> None:
    """Float diagonals use plain NNEF only (reshape, slice, pad, select), so strict targets get them."""
    torch.manual_seed(0)
    path = export_and_check(Fn(fn), make(), tmp_path, target=KhronosNNEF("1.0.5"))
    with tarfile.open(path) as archive:
        member = archive.extractfile("graph.nnef")
        assert member is not None
        assert "tract_" not in member.read().decode()
