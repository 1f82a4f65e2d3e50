"""Tensor creation and casts exported and run in tract, compared with torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented
from tests.helpers import export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


X = lambda: (randn(3, 5),)  # noqa: E731 - table shorthand
DYN = {0: {1: "S"}}

# (id, fn, inputs factory, dynamic axes or None). Creation ops need a tensor input to be
# a graph; the functions add the created tensor to it or return both.
CASES = [
    ("arange_end", lambda x: x + torch.arange(5), X, None),
    ("arange_start_step", lambda x: torch.arange(1, 11, 2) * 1 + x, X, None),
    ("arange_negative_step", lambda x: (x, torch.arange(5, -3, -2)), X, None),
    ("arange_float", lambda x: x + torch.arange(0.0, 1.0, 0.2), X, None),
    ("arange_int_as_float", lambda x: x * torch.arange(5, dtype=torch.float32), X, None),
    ("arange_dyn", lambda x: (x, torch.arange(x.size(1))), X, DYN),
    ("arange_dyn_float", lambda x: x + torch.arange(x.size(1), dtype=torch.float32), X, DYN),
    ("arange_dyn_start", lambda x: (x, torch.arange(2, x.size(1))), X, DYN),
    ("zeros", lambda x: (x, torch.zeros(2, 3)), X, None),
    ("ones_int", lambda x: (x, torch.ones(2, 3, dtype=torch.int64)), X, None),
    ("full", lambda x: x + torch.full((3, 5), 7.5), X, None),
    ("full_int", lambda x: (x, torch.full((2,), 3, dtype=torch.int32)), X, None),
    ("empty_zero_size", lambda x: (x, torch.empty(0, 3)), X, None),
    ("zeros_dyn_size", lambda x: x + torch.zeros(x.shape), X, DYN),
    ("ones_dyn_size_list", lambda x: (x, torch.ones(2, x.size(1))), X, DYN),
    ("zeros_like", lambda x: torch.zeros_like(x), X, None),
    ("ones_like_dtype", lambda x: torch.ones_like(x, dtype=torch.int32), X, None),
    ("full_like", lambda x: torch.full_like(x, 3), X, None),
    ("zeros_like_dyn", lambda x: torch.zeros_like(x) + 1, X, DYN),
    ("full_like_after_reduce_dyn", lambda x: torch.full_like(x.sum(0), 2.0), lambda: (randn(3, 5, 2),), {0: {1: "S"}}),
    ("new_zeros", lambda x: (x, x.new_zeros(2, 3)), X, None),
    ("new_ones_f16", lambda x: (x, x.half().new_ones((4,))), X, None),
    ("new_full", lambda x: (x, x.new_full((2,), 4.0)), X, None),
    ("scalar_tensor", lambda x: x * torch.scalar_tensor(2.0), X, None),
    ("tensor_in_forward", lambda x: x + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), X, None),
    ("tensor_scalar_in_forward", lambda x: x * torch.tensor(3.0), X, None),
    ("to_f16", lambda x: x.to(torch.float16), X, None),
    ("half", lambda x: x.half() * 2, X, None),
    ("long_truncates", lambda x: (x * 3).long(), X, None),
    ("int", lambda x: (x * 3).int(), X, None),
    ("bool", lambda x: x.round().bool(), X, None),
    ("float_from_int", lambda x: x.float() / 2, lambda: (torch.randint(0, 9, (3, 4)),), None),
    ("float_from_bool", lambda x: (x > 0).float(), X, None),
    ("to_same_dtype", lambda x: x.to(torch.float32), X, None),
    ("to_device_dtype", lambda x: x.to("cpu", torch.float64), X, None),
    ("to_other", lambda x, i: x.to(i), lambda: (randn(3, 4) * 4, torch.tensor([1, 2])), None),
    ("type_as", lambda x, i: i.type_as(x) + x, lambda: (randn(3, 2), torch.tensor([1, 2])), None),
    ("to_dyn", lambda x: x.half(), X, DYN),
    # Floats to narrow or unsigned integers: torch truncates toward zero then wraps
    # (-1.5 -> 65535 as uint16, 200.0 -> -56 as int8); a direct cast in tract saturates.
    ("to_u16_wraps_negatives", lambda x: (x * 8).to(torch.uint16), X, None),
    ("to_u8_wraps", lambda x: (x * 200).to(torch.uint8), X, None),
    ("to_u32_wraps_negatives", lambda x: (x * 8).to(torch.uint32), X, None),
    ("to_i8_wraps", lambda x: (x * 200).to(torch.int8), X, None),
    ("to_i16_wraps", lambda x: (x * 40000).to(torch.int16), X, None),
    ("f16_to_u16_wraps_negatives", lambda x: (x * 8).half().to(torch.uint16), X, None),
    ("int_to_u16_wraps", lambda i: (i * 3000).to(torch.uint16), lambda: (torch.randint(-20, 20, (3, 4)),), None),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_creation(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                  tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


class RangeOf(nn.Module):
    """torch.arange over bounds given as 0-d tensors (model inputs), then used."""

    def forward(self, start: torch.Tensor, end: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return torch.arange(start, end, step) * 2


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_arange_of_tensor_bounds_follows_the_values(dtype: torch.dtype, tmp_path: Any) -> None:
    """The length is computed by tract from the values it runs on, not frozen at the
    traced one: other bounds (longer, shorter, descending) give torch's ranges."""
    traced = tuple(torch.tensor(v, dtype=dtype) for v in (1, 6, 3))
    path = export_and_check(RangeOf(), traced, tmp_path, no_redraw="random bounds make empty or invalid ranges")
    artefact = TractArtefact.load(path)
    for bounds in [(2, 11, 2), (10, -1, -1), (0, 1, 5), (4, 4, 1)]:
        inputs = [torch.tensor(v, dtype=dtype) for v in bounds]
        (got,) = artefact.run(inputs)
        expected = RangeOf()(*inputs)
        assert got.dtype == expected.numpy().dtype and np.array_equal(got, expected.numpy()), bounds


