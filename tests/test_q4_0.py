"""Q4_0 against a numpy re-implementation of the reference recipe (nnef-format.md §2.1)
and the worked block of the format reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastnnef import _native
from fastnnef.exceptions import T2NErrorImpossibleQuantization, T2NErrorInvalidArgument

WORKED_GGML = bytes.fromhex("0038f0e1d2c3b4a5968778695a4b3c2d1e0f")
WORKED_LEGACY = bytes.fromhex("00381032547698badcfeefcdab8967452301")
WORKED_CODES = np.array(list(range(16)) + [15 - j for j in range(16)])


def reference_q4_0(x: np.ndarray, percentile: float = 1.0) -> bytes:
    """The reference recipe, step by step, in numpy (f32 math for f32, f16 math for f16)."""
    f16_math = x.dtype == np.float16
    groups = x.reshape(-1, 32)
    if percentile == 1.0:
        amax = np.abs(groups).max(axis=1)
    else:
        # torch.quantile (linear) in f32, with torch's two-sided lerp.
        s = np.sort(np.abs(groups).astype(np.float32), axis=1)
        rank = np.float32(percentile) * np.float32(31)
        lo_i, hi_i = int(np.floor(rank)), int(np.ceil(rank))
        w = rank - np.float32(lo_i)
        lo, hi = s[:, lo_i], s[:, hi_i]
        amax = lo + w * (hi - lo) if w < 0.5 else hi - (hi - lo) * (np.float32(1) - w)
    scale = (amax / amax.dtype.type(-8)).astype(np.float16)
    with np.errstate(divide="ignore"):
        recip = np.where(scale == 0, scale, np.float16(1) / scale)
    if f16_math:
        shifted = groups * recip[:, None] + np.float16(8.5)
    else:
        shifted = groups.astype(np.float32) * recip.astype(np.float32)[:, None] + np.float32(8.5)
    q = np.clip(np.floor(shifted), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([scale.astype("<f2").view(np.uint8).reshape(-1, 2), packed], axis=1)
    return out.tobytes()


def test_worked_block_dequantizes_in_both_orders():
    expected = (WORKED_CODES - 8) * 0.5
    got = _native.q4_0_dequantize(np.frombuffer(WORKED_GGML, np.uint8), [1, 32])
    np.testing.assert_array_equal(got, expected.reshape(1, 32))
    # The same block as a legacy-order .dat file (header per §1.6 (e) with code 0x2040).
    head = bytes.fromhex("4eef0100" "12000000" "02000000" "01000000" "20000000") + bytes(24)
    head += bytes.fromhex("ffffffff" "4020" "5254") + bytes(76)
    legacy = _native.dat_decode(head + WORKED_LEGACY)
    assert legacy.encoding == "q4_0_legacy"
    np.testing.assert_array_equal(legacy.array(), expected.reshape(1, 32))


def test_quantizer_produces_the_worked_block_codes():
    # amax 4 -> scale -0.5: x = (q - 8) * -0.5 quantizes back to q for q in 1..15
    # (q = 0 would need x = 4 = amax, so use q = 0 at x = 4: floor(-8 + 8.5) = 0).
    x = ((WORKED_CODES - 8) * -0.5).astype(np.float32)
    blocks = _native.q4_0_quantize(x)
    assert blocks[:2].tobytes() == b"\x00\xb8"  # f16 -0.5
    assert blocks[2:].tobytes() == WORKED_GGML[2:]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("percentile", [1.0, 0.9, 0.5])
def test_matches_reference_recipe(dtype, percentile):
    rng = np.random.default_rng(42)
    x = (rng.standard_normal((16, 96)) * rng.uniform(0.01, 30, size=(16, 1))).astype(dtype)
    x[3, :32] = 0.0  # a zero block: scale -0.0, codes 8
    x[5, 32] = -50.0  # negative max magnitude
    x[7, :32] = np.linspace(-1, 1, 32)  # exact ties
    got = _native.q4_0_quantize(x, percentile=percentile).tobytes()
    assert got == reference_q4_0(x, percentile)
    assert got[3 * 3 * 18 : 3 * 3 * 18 + 18] == b"\x00\x80" + b"\x88" * 16


def test_bf16_input_quantizes_like_its_exact_f32():
    t = torch.randn(8, 64, dtype=torch.bfloat16)
    got = _native.q4_0_quantize(t.view(torch.int16).numpy(), bf16=True).tobytes()
    assert got == reference_q4_0(t.float().numpy())


def test_non_contiguous_input_is_read_in_c_order():
    base = np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32)
    view = base.T  # shape (32, 64), strided
    assert _native.q4_0_quantize(view).tobytes() == reference_q4_0(np.ascontiguousarray(view))
    data = _native.dat_encode(view, "q4_0")
    assert data[128:] == reference_q4_0(np.ascontiguousarray(view))


def test_dequantize_inverts_within_half_a_step():
    x = np.random.default_rng(5).standard_normal((4, 128)).astype(np.float32)
    blocks = _native.q4_0_quantize(x)
    back = _native.q4_0_dequantize(blocks, [4, 128])
    scales = np.abs(blocks.reshape(-1, 18)[:, :2].copy().view("<f2").astype(np.float32)).repeat(32)
    # Rounding costs at most half a step, except at the clamped end (code 15) where the
    # block's extreme value of the other sign loses up to one step.
    err = np.abs(back.reshape(-1) - x.reshape(-1))
    assert np.all(err <= scales * 1.01)  # f16 rounding of the scale adds a little
    assert np.mean(err <= scales / 2 * 1.001) > 0.95
    decoded = _native.dat_decode(_native.dat_encode(x, "q4_0")).array()
    np.testing.assert_array_equal(decoded, back)


def test_rejections():
    with pytest.raises(T2NErrorImpossibleQuantization, match="multiple of 32"):
        _native.q4_0_quantize(np.zeros(33, np.float32))
    with pytest.raises(T2NErrorImpossibleQuantization, match="rank 2 to 4"):
        _native.dat_encode(np.zeros(64, np.float32), "q4_0")
    with pytest.raises(T2NErrorImpossibleQuantization, match="NaN or infinite"):
        _native.q4_0_quantize(np.full(32, np.nan, np.float32))
    with pytest.raises(T2NErrorImpossibleQuantization, match="overflows f16"):
        _native.q4_0_quantize(np.full(32, 1e6, np.float32))
    with pytest.raises(T2NErrorInvalidArgument, match="percentile"):
        _native.q4_0_quantize(np.zeros(32, np.float32), percentile=0.0)
    with pytest.raises(T2NErrorInvalidArgument, match="float32, float16 or bfloat16"):
        _native.q4_0_quantize(np.zeros(32, np.float64))
