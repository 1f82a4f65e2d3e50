"""Resizing (interpolate / Upsample, pixel (un)shuffle) exported and compared with tract."""

from __future__ import annotations

import tarfile
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check


class Interp(nn.Module):
    def __init__(self, **kwargs: Any):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **self.kwargs)


def x1(t: int = 7) -> torch.Tensor:
    return torch.randn(2, 3, t)


def x2(h: int = 5, w: int = 6) -> torch.Tensor:
    return torch.randn(2, 3, h, w)


CASES = [
    ("nearest2d_scale2", lambda: nn.Upsample(scale_factor=2), x2),
    ("nearest2d_scale_rect", lambda: nn.Upsample(scale_factor=(3, 2)), x2),
    ("nearest2d_scale_frac", lambda: Interp(scale_factor=1.5), x2),
    ("nearest2d_size", lambda: Interp(size=(7, 13)), x2),
    ("nearest2d_size_down", lambda: Interp(size=(3, 4)), x2),
    ("nearest1d", lambda: Interp(scale_factor=3), x1),
    ("nearest3d", lambda: Interp(scale_factor=(1, 2, 2)), lambda: torch.randn(1, 2, 3, 4, 5)),
    ("nearest_exact2d", lambda: Interp(scale_factor=2, mode="nearest-exact"), x2),
    ("nearest_exact2d_size", lambda: Interp(size=(8, 9), mode="nearest-exact"), x2),
    ("bilinear_scale2", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), x2),
    ("bilinear_scale2_aligned", lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), x2),
    ("bilinear_size", lambda: Interp(size=(7, 11), mode="bilinear"), x2),
    ("bilinear_size_aligned", lambda: Interp(size=(7, 11), mode="bilinear", align_corners=True), x2),
    ("bilinear_scale_frac", lambda: Interp(scale_factor=1.5, mode="bilinear"), x2),
    ("bilinear_scale_frac_aligned", lambda: Interp(scale_factor=1.7, mode="bilinear", align_corners=True), x2),
    ("bilinear_down", lambda: Interp(size=(3, 4), mode="bilinear"), x2),
    ("linear1d", lambda: Interp(scale_factor=2, mode="linear"), x1),
    ("linear1d_aligned_size", lambda: Interp(size=10, mode="linear", align_corners=True), x1),
    ("trilinear", lambda: Interp(scale_factor=2, mode="trilinear"), lambda: torch.randn(1, 2, 3, 4, 2)),
    ("bicubic_scale2", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), x2),
    ("bicubic_scale2_aligned", lambda: nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), x2),
    ("bicubic_scale_frac", lambda: Interp(scale_factor=1.5, mode="bicubic"), x2),
    ("bicubic_scale_rect", lambda: Interp(scale_factor=(3, 2), mode="bicubic"), x2),
    ("bicubic_size", lambda: Interp(size=(9, 4), mode="bicubic"), x2),
    ("bicubic_size_aligned", lambda: Interp(size=(9, 4), mode="bicubic", align_corners=True), x2),
    ("bicubic_down", lambda: Interp(size=(3, 3), mode="bicubic"), x2),
    ("bicubic_f16", lambda: Interp(scale_factor=2, mode="bicubic"), lambda: x2().half()),
    ("pixel_shuffle", lambda: nn.PixelShuffle(2), lambda: torch.randn(2, 12, 3, 4)),
    ("pixel_shuffle_3", lambda: nn.PixelShuffle(3), lambda: torch.randn(1, 9, 2, 3)),
    ("pixel_unshuffle", lambda: nn.PixelUnshuffle(2), lambda: torch.randn(2, 3, 4, 6)),
    ("pixel_unshuffle_unbatched", lambda: nn.PixelUnshuffle(3), lambda: torch.randn(2, 6, 3)),
]