class Offsets(nn.Module):
    """A plain tensor attribute (neither parameter nor buffer) used in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.offsets = torch.tensor([[0.5, -1.0, 2.0]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.offsets + torch.tensor([1.0, 2.0, 3.0])


def test_constant_tensors_become_variables(tmp_path: Any) -> None:
    torch.manual_seed(0)
    path = export_and_check(Offsets(), (randn(2, 3),), tmp_path, compression_level=None)
    assert len(list(path.glob("*.dat"))) == 2


def test_arange_float_dynamic_refused(tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match="float bounds"):
        check(lambda x: x + torch.arange(0.0, x.size(1), 0.5)[: x.size(1)], X(), tmp_path, DYN)


# Grids, index tables, one_hot and fills: (id, fn, inputs factory, dynamic axes or None).
TABLE_CASES = [
    ("eye", lambda x: x[:, :3] + torch.eye(3), X, None),
    ("eye_rect_int", lambda x: (x, torch.eye(2, 4, dtype=torch.int32)), X, None),
    ("eye_bool", lambda x: x.masked_fill(torch.eye(3, 5, dtype=torch.bool), 0.0), X, None),
    ("eye_dyn", lambda x: x @ torch.eye(x.size(1)), X, DYN),
    ("eye_dyn_rect", lambda x: (x, torch.eye(2, x.size(1), dtype=torch.int64)), X, DYN),
    ("linspace", lambda x: x + torch.linspace(-1, 2, 5), X, None),
    ("linspace_int", lambda x: (x, torch.linspace(0, 10, 4, dtype=torch.int64)), X, None),
    ("logspace", lambda x: x * torch.logspace(0, 2, 5), X, None),
    ("logspace_base2_f16", lambda x: x.half() * torch.logspace(-1, 3, 5, base=2, dtype=torch.float16), X, None),
    ("tril_indices", lambda x: (x, torch.tril_indices(3, 4)), X, None),
    ("triu_indices_offset", lambda x: (x, torch.triu_indices(4, 3, 1)), X, None),
    ("tril_indices_gather", lambda x: x[tuple(torch.tril_indices(3, 5, -1))], X, None),
    ("meshgrid_ij", lambda x, y: torch.meshgrid(x, y, indexing="ij"), lambda: (randn(3), randn(4)), None),
    ("meshgrid_xy_three", lambda x, y, z: torch.meshgrid(x, y, z, indexing="xy"),
     lambda: (randn(2), randn(3), randn(4)), None),
    ("meshgrid_scalar", lambda x, y: torch.meshgrid(x.sum(), y, indexing="ij"), lambda: (randn(2), randn(3)), None),
    ("meshgrid_dyn", lambda x, y: torch.meshgrid(x, y, indexing="xy"), lambda: (randn(5), randn(3)), {0: {0: "S"}}),
    ("cartesian_prod", lambda x, y: torch.cartesian_prod(x, y), lambda: (randn(3), randn(2)), None),
    ("cartesian_prod_three_int", lambda x, y, z: torch.cartesian_prod(x, y, z),
     lambda: (torch.arange(2), torch.arange(3), torch.arange(2)), None),
    ("cartesian_prod_single", lambda x: torch.cartesian_prod(x) * 2, lambda: (randn(4),), None),
    ("combinations", lambda x: torch.combinations(x), lambda: (randn(4),), None),
    ("combinations_r3_replacement", lambda x: torch.combinations(x, 3, with_replacement=True), lambda: (randn(3),),
     None),
    ("one_hot", lambda i: torch.nn.functional.one_hot(i, 5), lambda: (torch.tensor([[0, 4], [2, 2]]),), None),
    ("one_hot_dyn_float", lambda i: torch.nn.functional.one_hot(i, 3).float() * 2,
     lambda: (torch.randint(0, 3, (2, 4)),), {0: {1: "S"}}),
    ("fill", lambda x: (x * 1).fill_(2.5) + x, X, None),
    ("fill_int", lambda x: (x.long() * 1).fill_(-3), X, None),
    ("fill_tensor", lambda x, v: (x * 1).fill_(v), lambda: (randn(3, 5), torch.tensor(4.0)), None),
    ("fill_dyn", lambda x: (x * 1).fill_(1.5), X, DYN),
    ("zero", lambda x: (x * 2).zero_() + 1, X, None),
    ("zero_dyn_f16", lambda x: (x.half() * 1).zero_(), X, DYN),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in TABLE_CASES])
def test_tables(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("fn, make, message", [
    pytest.param(lambda i: torch.nn.functional.one_hot(i), lambda: (torch.tensor([0, 2]),), "pass num_classes",
                 id="one_hot_no_classes"),
    pytest.param(lambda x: torch.combinations(x, 5), lambda: (randn(3),), "which is empty", id="combinations_empty"),
])
def test_tables_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], message: str,
                        tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match=message):
        check(fn, make(), tmp_path)
