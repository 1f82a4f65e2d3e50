"""Layout ops (op/aten/layout.py) exported and run in tract, compared with torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 9, shape)


X3 = lambda: (randn(2, 3, 5),)  # noqa: E731 - table shorthand
M = lambda: (randn(3, 5),)  # noqa: E731
DYN0 = {0: {0: "B"}}
DYN1 = {0: {1: "S"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("atleast_1d_scalar", lambda x: torch.atleast_1d(x.sum()), M, None),
    ("atleast_2d_vector", lambda x: torch.atleast_2d(x[0]), M, None),
    ("atleast_3d_vector", lambda x: torch.atleast_3d(x[0]), M, None),
    ("atleast_3d_matrix", lambda x: torch.atleast_3d(x), M, None),
    ("atleast_3d_keeps_rank4", lambda x: torch.atleast_3d(x.unsqueeze(0)), X3, None),
    ("atleast_2d_sequence", lambda x, y: torch.atleast_2d(x, y), lambda: (randn(4), randn(2, 3)), None),
    ("atleast_2d_dyn", lambda x: torch.atleast_2d(x), lambda: (randn(5),), {0: {0: "S"}}),
    ("broadcast_tensors", lambda x, y: torch.broadcast_tensors(x, y), lambda: (randn(3, 1), randn(2, 1, 4)), None),
    ("broadcast_tensors_int", lambda x, y: torch.broadcast_tensors(x, y), lambda: (ints(3, 1), randn(4)), None),
    ("broadcast_tensors_dyn", lambda x, y: torch.broadcast_tensors(x, y), lambda: (randn(1, 5), randn(3, 1)), DYN1),
    ("vstack", lambda x, y: torch.vstack((x, y)), lambda: (randn(5), randn(2, 5)), None),
    ("row_stack", lambda x, y: torch.row_stack((x, y)), lambda: (randn(5), randn(5)), None),
    ("hstack_1d", lambda x, y: torch.hstack((x, y)), lambda: (randn(3), randn(4)), None),
    ("hstack_2d_promote", lambda x, y: torch.hstack((x, y)), lambda: (randn(3, 2), ints(3, 1)), None),
    ("hstack_dyn", lambda x, y: torch.hstack((x, y)), lambda: (randn(2, 5), randn(2, 5)), {0: {0: "B"}, 1: {0: "B"}}),
    ("dstack", lambda x, y: torch.dstack((x, y)), lambda: (randn(3), randn(1, 3, 2)), None),
    ("column_stack", lambda x, y, z: torch.column_stack((x, y, z)), lambda: (randn(4), randn(4, 2), randn(4)), None),
    ("vsplit", lambda x: torch.vsplit(x, 3), lambda: (randn(6, 2),), None),
    ("hsplit_indices", lambda x: torch.hsplit(x, [1, 4]), M, None),
    ("hsplit_1d", lambda x: torch.hsplit(x, 2), lambda: (randn(6),), None),
    ("dsplit", lambda x: torch.dsplit(x, [2]), X3, None),
    ("hsplit_dyn_batch", lambda x: torch.hsplit(x, [2]), X3, DYN0),
    ("tensor_split_indices", lambda x: torch.tensor_split(x, [1, 3], dim=-1), M, None),
    ("tensor_split_sections_uneven", lambda x: torch.tensor_split(x, 3, dim=1), lambda: (randn(2, 7),), None),
    ("movedim", lambda x: torch.movedim(x, 0, -1), X3, None),
    ("movedim_lists", lambda x: torch.movedim(x, (0, 1), (2, 0)), X3, None),
    ("moveaxis_dyn", lambda x: torch.moveaxis(x, 1, 2) * 2, X3, DYN1),
    ("ravel", lambda x: torch.ravel(x), X3, None),
    ("ravel_dyn", lambda x: x.ravel() * 2, X3, DYN1),
    ("rot90", lambda x: torch.rot90(x), M, None),
    ("rot90_k2", lambda x: torch.rot90(x, 2, (1, 2)), X3, None),
    ("rot90_k3_negative_dims", lambda x: torch.rot90(x, -1, (-1, 0)), X3, None),
    ("rot90_k4", lambda x: torch.rot90(x, 4) + 1, M, None),
    ("fliplr", lambda x: torch.fliplr(x), X3, None),
    ("flipud_dyn", lambda x: torch.flipud(x), X3, DYN0),
    ("mT", lambda x: x.mT, X3, None),
    ("mH_dyn", lambda x: x.mH + 0, X3, DYN1),
    ("adjoint", lambda x: x.adjoint(), M, None),
    ("matrix_H", lambda x: x.H, M, None),
    ("tile", lambda x: torch.tile(x, (2,)), M, None),
    ("tile_more_dims", lambda x: x.tile((2, 1, 3)), M, None),
    ("repeat_interleave_dim", lambda x: torch.repeat_interleave(x, 3, dim=1), X3, None),
    ("repeat_interleave_negative_dim", lambda x: x.repeat_interleave(2, dim=-1), X3, None),
    ("repeat_interleave_flat", lambda x: torch.repeat_interleave(x, 2), M, None),
    ("repeat_interleave_dyn", lambda x: x.repeat_interleave(2, dim=1), X3, DYN1),
    ("repeat_interleave_gqa_dyn",
     lambda x: x[:, :, None].expand(2, 3, 2, 5).reshape(2, 6, 5) + x.repeat_interleave(2, 1), X3, None),
    ("repeat_interleave_tensor_in_forward", lambda x: x.repeat_interleave(torch.tensor([2, 0, 1, 1, 1]), dim=1), M,
     None),
    ("repeat_interleave_tensor_single", lambda x: x.repeat_interleave(torch.tensor([2]), dim=0), M, None),
    ("repeat_interleave_indices", lambda x: x * torch.repeat_interleave(torch.tensor([2, 0, 3])), lambda: (randn(5),),
     None),
    ("channel_shuffle", lambda x: F.channel_shuffle(x, 2), lambda: (randn(2, 6, 3, 3),), None),
    ("native_channel_shuffle_dyn", lambda x: torch.native_channel_shuffle(x, 3), lambda: (randn(1, 6, 5),),
     {0: {2: "T"}}),
    ("unfold", lambda x: x.unfold(1, 2, 1), M, None),
    ("unfold_step", lambda x: x.unfold(-1, 3, 2), lambda: (randn(2, 3, 9),), None),
    ("unfold_first_axis", lambda x: x.unfold(0, 2, 3), lambda: (randn(8, 3),), None),
    ("unfold_dyn_frames", lambda x: x.unfold(1, 4, 2), lambda: (randn(2, 11),), DYN1),
    ("unfold_dyn_ints", lambda x: x.unfold(1, 2, 2), lambda: (torch.arange(12).reshape(2, 6),), DYN1),
    ("unfold_dyn_step1", lambda x: x.unfold(2, 3, 1) * 2, lambda: (randn(2, 3, 7),), {0: {2: "T"}}),
    ("unfold_copy", lambda x: torch.unfold_copy(x, 0, 2, 1), lambda: (randn(5),), None),
    ("block_diag", lambda x, y, z: torch.block_diag(x, y, z), lambda: (randn(2, 3), randn(3), randn(1, 1)), None),
    ("block_diag_int", lambda x, y: torch.block_diag(x, y), lambda: (ints(2, 2), ints(1, 3)), None),
    ("block_diag_promote", lambda x, y: torch.block_diag(x, y), lambda: (ints(2, 2), randn(2, 1)), None),
    ("view_copy", lambda x: torch.view_copy(x, (5, 6)), X3, None),
    ("permute_copy", lambda x: torch.permute_copy(x, (2, 0, 1)), X3, None),
    ("transpose_copy", lambda x: torch.transpose_copy(x, 0, -1), X3, None),
    ("t_copy", lambda x: torch.t_copy(x), M, None),
    ("squeeze_copy", lambda x: torch.squeeze_copy(x, 1), lambda: (randn(3, 1, 2),), None),
    ("unsqueeze_copy", lambda x: torch.unsqueeze_copy(x, -1), M, None),
    ("expand_copy", lambda x: torch.expand_copy(x, (2, 3, 5)), M, None),
    ("slice_copy", lambda x: torch.slice_copy(x, 1, 1, 4, 2), M, None),
    ("select_copy", lambda x: torch.select_copy(x, 0, -1), M, None),
    ("narrow_copy", lambda x: torch.narrow_copy(x, 1, 1, 3), M, None),
    ("split_copy", lambda x: torch.split_copy(x, 2, 1), M, None),
    ("split_with_sizes_copy", lambda x: torch.split_with_sizes_copy(x, [1, 4], 1), M, None),
    ("unbind_copy", lambda x: torch.unbind_copy(x, 1), M, None),
    ("detach_copy", lambda x: torch.detach_copy(x) * 2, M, None),
    ("alias_copy", lambda x: torch.alias_copy(x) + 1, M, None),
    ("copy_dyn", lambda x: torch.permute_copy(x, (1, 0, 2)), X3, DYN1),
    ("reshape_copy", lambda x: torch.ops.aten._reshape_copy(x, [6, 5]), X3, None),
    ("f16", lambda x: torch.rot90(x.half(), 1).mT.repeat_interleave(2, 0), M, None),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_layout(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("fn, make, dyn, message", [
    pytest.param(lambda x: x.repeat_interleave(torch.tensor([1, 2, 1]), dim=1), lambda: (randn(2, 3),), DYN1,
                 "repeats tensor along a dynamic axis", id="repeat_interleave_tensor_dyn"),
    # The output length depends on the values of repeats: a graph input would be frozen.
    pytest.param(lambda x, r: torch.repeat_interleave(x, r, dim=0), lambda: (randn(3, 2), torch.tensor([1, 3, 0])),
                 None, "repeats tensor computed from the model inputs", id="repeat_interleave_tensor_input"),
    pytest.param(lambda r: torch.repeat_interleave(r), lambda: (torch.tensor([2, 0, 3]),), None,
                 "repeats tensor computed from the model inputs", id="repeat_interleave_indices_input"),
    pytest.param(lambda x: F.channel_shuffle(x, 2), lambda: (randn(1, 4, 3),), {0: {1: "C"}},
                 "channel_shuffle needs axis 1", id="channel_shuffle_dyn_channels"),
])
def test_layout_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, message: str,
                        tmp_path: Any) -> None:
    """Variants whose sizes tract cannot know fail with an error naming the op and why."""
    with pytest.raises(T2NErrorNotImplemented, match=message):
        check(fn, make(), tmp_path, dyn)


# torch_graph/ir/'s rules move the dynamic marks with the axes, so a later reshape
# (whose -1 must be the moved dynamic axis) reads them right.
@pytest.mark.parametrize("fn", [
    pytest.param(lambda x: torch.movedim(x, 1, 0).reshape(-1, 10), id="movedim"),
    pytest.param(lambda x: x.mT.sum(1).reshape(-1), id="mT"),
    pytest.param(lambda x: x.unfold(1, 2, 1).reshape(2, -1, 10), id="unfold"),
    pytest.param(lambda x: x.unfold(1, 2, 2).reshape(2, -1, 10), id="unfold_step"),
    pytest.param(lambda x: torch.rot90(x, 1, (1, 2)).reshape(-1, 5), id="rot90"),
    pytest.param(lambda x: torch.rot90(x, 2, (0, 1)).reshape(-1, 5), id="rot90_half_turn"),
    pytest.param(lambda x: x[1].T.reshape(-1, 5), id="numpy_T"),
    pytest.param(lambda x: x.mH.flatten(1), id="mH"),
])
def test_layout_dyn_then_reshape(fn: Callable[..., Any], tmp_path: Any) -> None:
    check(fn, X3(), tmp_path, DYN1)


@pytest.mark.parametrize("fn, make", [
    pytest.param(lambda x, y: torch.vstack((x, y)), lambda: (randn(5), randn(2, 5)), id="vstack"),
    pytest.param(lambda x, y, z: torch.column_stack((x, y, z)), lambda: (randn(4), randn(4, 2), randn(4)),
                 id="column_stack"),
    pytest.param(lambda x: torch.movedim(x, (0, 1), (2, 0)), X3, id="movedim"),
    pytest.param(lambda x: x.repeat_interleave(2, dim=1), X3, id="repeat_interleave"),
    pytest.param(lambda x: F.channel_shuffle(x, 2), lambda: (randn(2, 6, 3, 3),), id="channel_shuffle"),
    pytest.param(lambda x, y: torch.block_diag(x, y), lambda: (randn(2, 3), randn(1, 2)), id="block_diag"),
])
def test_layout_khronos_strict(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]],
                               tmp_path: Any) -> None:
    """Layout ops built from plain NNEF (unsqueeze, tile, reshape, transpose, pad, concat)
    export to strict Khronos targets too."""
    torch.manual_seed(0)
    path = export_and_check(Fn(fn), make(), tmp_path, target=KhronosNNEF("1.0.5"), compression_level=None)
    assert "tract_" not in (path / "graph.nnef").read_text()