@pytest.mark.parametrize("factory,inputs", [pytest.param(f, i, id=n) for n, f, i in CASES])
def test_resize(factory, inputs, tmp_path):
    torch.manual_seed(0)
    export_and_check(factory().eval(), inputs(), tmp_path, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "factory,op",
    [
        pytest.param(lambda: nn.Upsample(scale_factor=2), "nearest_upsample", id="nearest"),
        pytest.param(lambda: nn.Upsample(scale_factor=2, mode="bilinear"), "multilinear_upsample", id="bilinear"),
        pytest.param(lambda: nn.Upsample(scale_factor=3, mode="bilinear", align_corners=True),
                     "multilinear_upsample", id="bilinear_aligned"),
        pytest.param(lambda: Interp(scale_factor=2, mode="nearest-exact"), "nearest_upsample", id="nearest_exact"),
    ],
)
def test_resize_old_target_fragments(factory, op, tmp_path):
    """Before tract_core_resize (0.23.2): nearest_upsample / multilinear_upsample."""
    torch.manual_seed(0)
    path = export_and_check(factory().eval(), x2(), tmp_path, target=TractNNEF("0.22.1"))
    with tarfile.open(path) as archive:
        member = archive.extractfile("graph.nnef")
        assert member is not None
        text = member.read().decode()
    assert f"= {op}(" in text and "tract_core_resize" not in text


def test_resize_old_target_fractional_refused(tmp_path):
    with pytest.raises(T2NErrorNotImplemented, match="non-integer factor"):
        export_and_check(Interp(scale_factor=1.5), x2(), tmp_path, target=TractNNEF("0.22.1"))


def test_upsample_dynamic_height(tmp_path):
    """Integer scale factors go as `scales`, so a dynamic axis stays dynamic."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Upsample(scale_factor=2, mode="bilinear")).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "H"}})
    export_and_check(
        model, x2(5, 6), tmp_path, target=target, input_names=["x"], output_names=["y"],
        run_inputs=[x2(9, 6)],
    )


@pytest.mark.parametrize("model, target, message", [
    pytest.param(Interp(scale_factor=2, mode="bicubic"), TractNNEF("0.22.1"),
                 "aten::upsample_bicubic2d needs tract >= 0.23.2 but the target is tract 0.22.1", id="old_tract"),
    pytest.param(Interp(size=(3, 3), mode="bicubic", antialias=True), TractNNEF.latest(),
                 "antialiased bicubic interpolation", id="antialias"),
])
def test_bicubic_refused(model, target, message, tmp_path):
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(model, x2(), tmp_path, target=target)


def test_bicubic_dynamic_height(tmp_path):
    """An integer scale factor holds on a dynamic axis too."""
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "H"}})
    export_and_check(Interp(scale_factor=2, mode="bicubic"), x2(5, 6), tmp_path, target=target, input_names=["x"],
                     run_inputs=[x2(8, 6)])


class ToSizeOf(nn.Module):
    """Resize to sizes computed from the input's (a feature pyramid's top-down path)."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(x.shape[2] * 3 // 2, 9), mode=self.mode)


@pytest.mark.parametrize("model", [
    pytest.param(Interp(scale_factor=1.5), id="scale_factor"),
    pytest.param(Interp(scale_factor=1.5, mode="bilinear"), id="scale_factor_bilinear"),
    pytest.param(ToSizeOf("nearest"), id="sizes"),
    pytest.param(ToSizeOf("bilinear"), id="sizes_bilinear"),
])
def test_non_integer_ratio_on_a_dynamic_axis_is_refused(model: nn.Module, tmp_path):
    """A non-integer ratio on a dynamic axis (H -> floor(1.5 H)): tract's resize takes its
    output size from a constant (scales of a known length, or sizes), which a dynamic axis
    is not, so the export refuses it before writing anything, naming the axis."""
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "H"}})
    with pytest.raises(T2NErrorNotImplemented, match=r"resizing by a non-integer (scale factor|ratio) needs axis 2"):
        export_and_check(model, x2(5, 6), tmp_path, target=target, input_names=["x"])
    assert list(tmp_path.iterdir()) == []
