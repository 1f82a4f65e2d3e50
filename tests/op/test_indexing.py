"""Indexing ops exported and run in tract, compared with torch (one entry per variant)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check
from tests.op._table import Fn, check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def mask(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) > 0.5


def put_rows(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[i] = v
    return y


def _fill_col(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1] = 5.0
    return y


def put_cols(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, i] = v
    return y


def put_mask(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[m] = torch.tensor(-2.0)
    return y


# (id, fn, inputs factory, dynamic axes {input index: {dim: symbol}} or None)
CASES = [
    ("slice", lambda x: x[:, 2:5], lambda: (randn(4, 7),), None),
    ("slice_step", lambda x: x[::2], lambda: (randn(7, 3),), None),
    ("slice_step_range", lambda x: x[:, 1:6:2], lambda: (randn(2, 7),), None),
    ("slice_negative", lambda x: x[:, -3:], lambda: (randn(4, 7),), None),
    ("slice_negative_end", lambda x: x[:, 1:-2], lambda: (randn(4, 7),), None),
    ("slice_past_end", lambda x: x[:, 5:100], lambda: (randn(4, 7),), None),
    ("slice_empty", lambda x: x[:, 5:2], lambda: (randn(4, 7),), None),
    ("slice_dyn_to_end", lambda x: x[:, 2:], lambda: (randn(2, 7),), {0: {1: "S"}}),
    ("slice_dyn_negative", lambda x: x[:, -3:], lambda: (randn(2, 7),), {0: {1: "S"}}),
    ("slice_dyn_negative_end", lambda x: x[:, :-1], lambda: (randn(2, 7),), {0: {1: "S"}}),
    ("slice_dyn_size_expr", lambda x: x[:, : x.size(1) - 2], lambda: (randn(2, 7),), {0: {1: "S"}}),
    ("slice_dyn_other_axis", lambda x: x[1:3, 2:5], lambda: (randn(4, 7),), {0: {1: "S"}}),
    ("select", lambda x: x[:, 1], lambda: (randn(4, 5),), None),
    ("select_negative", lambda x: x[:, -1], lambda: (randn(4, 5),), None),
    ("select_dyn_negative", lambda x: x[:, -1], lambda: (randn(2, 5, 3),), {0: {1: "S"}}),
    ("select_leading", lambda x: x[0], lambda: (randn(4, 5),), None),
    ("narrow", lambda x: x.narrow(1, 1, 3), lambda: (randn(4, 5),), None),
    ("narrow_negative", lambda x: x.narrow(0, -2, 2), lambda: (randn(4, 5),), None),
    ("index_select", lambda x, i: x.index_select(1, i), lambda: (randn(4, 6), idx(0, 5, 2, 2)), None),
    ("index_select_dim0", lambda x, i: torch.index_select(x, 0, i), lambda: (randn(4, 6), idx(3, 1)), None),
    ("gather", lambda x, i: x.gather(1, i), lambda: (randn(3, 5), torch.randint(0, 5, (3, 4))), None),
    ("gather_dim0", lambda x, i: torch.gather(x, 0, i), lambda: (randn(3, 5), torch.randint(0, 3, (2, 5))), None),
    ("index_tensor", lambda x, i: x[i], lambda: (randn(5, 3), idx(4, 0, 0)), None),
    ("index_tensor_axis1", lambda x, i: x[:, i], lambda: (randn(3, 5), idx(4, 1)), None),
    ("index_tensor_2d", lambda x, i: x[i], lambda: (randn(5, 3), torch.randint(0, 5, (2, 2))), None),
    ("index_after_slice", lambda x, i: x[i, 1:3], lambda: (randn(5, 4), idx(1, 3)), None),
    ("index_two_tensors", lambda x, i, j: x[i, j], lambda: (randn(3, 4), idx(0, 2, -1), idx(2, 3, 0)), None),
    # transformers' mask functions: x[b[:, None, None, None], q[None, None, :, None]]
    ("index_two_broadcast", lambda x, b, q: x[b[:, None, None, None], q[None, None, :, None]],
     lambda: (randn(2, 5), idx(1, 0), idx(4, 1, 3)), None),
    ("index_two_inner_axes", lambda x, i, j: x[:, i, j], lambda: (randn(2, 3, 4, 5), idx(2, 0), idx(1, 3)), None),
    ("index_two_dyn", lambda x: x[torch.arange(x.size(0))[:, None], torch.arange(x.size(1))[None, :]] * 2,
     lambda: (randn(2, 5),), {0: {1: "S"}}),
    ("masked_fill_scalar", lambda x, m: x.masked_fill(m, -1.5), lambda: (randn(3, 4), mask(3, 4)), None),
    ("masked_fill_broadcast", lambda x, m: x.masked_fill(m, float("-inf")), lambda: (randn(2, 3, 4), mask(4)), None),
    ("masked_fill_tensor_value", lambda x, m: x.masked_fill(m, torch.tensor(2.0)), lambda: (randn(3, 4), mask(3, 4)),
     None),
    ("masked_fill_int", lambda x, m: x.masked_fill(m, 7), lambda: (torch.randint(0, 9, (3, 4)), mask(1, 4)), None),
    ("masked_fill_dyn", lambda x, m: x.masked_fill(m, 0.0), lambda: (randn(3, 4), mask(3, 4)),
     {0: {0: "B"}, 1: {0: "B"}}),
    ("masked_fill_f16", lambda x, m: x.masked_fill(m, 3.0), lambda: (randn(3, 4).half(), mask(3, 4)), None),
    ("where", lambda c, a, b: torch.where(c, a, b), lambda: (mask(3, 4), randn(3, 4), randn(4)), None),
    ("where_scalar_other", lambda c, a: torch.where(c, a, 0.0), lambda: (mask(3, 4), randn(3, 4)), None),
    ("where_scalar_self", lambda c, a: torch.where(c, 1.0, a), lambda: (mask(4), randn(3, 4)), None),
    ("where_promote", lambda c, a, b: torch.where(c, a, b),
     lambda: (mask(3, 4), randn(3, 4), torch.randint(0, 5, (3, 4))), None),
    ("flip", lambda x: x.flip(1), lambda: (randn(3, 5),), None),
    ("flip_two_axes", lambda x: torch.flip(x, (0, -1)), lambda: (randn(3, 4, 5),), None),
    ("flip_dyn", lambda x: x.flip(1), lambda: (randn(2, 5),), {0: {1: "S"}}),
    ("roll", lambda x: x.roll(2, 1), lambda: (randn(3, 5),), None),
    ("roll_negative_two_axes", lambda x: x.roll((-1, 3), (0, 1)), lambda: (randn(3, 5),), None),
    ("roll_flat", lambda x: x.roll(4), lambda: (randn(3, 5),), None),
    ("tril", lambda x: x.tril(), lambda: (randn(4, 5),), None),
    ("triu_diag", lambda x: x.triu(1), lambda: (randn(2, 4, 5),), None),
    ("tril_negative", lambda x: torch.tril(x, -1), lambda: (randn(4, 4),), None),
    ("cumsum", lambda x: x.cumsum(1), lambda: (randn(3, 5),), None),
    ("diff", lambda x: torch.diff(x), lambda: (randn(3, 5),), None),
    ("diff_n2_dim0", lambda x: torch.diff(x, n=2, dim=0), lambda: (randn(5, 3),), None),
    ("diff_prepend_append", lambda x, p, a: torch.diff(x, dim=1, prepend=p, append=a),
     lambda: (randn(2, 4), randn(2, 1), randn(2, 2)), None),
    # transformers' packed-sequence detection on position ids
    ("diff_int_dyn", lambda x: torch.diff(x, prepend=x[:, :1] - 1, dim=-1),
     lambda: (torch.randint(0, 9, (1, 5)),), {0: {1: "S"}}),
    ("cumsum_int", lambda x: torch.cumsum(x, 0), lambda: (torch.randint(0, 9, (4, 3)),), None),
    ("scatter_src", lambda x, i, s: x.scatter(1, i, s), lambda: (randn(3, 5), idx(0, 4, 2).repeat(3, 1), randn(3, 3)),
     None),
    ("scatter_value", lambda x, i: x.scatter(0, i, 2.5), lambda: (randn(3, 5), idx(2, 0, 1, 1, 0).view(1, 5)), None),
    ("index_put", put_rows, lambda: (randn(5, 3), idx(0, -2), randn(2, 3)), None),
    ("index_put_axis1_broadcast", lambda x, i, v: torch.ops.aten.index_put(x, [None, i], v),
     lambda: (randn(3, 5), idx(4, 1), randn(3, 1)), None),
    ("index_put_mask", put_mask, lambda: (randn(3, 4), mask(3, 4)), None),
    ("index_put_mask_leading", put_mask, lambda: (randn(3, 4), mask(3)), None),
    # y[:, i] = v and y[:, 1] = 5.0 write through a view of y (torch_graph/ir/functionalize.py)
    ("index_put_through_view", put_cols, lambda: (randn(3, 5), idx(4, 1), randn(3, 1)), None),
    ("fill_through_select", _fill_col, lambda: (randn(3, 5),), None),
    ("index_fill", lambda x, i: x.index_fill(1, i, -1.0), lambda: (randn(3, 5), idx(0, 3)), None),
    ("index_fill_negative", lambda x, i: x.index_fill(0, i, 4.0), lambda: (randn(3, 5), idx(-1)), None),
]


def _param(case: Any) -> Any:
    if hasattr(case, "marks"):  # a pytest.param(...) entry
        return pytest.param(*case.values[1:], id=case.values[0], marks=case.marks)
    return pytest.param(*case[1:], id=case[0])


@pytest.mark.parametrize("fn, make, dyn", [_param(c) for c in CASES])
def test_indexing(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                  tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids)


def test_embedding(tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Embed(), (torch.randint(0, 11, (2, 5)),), tmp_path)


def test_embedding_dynamic_sequence(tmp_path: Any) -> None:
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"ids": {1: "S"}})
    export_and_check(Embed(), (torch.randint(0, 11, (2, 5)),), tmp_path, target=target, input_names=["ids"],
                     run_inputs=[torch.randint(0, 11, (2, 9))])


@pytest.mark.parametrize("fn, make, message", [
    pytest.param(lambda x, m: x[m], lambda: (randn(3, 4), mask(3, 4)), "data-dependent", id="bool_mask"),
    pytest.param(lambda x, i, j: x[i, :, j], lambda: (randn(3, 2, 4), idx(0, 1), idx(2, 3)), "non-adjacent",
                 id="index_tensors_apart"),
    pytest.param(lambda c: torch.where(c), lambda: (mask(3, 4),), "nonzero", id="where_one_arg"),
    pytest.param(lambda x: x.roll(1, 1), lambda: (randn(2, 5),), "roll", id="roll_dynamic_axis"),
])
def test_indexing_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], message: str,
                          tmp_path: Any) -> None:
    """Variants a static graph cannot express fail with an error naming the op."""
    torch.manual_seed(0)
    inputs = make()
    names = [f"in{k}" for k in range(len(inputs))]
    target = TractNNEF.latest().with_dynamic_axes({"in0": {1: "S"}}) if message == "roll" else TractNNEF.latest()
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=names)



@pytest.mark.parametrize("fn, shape", [
    pytest.param(lambda x: x.reshape(-1)[1::3], (3, 4), id="flat-after-reshape"),
    pytest.param(lambda x: x.reshape(2, 6)[:, ::2], (3, 4), id="rows-after-reshape"),
    pytest.param(lambda x: x[:, 1:8:3] + x[:, 0:7:3], (2, 9), id="window-not-whole-steps"),
    pytest.param(lambda x: x.view(4, 3)[::2, 1:], (12,), id="first-axis"),
])
def test_strided_slices_after_reshape(fn, shape, tmp_path):
    """tract 0.23.9 fails to optimise a strided slice that follows a reshape; fastnnef
    writes static strided slices without tract's stride."""
    check(fn, (torch.randn(*shape),), tmp_path)


@pytest.mark.parametrize("fn, shape", [
    pytest.param(lambda x: x.reshape(3, -1)[:, ::2], (3, 4, 5), id="merged-dynamic-axis"),
    pytest.param(lambda x: x.reshape(3, -1)[:, 1::3], (3, 4, 5), id="merged-dynamic-axis-offset"),
    pytest.param(lambda x: x[:, 1::2] * 2, (3, 7, 5), id="dynamic-axis"),
])
def test_strided_slices_of_a_dynamic_axis(fn, shape, tmp_path):
    """A stepped slice of a dynamic axis, also right after a reshape that merges it (tract
    0.23.9 fails to load that strided slice: "Pulling Downsample over Reshape")."""
    check(fn, (torch.randn(*shape),), tmp_path, dyn={0: {1: "S"}})
