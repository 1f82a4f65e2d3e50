"""Padding and pooling ops exported and compared with tract."""

from __future__ import annotations

import tarfile

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from tests.helpers import Fn, export_and_check


class First(nn.Module):
    """Keeps the values of a (values, indices) pool."""

    def __init__(self, pool: nn.Module):
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)[0]


class Both(nn.Module):
    """Returns values and indices (the int64 indices compare exactly)."""

    def __init__(self, pool: nn.Module):
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = self.pool(x)
        return values, indices


def x1(t: int = 11) -> torch.Tensor:
    return torch.randn(2, 3, t)


def x2(h: int = 9, w: int = 8) -> torch.Tensor:
    return torch.randn(2, 3, h, w)


def x3() -> torch.Tensor:
    return torch.randn(1, 2, 5, 6, 7)


CASES = [
    # padding
    ("pad_constant", lambda: Fn(lambda x: F.pad(x, (1, 2, 0, 3), value=0.5)), x2),
    ("pad_constant_all_axes", lambda: Fn(lambda x: F.pad(x, (1, 1, 2, 0, 1, 0, 0, 1))), x2),
    ("pad_negative_crop", lambda: Fn(lambda x: F.pad(x, (2, -1, -2, 1))), x2),
    ("zero_pad2d", lambda: nn.ZeroPad2d((1, 0, 2, 1)), x2),
    ("constant_pad1d", lambda: nn.ConstantPad1d((3, 1), -2.0), x1),
    ("reflection_pad1d", lambda: nn.ReflectionPad1d((2, 3)), x1),
    ("reflection_pad2d", lambda: nn.ReflectionPad2d((1, 2, 3, 0)), x2),
    ("replication_pad1d", lambda: nn.ReplicationPad1d((0, 4)), x1),
    ("replication_pad2d", lambda: nn.ReplicationPad2d((2, 1, 1, 3)), x2),
    ("replication_pad3d", lambda: nn.ReplicationPad3d(1), x3),
    ("circular_pad1d", lambda: Fn(lambda x: F.pad(x, (3, 2), mode="circular")), x1),
    ("circular_pad2d", lambda: nn.CircularPad2d((1, 2, 0, 3)), x2),
    # max pooling
    ("max_pool1d", lambda: nn.MaxPool1d(3), x1),
    ("max_pool1d_stride_pad", lambda: nn.MaxPool1d(3, stride=2, padding=1), x1),
    ("max_pool1d_dilation", lambda: nn.MaxPool1d(3, stride=1, dilation=2), x1),
    ("max_pool1d_ceil", lambda: nn.MaxPool1d(2, ceil_mode=True), x1),
    ("max_pool2d", lambda: nn.MaxPool2d(2), x2),
    ("max_pool2d_rect_pad", lambda: nn.MaxPool2d((3, 2), stride=(2, 1), padding=(1, 1)), x2),
    ("max_pool2d_ceil_pad", lambda: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), x2),
    ("max_pool2d_dilation", lambda: nn.MaxPool2d(2, stride=1, dilation=(2, 3)), x2),
    ("max_pool2d_unbatched", lambda: nn.MaxPool2d(2), lambda: torch.randn(3, 8, 6)),
    ("max_pool3d", lambda: nn.MaxPool3d(2, stride=(1, 2, 2), padding=(1, 0, 1)), x3),
    ("max_pool2d_indices", lambda: Both(nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)), x2),
    # average pooling
    ("avg_pool1d", lambda: nn.AvgPool1d(3), x1),
    ("avg_pool1d_pad_include", lambda: nn.AvgPool1d(3, stride=2, padding=1), x1),
    ("avg_pool1d_pad_exclude", lambda: nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False), x1),
    ("avg_pool1d_ceil", lambda: nn.AvgPool1d(2, ceil_mode=True), x1),
    ("avg_pool2d", lambda: nn.AvgPool2d(2), x2),
    ("avg_pool2d_pad_include", lambda: nn.AvgPool2d(3, stride=2, padding=1), x2),
    ("avg_pool2d_pad_exclude", lambda: nn.AvgPool2d((3, 2), stride=1, padding=1, count_include_pad=False), x2),
    ("avg_pool2d_ceil_include", lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), x2),
    ("avg_pool2d_ceil_exclude", lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                     count_include_pad=False), x2),
    ("avg_pool2d_ceil_nopad", lambda: nn.AvgPool2d(2, ceil_mode=True), x2),
    ("avg_pool2d_divisor", lambda: nn.AvgPool2d(3, stride=2, padding=1, divisor_override=5), x2),
    ("avg_pool2d_unbatched", lambda: nn.AvgPool2d(2), lambda: torch.randn(3, 8, 6)),
    ("avg_pool3d", lambda: nn.AvgPool3d(2, stride=1, padding=1), x3),
    # adaptive pooling
    ("adaptive_avg_pool1d_global", lambda: nn.AdaptiveAvgPool1d(1), x1),
    ("adaptive_avg_pool1d_divisible", lambda: nn.AdaptiveAvgPool1d(4), lambda: x1(12)),
    ("adaptive_avg_pool1d_bins", lambda: nn.AdaptiveAvgPool1d(4), lambda: x1(11)),
    ("adaptive_avg_pool2d_global", lambda: nn.AdaptiveAvgPool2d(1), x2),
    ("adaptive_avg_pool2d_divisible", lambda: nn.AdaptiveAvgPool2d((3, 4)), x2),
    ("adaptive_avg_pool2d_mixed", lambda: nn.AdaptiveAvgPool2d((1, 3)), x2),
    ("adaptive_avg_pool2d_bins", lambda: nn.AdaptiveAvgPool2d((4, 3)), x2),
    ("adaptive_avg_pool2d_none", lambda: nn.AdaptiveAvgPool2d((None, 2)), x2),
    ("adaptive_avg_pool3d", lambda: nn.AdaptiveAvgPool3d((1, 2, 3)), x3),
    ("adaptive_max_pool1d", lambda: nn.AdaptiveMaxPool1d(1), x1),
    ("adaptive_max_pool1d_bins", lambda: nn.AdaptiveMaxPool1d(3), lambda: x1(8)),
    ("adaptive_max_pool2d_divisible", lambda: nn.AdaptiveMaxPool2d((3, 2)), x2),
    ("adaptive_max_pool2d_bins", lambda: nn.AdaptiveMaxPool2d((2, 3)), x2),
    ("adaptive_max_pool2d_indices", lambda: Both(nn.AdaptiveMaxPool2d((3, 4), return_indices=True)), x2),
    ("adaptive_max_pool2d_bins_values", lambda: First(nn.AdaptiveMaxPool2d((2, 3), return_indices=True)), x2),
]


