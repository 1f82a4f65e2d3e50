"""Grid sampling, affine grids, im2col/col2im (nn.Unfold / nn.Fold) and Tensor.unfold
exported and run in tract, compared with torch."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from tests.helpers import export_and_check
from tests.op._table import Fn, check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def grid(*shape: int, reach: float = 2.0) -> torch.Tensor:
    """Normalized sampling positions, some outside the image (|g| up to ``reach``)."""
    return (torch.rand(*shape) * 2 - 1) * reach


def sample(mode: str, padding: str, align_corners: bool) -> Callable[..., torch.Tensor]:
    return lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align_corners)


GRID_SAMPLE = [
    pytest.param(sample(mode, padding, aligned), lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2)), None,
                 id=f"{mode}_{padding}_{'aligned' if aligned else 'half_pixel'}")
    for mode, padding, aligned in itertools.product(("bilinear", "nearest", "bicubic"),
                                                     ("zeros", "border", "reflection"), (False, True))
] + [
    pytest.param(sample("bilinear", "zeros", False), lambda: (randn(1, 2, 3, 4, 5), grid(1, 2, 3, 4, 3)), None,
                 id="volume_trilinear"),
    pytest.param(sample("nearest", "border", True), lambda: (randn(1, 2, 3, 4, 5), grid(1, 3, 2, 2, 3)), None,
                 id="volume_nearest"),
    pytest.param(sample("bilinear", "zeros", False), lambda: (randn(2, 3, 5, 7), grid(2, 4, 6, 2)),
                 {1: {1: "H"}}, id="dyn_grid_rows"),
]

AFFINE = [
    pytest.param(lambda t: F.affine_grid(t, [2, 3, 5, 7], align_corners=False), lambda: (randn(2, 2, 3),), None,
                 id="affine_2d"),
    pytest.param(lambda t: F.affine_grid(t, [2, 3, 5, 7], align_corners=True), lambda: (randn(2, 2, 3),), None,
                 id="affine_2d_aligned"),
    pytest.param(lambda t: F.affine_grid(t, [2, 3, 1, 4], align_corners=False), lambda: (randn(2, 2, 3),), None,
                 id="affine_2d_single_row"),
    pytest.param(lambda t: F.affine_grid(t, [1, 3, 2, 5, 4], align_corners=False), lambda: (randn(1, 3, 4),), None,
                 id="affine_3d"),
    pytest.param(lambda x, t: F.grid_sample(x, F.affine_grid(t, [2, 3, 5, 7], align_corners=False),
                                            align_corners=False),
                 lambda: (randn(2, 3, 5, 7), randn(2, 2, 3) * 0.3 + torch.tensor([[1.0, 0, 0], [0, 1, 0]])), None,
                 id="spatial_transformer"),
]

PATCHES = [
    pytest.param(lambda x: F.unfold(x, 3, padding=1, stride=2), lambda: (randn(2, 3, 5, 7),), None, id="im2col"),
    pytest.param(lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=(0, 1), stride=(1, 2)),
                 lambda: (randn(2, 3, 5, 7),), None, id="im2col_rect_dilated"),
    pytest.param(lambda x: F.unfold(x, 2), lambda: (randn(3, 4, 5),), None, id="im2col_unbatched"),
    pytest.param(lambda x: F.unfold(x, 3, padding=1), lambda: (randn(2, 2, 4, 5),), {0: {0: "B"}},
                 id="im2col_dyn_batch"),
    pytest.param(lambda c: F.fold(c, (5, 7), 3, padding=1, stride=2), lambda: (randn(2, 27, 12),), None, id="col2im"),
    pytest.param(lambda c: F.fold(c, (6, 8), (2, 3), stride=2), lambda: (randn(2, 12, 9),), None,
                 id="col2im_uncovered_cells"),
    pytest.param(lambda c: F.fold(c, (4, 5), 2, dilation=(1, 2)), lambda: (randn(8, 9),), None, id="col2im_unbatched"),
    pytest.param(lambda x: F.fold(F.unfold(x, 3, padding=1), (4, 5), 3, padding=1), lambda: (randn(2, 2, 4, 5),),
                 {0: {0: "B"}}, id="fold_unfold_dyn_batch"),
    pytest.param(lambda x: x.unfold(-1, 5, 3), lambda: (randn(2, 17),), None, id="unfold_last"),
    pytest.param(lambda x: x.unfold(1, 4, 2) * 2, lambda: (randn(2, 9, 3),), None, id="unfold_middle"),
    pytest.param(lambda x: x.unfold(0, 2, 1), lambda: (torch.arange(7),), None, id="unfold_ints"),
    pytest.param(lambda x: x.unfold(-1, 5, 3), lambda: (randn(2, 17),), {0: {1: "T"}}, id="unfold_dyn"),
    pytest.param(lambda x: x.unfold(1, 4, 2), lambda: (randn(2, 9, 3),), {0: {1: "T"}}, id="unfold_dyn_middle"),
    pytest.param(lambda x: x.unfold(0, 4, 4), lambda: (randn(16),), {0: {0: "T"}}, id="unfold_dyn_1d"),
    pytest.param(lambda x: x.unfold(1, 4, 4), lambda: (randn(2, 16),), {0: {0: "B", 1: "T"}}, id="unfold_dyn_batch"),
]


@pytest.mark.parametrize("fn, make, dyn", GRID_SAMPLE + AFFINE + PATCHES)
def test_sampling(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                  tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fn, make", [
    pytest.param(lambda x: F.unfold(x, 3, padding=1), lambda: (randn(1, 2, 4, 5).half(),), id="im2col"),
    pytest.param(lambda c: F.fold(c, (4, 5), 3, padding=1), lambda: (randn(1, 18, 20).half(),), id="col2im"),
    pytest.param(lambda t: F.affine_grid(t, [1, 2, 4, 5], align_corners=False), lambda: (randn(1, 2, 3).half(),),
                 id="affine_grid"),
    pytest.param(lambda x: x.unfold(-1, 3, 2), lambda: (randn(2, 9).half(),), id="unfold"),
])
def test_sampling_f16(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, atol=1e-2, rtol=1e-2)


def test_grid_sample_f16(tmp_path: Any) -> None:
    """tract samples f16 in f32 and rounds once; torch rounds at every step, so the two
    differ by a few f16 ulps (compared at 'very')."""
    torch.manual_seed(0)
    target = TractNNEF.latest().with_check_io_tolerance(TractCheckTolerance.VERY)
    export_and_check(Fn(sample("bilinear", "zeros", False)), (randn(2, 3, 5, 7).half(), grid(2, 4, 6, 2).half()),
                     tmp_path, target=target, atol=1e-2, rtol=1e-2)


class Unfolder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unfold, self.fold = nn.Unfold(3, padding=1), nn.Fold((4, 6), 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fold(self.unfold(x) * 0.5)


@pytest.mark.parametrize("target", [TractNNEF.latest(), KhronosNNEF.latest()], ids=["tract", "strict_nnef"])
def test_unfold_fold_modules(target: Any, tmp_path: Any) -> None:
    """Plain conv/deconv/reshape: strict NNEF can express them too."""
    torch.manual_seed(0)
    export_and_check(Unfolder(), (randn(1, 2, 4, 6),), tmp_path, target=target)


@pytest.mark.parametrize("fn, make, target, message", [
    pytest.param(sample("bilinear", "zeros", False), lambda: (randn(1, 2, 3, 4), grid(1, 2, 2, 2)), TractNNEF("0.23.1"),
                 "aten::grid_sampler needs tract >= 0.23.2 but the target is tract 0.23.1", id="grid_sample_old_tract"),
])
def test_sampling_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], target: Any,
                          message: str, tmp_path: Any) -> None:
    inputs = make()
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=[f"in{k}" for k in range(len(inputs))])
