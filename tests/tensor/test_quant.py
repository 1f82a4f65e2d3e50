"""fastnnef.tensor.quant: the Q4_0 QTensor holds only packed blocks, agrees with the
native quantizer, runs in torch on exactly tract's values, and rejects what Q4_0 can't hold."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef import _native
from fastnnef.exceptions import T2NErrorImpossibleQuantization, T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from fastnnef.tensor.quant import (
    QScalePerGroupF16,
    QTensor,
    QTensorTractScaleOnly,
    fp_to_tract_q4_0_with_min_max_calibration,
    qscale_per_group_f16_min_max_calibration,
)


def _weight(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(*shape).to(dtype)


def test_holds_only_packed_blocks() -> None:
    w = _weight(64, 128)
    q = fp_to_tract_q4_0_with_min_max_calibration(w)
    tensors = [v for v in q.__dict__.values() if isinstance(v, torch.Tensor)]
    assert [(t.dtype, t.numel()) for t in tensors] == [(torch.uint8, w.numel() // 32 * 18)]
    assert q.nbytes_quantized() * 7 < w.numel() * w.element_size()
    # The wrapper itself owns no float storage, and the scales are views of the blocks.
    with pytest.raises(RuntimeError):
        q.untyped_storage().data_ptr()
    assert q.qscheme.scale.untyped_storage().data_ptr() == q.blocks.untyped_storage().data_ptr()
    assert (q.shape, q.dtype, q.numel()) == (w.shape, torch.float32, w.numel())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("percentile", [1.0, 0.9])
def test_torch_scheme_and_native_quantizer_agree(dtype: torch.dtype, percentile: float) -> None:
    w = _weight(16, 2, 32, dtype=dtype)
    native = fp_to_tract_q4_0_with_min_max_calibration(w, percentile=percentile)
    scheme = qscale_per_group_f16_min_max_calibration(w, n_bits=4, group_size=32, percentile=percentile)
    from_scheme = QTensorTractScaleOnly(w, scheme, dequant_to_dtype=dtype)
    assert torch.equal(native.blocks, from_scheme.blocks)
    assert torch.equal(native.decompress_to_u8(), scheme.quantize_as_u8(w))
    assert native.dequant_to_dtype == dtype and native.decompress().dtype == dtype


def test_decompress_is_tracts_dequantization() -> None:
    w = _weight(8, 64)
    q = fp_to_tract_q4_0_with_min_max_calibration(w)
    expected = _native.dat_decode(_native.dat_encode(w.numpy(), "q4_0")).array()
    np.testing.assert_array_equal(q.decompress().numpy(), expected)
    # The generic scheme formula gives the same values.
    assert torch.equal(q.qscheme.dequantize(q.u8_blob, torch.float32), q.decompress())
    assert (q.decompress() - w).abs().max() <= w.abs().max() / 8


def test_runs_in_torch_and_survives_parameter_and_deepcopy() -> None:
    lin = nn.Linear(64, 4)
    q = fp_to_tract_q4_0_with_min_max_calibration(lin.weight.data)
    lin.weight = nn.Parameter(q, requires_grad=False)
    assert isinstance(lin.weight, QTensorTractScaleOnly)
    x = _weight(3, 64)
    torch.testing.assert_close(lin(x), x @ q.decompress().T + lin.bias, rtol=0, atol=0)
    clone = copy.deepcopy(lin)
    assert isinstance(clone.weight, QTensorTractScaleOnly)
    assert torch.equal(clone.weight.blocks, q.blocks)
    assert clone.weight.blocks.data_ptr() != q.blocks.data_ptr()


def test_writes_into_a_qtensor_raise() -> None:
    q = fp_to_tract_q4_0_with_min_max_calibration(_weight(4, 32))
    with pytest.raises(T2NErrorNotImplemented, match="writes into a quantized tensor"):
        q.mul_(2)
    with pytest.raises(T2NErrorNotImplemented):
        q.copy_(torch.zeros(4, 32))


def test_generic_qtensor_keeps_codes_not_floats() -> None:
    w = _weight(4, 16)
    scheme = qscale_per_group_f16_min_max_calibration(w, n_bits=8, group_size=16)
    q = QTensor(w, scheme)
    assert q.u8_blob.dtype == torch.uint8 and q.u8_blob.shape == w.shape
    assert torch.equal(q.decompress(), scheme.quantize_as_torch(w))
    assert (q.decompress() - w).abs().max() <= w.abs().max() / 127
    assert torch.equal(q + 0, q.decompress())


@pytest.mark.parametrize("shape", [(64,), (2, 2, 2, 2, 32), (4, 48), (3, 5, 6)])
def test_impossible_shapes(shape: tuple[int, ...]) -> None:
    with pytest.raises(T2NErrorImpossibleQuantization, match="cannot be quantized to Q4_0"):
        fp_to_tract_q4_0_with_min_max_calibration(torch.zeros(shape))


@pytest.mark.parametrize("percentile", [0.0, -0.5, 1.5])
def test_bad_percentile(percentile: float) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="percentile"):
        fp_to_tract_q4_0_with_min_max_calibration(torch.zeros(4, 32), percentile=percentile)
    with pytest.raises(T2NErrorInvalidArgument, match="percentile"):
        qscale_per_group_f16_min_max_calibration(torch.zeros(4, 32), 4, 32, percentile=percentile)


def test_scheme_errors() -> None:
    w = torch.zeros(4, 32)
    with pytest.raises(T2NErrorImpossibleQuantization):
        qscale_per_group_f16_min_max_calibration(torch.zeros(3, 5), 4, 32)
    with pytest.raises(T2NErrorImpossibleQuantization, match="n_bits=4"):
        QTensorTractScaleOnly(w, qscale_per_group_f16_min_max_calibration(w, 8, 32))
    scheme = QScalePerGroupF16(32, torch.full((4,), -0.5), 4)
    assert scheme.clone_with_scale_factor(2.0).scale.flatten().tolist() == [-1.0] * 4


def test_write_in_file(tmp_path: Path) -> None:
    w = _weight(8, 64)
    q = fp_to_tract_q4_0_with_min_max_calibration(w)
    q.write_in_file(tmp_path, "a/w")
    assert (tmp_path / "a" / "w.dat").read_bytes() == _native.dat_encode(w.numpy(), "q4_0")
    q.write_in_file(tmp_path, "a/w")  # same bytes: a no-op
    q.write_in_file(tmp_path, "old", TractNNEF("0.21.10"))
    assert (tmp_path / "old.dat").read_bytes() == _native.dat_encode(w.numpy(), "q4_0_legacy")
    other = fp_to_tract_q4_0_with_min_max_calibration(w * 2)
    with pytest.raises(T2NErrorNotImplemented, match="already exists"):
        other.write_in_file(tmp_path, "a/w")