@pytest.mark.parametrize("factory,inputs", [pytest.param(f, i, id=n) for n, f, i in CASES])
def test_pool(factory, inputs, tmp_path):
    torch.manual_seed(0)
    export_and_check(factory().eval(), inputs(), tmp_path)


def test_adaptive_max_pool_bins_indices_refused(tmp_path):
    """Indices of non-divisible adaptive max pooling have no export: a clear error."""
    torch.manual_seed(0)
    model = Both(nn.AdaptiveMaxPool2d((2, 3), return_indices=True)).eval()
    with pytest.raises(T2NErrorNotImplemented, match="output .* of aten::adaptive_max_pool2d .* cannot export"):
        export_and_check(model, x2(), tmp_path)


def test_global_pools_dynamic_time(tmp_path):
    """Global average/max pooling over a dynamic axis (reduce ops) run at another length."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(3, 5, 3, padding=1), nn.MaxPool1d(2), nn.AdaptiveAvgPool1d(1)).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    export_and_check(
        model, x1(16), tmp_path, target=target, input_names=["x"], output_names=["y"],
        run_inputs=[x1(30)],
    )


@pytest.mark.parametrize(
    "factory,inputs",
    [
        pytest.param(lambda: nn.ReplicationPad2d((2, 1, 0, 3)), x2, id="replicate"),
        pytest.param(lambda: nn.ReflectionPad1d((2, 1)), x1, id="reflect"),
        pytest.param(lambda: nn.CircularPad1d((1, 2)), x1, id="circular"),
        pytest.param(lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), x2, id="avg_pool_ceil"),
        pytest.param(lambda: nn.MaxPool2d(3, stride=2, padding=1), x2, id="max_pool"),
    ],
)
def test_pool_khronos_strict(factory, inputs, tmp_path):
    """Strict NNEF (no tract extension) still loads and matches in tract."""
    torch.manual_seed(0)
    path = export_and_check(factory().eval(), inputs(), tmp_path, target=KhronosNNEF("1.0.5"))
    with tarfile.open(path) as archive:
        member = archive.extractfile("graph.nnef")
        assert member is not None
        assert "tract_" not in member.read().decode()
