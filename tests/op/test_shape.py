"""Shape ops (op/aten/shape.py) exported and run in tract, compared with torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


X3 = lambda: (randn(2, 3, 4),)  # noqa: E731 - table shorthand
DYN0 = {0: {0: "B"}}
DYN1 = {0: {1: "S"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("reshape", lambda x: x.reshape(6, 4), X3, None),
    ("view_infer", lambda x: x.view(-1, 12), X3, None),
    ("view_insert_unit", lambda x: x.view(1, 24), X3, None),
    ("reshape_1d_to_2d", lambda x: x.view(1, 4), lambda: (randn(4),), None),
    # only unit axes dropped: tract rejects an empty reshape window (GPT-2's Conv1D view)
    ("view_drop_leading_unit", lambda x: x.view(-1, x.size(-1)), lambda: (randn(1, 5, 4),), None),
    ("view_drop_leading_unit_dyn", lambda x: x.view(-1, x.size(-1)), lambda: (randn(1, 5, 4),), DYN1),
    ("view_drop_trailing_unit", lambda x: x.view(5, 4), lambda: (randn(5, 4, 1),), None),
    ("view_to_scalar", lambda x: x.view(()) + 1, lambda: (randn(1, 1),), None),
    ("reshape_dyn_batch", lambda x: x.reshape(x.size(0), 12), X3, DYN0),
    ("reshape_dyn_split_last", lambda x: x.view(x.size(0), x.size(1), 2, 2), X3, DYN1),
    ("view_as", lambda x, y: x.view_as(y), lambda: (randn(2, 6), randn(3, 4)), None),
    ("flatten", lambda x: x.flatten(1), X3, None),
    ("flatten_all", lambda x: torch.flatten(x), X3, None),
    ("flatten_dyn", lambda x: x.flatten(1), X3, DYN0),
    ("unflatten", lambda x: x.unflatten(2, (2, 2)), X3, None),
    ("permute", lambda x: x.permute(2, 0, 1), X3, None),
    ("permute_negative", lambda x: x.permute(0, -1, -2), X3, DYN1),
    ("permute_identity", lambda x: x.permute(0, 1, 2) * 2, X3, None),
    ("transpose", lambda x: x.transpose(0, 2), X3, None),
    ("transpose_negative", lambda x: x.transpose(-1, -2), X3, DYN1),
    ("t", lambda x: x.t(), lambda: (randn(3, 4),), None),
    ("t_1d", lambda x: x.t() + 1, lambda: (randn(3),), None),
    ("squeeze_all", lambda x: x.squeeze(), lambda: (randn(1, 3, 1, 4),), None),
    ("squeeze_dim", lambda x: x.squeeze(2), lambda: (randn(2, 3, 1),), None),
    ("squeeze_dim_not_one", lambda x: x.squeeze(1), lambda: (randn(2, 3, 1),), None),
    ("squeeze_dims", lambda x: x.squeeze((0, 2)), lambda: (randn(1, 3, 1, 4),), None),
    ("unsqueeze", lambda x: x.unsqueeze(1), X3, None),
    ("unsqueeze_negative", lambda x: x.unsqueeze(-1), X3, DYN1),
    ("none_index", lambda x: x[:, None], X3, None),
    ("expand", lambda x: x.expand(3, 4), lambda: (randn(1, 4),), None),
    ("expand_keep", lambda x: x.expand(2, -1, 4), lambda: (randn(1, 3, 1),), None),
    ("expand_new_axis", lambda x: x.expand(2, 3, 4), lambda: (randn(3, 1),), None),
    ("expand_as", lambda x, y: x.expand_as(y), lambda: (randn(3, 1), randn(3, 5)), None),
    ("expand_dyn", lambda x, y: y.expand(x.size(0), 4), lambda: (randn(3, 4), randn(1, 4)), {0: {0: "B"}}),
    ("broadcast_to", lambda x: torch.broadcast_to(x, (2, 3)), lambda: (randn(3),), None),
    ("repeat", lambda x: x.repeat(2, 3), lambda: (randn(2, 3),), None),
    ("repeat_more_dims", lambda x: x.repeat(2, 1, 2), lambda: (randn(2, 3),), None),
    # repeats of a dynamic axis' size (NeMo's length masks: arange(T).repeat(B, 1))
    ("repeat_dyn_count", lambda x: torch.arange(x.size(1)).repeat(x.size(0), 1) + x, lambda: (randn(2, 3),),
     {0: {0: "B", 1: "S"}}),
    ("repeat_dyn_new_axis", lambda x: x.unsqueeze(1).repeat([1, x.size(1), 1]), lambda: (randn(2, 3),), DYN1),
    ("cat", lambda x, y: torch.cat([x, y], 1), lambda: (randn(2, 3), randn(2, 4)), None),
    ("cat_negative_dim", lambda x, y: torch.cat((x, y, x), -1), lambda: (randn(2, 3), randn(2, 1)), None),
    ("cat_promotes", lambda x, y: torch.cat([x, y]), lambda: (randn(2, 3), torch.randint(0, 4, (1, 3))), None),
    ("cat_dyn", lambda x, y: torch.cat([x, y], 0), lambda: (randn(2, 3), randn(1, 3)), {0: {0: "B"}}),
    ("cat_single", lambda x: torch.cat([x]), X3, None),
    ("stack", lambda x, y: torch.stack([x, y]), lambda: (randn(2, 3), randn(2, 3)), None),
    ("stack_last", lambda x, y: torch.stack([x, y], -1), lambda: (randn(2, 3), randn(2, 3)), None),
    ("split", lambda x: x.split(2, 1), lambda: (randn(2, 5),), None),
    ("split_sizes", lambda x: x.split([1, 3], -1), lambda: (randn(2, 4),), None),
    ("split_dyn_other_axis", lambda x: x.split(2, 1), lambda: (randn(3, 4),), {0: {0: "B"}}),
    ("chunk", lambda x: x.chunk(3, 0), lambda: (randn(6, 2),), None),
    ("chunk_uneven", lambda x: torch.chunk(x, 3, 1), lambda: (randn(2, 7),), None),
    ("unbind", lambda x: x.unbind(1), X3, None),
    ("unbind_first", lambda x: torch.unbind(x), lambda: (randn(2, 3),), None),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_shape(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn)
