"""The .dat codec against the format reference (nnef-format.md §1–§3).

Expected header bytes are built here from the reference's field table and worked dumps,
never from our encoder's output.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastnnef import _native
from fastnnef.artefact import torch_tensor_to_native
from fastnnef.exceptions import (
    T2NErrorDatFormat,
    T2NErrorDtypeOverflow,
    T2NErrorInvalidArgument,
    T2NErrorTensorTooLarge,
)


def header(data_length: int, shape: list[int], bits: int, code: int, vendor: int = 0) -> bytes:
    """A header from the §1.1 table: magic, v1.0, u32 length, rank, 8 dims, bits, u16 code,
    u16 vendor, 76 reserved zero bytes."""
    dims = list(shape) + [0] * (8 - len(shape))
    h = b"\x4e\xef\x01\x00" + struct.pack("<II8I", data_length, len(shape), *dims)
    h += struct.pack("<IHH", bits, code, vendor) + bytes(76)
    assert len(h) == 128
    return h


def hexbytes(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


# (encoding, numpy dtype, code, bits) from the §1.3 / §3 tables.
STANDARD = [
    ("f16", np.float16, 0, 16),
    ("f32", np.float32, 0, 32),
    ("f64", np.float64, 0, 64),
    ("i8", np.int8, 4, 8),
    ("i16", np.int16, 4, 16),
    ("i32", np.int32, 4, 32),
    ("i64", np.int64, 4, 64),
    ("u8", np.uint8, 1, 8),
    ("u16", np.uint16, 1, 16),
    ("u32", np.uint32, 1, 32),
    ("u64", np.uint64, 1, 64),
    ("qu8", np.uint8, 2, 8),
    ("qi8", np.int8, 3, 8),
    ("qi32", np.int32, 3, 32),
]


@pytest.mark.parametrize(("encoding", "dtype", "code", "bits"), STANDARD)
def test_header_and_payload_bytes_per_dtype(encoding, dtype, code, bits):
    x = (np.arange(12).reshape(3, 4) - 5).astype(dtype)
    data = _native.dat_encode(x, encoding)
    assert data[:128] == header(12 * bits // 8, [3, 4], bits, code)
    assert data[128:] == x.astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    decoded = _native.dat_decode(data)
    assert (decoded.item_type, decoded.vendor, decoded.bits, decoded.shape) == (code, 0, bits, [3, 4])
    assert decoded.encoding == encoding
    np.testing.assert_array_equal(decoded.array(), x)
    assert decoded.array().dtype == np.dtype(dtype)


def test_worked_dump_a_f32_2x3():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    data = _native.dat_encode(x, "f32")
    assert data[:0x10] == hexbytes("4e ef 01 00 18 00 00 00 02 00 00 00 02 00 00 00")
    assert data[0x10:0x2C] == hexbytes("03 00 00 00") + bytes(24)
    assert data[0x2C:0x34] == hexbytes("20 00 00 00 00 00 00 00")
    assert data[0x34:0x80] == bytes(76)
    assert len(data) == 152


def test_worked_dump_b_f64_scalar():
    data = _native.dat_encode(np.array(2.5, dtype=np.float64), "f64")
    assert data[:12] == hexbytes("4e ef 01 00 08 00 00 00 00 00 00 00")
    assert data[12:44] == bytes(32)
    assert data[0x2C:0x34] == hexbytes("40 00 00 00 00 00 00 00")
    assert data[128:] == hexbytes("00 00 00 00 00 00 04 40")


def test_worked_dump_c_bool_packed_msb_first():
    data = _native.dat_encode(np.array([True, False, True]), "bool")
    assert data[:16] == hexbytes("4e ef 01 00 01 00 00 00 01 00 00 00 03 00 00 00")
    assert data[0x2C:0x34] == hexbytes("01 00 00 00 05 00 00 00")
    assert data[128:] == b"\xa0"


def test_worked_dump_d_i64():
    data = _native.dat_encode(np.array([1, 2, 3, 4], dtype=np.int64), "i64")
    assert data[:16] == hexbytes("4e ef 01 00 20 00 00 00 01 00 00 00 04 00 00 00")
    assert data[0x2C:0x34] == hexbytes("40 00 00 00 04 00 00 00")
    assert len(data) == 128 + 32


def test_worked_dump_e_q4_0_header():
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    data = _native.dat_encode(x, "q4_0")
    assert data[:0x14] == hexbytes("4e ef 01 00 80 04 00 00 02 00 00 00 20 00 00 00 40 00 00 00")
    assert data[0x2C:0x34] == hexbytes("ff ff ff ff 40 30 52 54")
    assert data[0x34:0x80] == bytes(76)
    assert len(data) == 128 + 0x480
    legacy = _native.dat_encode(x, "q4_0_legacy")
    assert legacy[0x30:0x34] == hexbytes("40 20 52 54")


def test_bool_packing_matches_numpy_packbits():
    x = np.random.default_rng(1).random((5, 7)) > 0.5
    data = _native.dat_encode(x, "bool")
    assert data[:128] == header(5, [5, 7], 1, 5)
    assert data[128:] == np.packbits(x.reshape(-1)).tobytes()
    np.testing.assert_array_equal(_native.dat_decode(data).array(), x)


def test_eight_bit_bools_decode_like_tract_writes_them():
    data = header(3, [3], 8, 5) + b"\x01\x00\x01"
    decoded = _native.dat_decode(data)
    assert decoded.bits == 8
    np.testing.assert_array_equal(decoded.array(), [True, False, True])


def test_bf16_goes_to_f32_exactly_and_to_f16_on_request():
    t = torch.tensor([[1.5, -2.0e38], [3.0e-39, 7.0]], dtype=torch.bfloat16)
    array, encoding, bf16 = torch_tensor_to_native(t)
    assert (encoding, bf16) == ("f32", True)
    data = _native.dat_encode(array, encoding, bf16=bf16)
    assert data[:128] == header(16, [2, 2], 32, 0)
    np.testing.assert_array_equal(_native.dat_decode(data).array(), t.float().numpy())
    with pytest.raises(T2NErrorDtypeOverflow, match="does not fit f16"):
        _native.dat_encode(array, "f16", bf16=True)
    small = torch.tensor([1.5, -65280.0, 0.1], dtype=torch.bfloat16)
    arr, _, _ = torch_tensor_to_native(small, bf16_as="f16")
    out = _native.dat_decode(_native.dat_encode(arr, "f16", bf16=True)).array()
    np.testing.assert_array_equal(out, small.float().numpy().astype(np.float16))


def test_errors_name_the_problem():
    with pytest.raises(T2NErrorInvalidArgument, match="unknown encoding 'f8'"):
        _native.dat_encode(np.zeros(2, np.float32), "f8")
    with pytest.raises(T2NErrorInvalidArgument, match="'f32' cannot take a int32 array"):
        _native.dat_encode(np.zeros(2, np.int32), "f32")
    with pytest.raises(T2NErrorTensorTooLarge, match="rank 9"):
        _native.dat_encode(np.zeros([1] * 9, np.float32), "f32")
    with pytest.raises(T2NErrorInvalidArgument, match="empty bool"):
        _native.dat_encode(np.zeros((0, 3), bool), "bool")
    with pytest.raises(T2NErrorTensorTooLarge, match="'huge'.*Q4_0"):
        _native.dat_payload_size("huge", [2**30, 4], "f32")
    assert _native.dat_payload_size("ok", [2**32 - 1], "u8") == _native.DAT_MAX_PAYLOAD
    with pytest.raises(T2NErrorInvalidArgument, match="byte order"):
        _native.dat_encode(np.zeros(2, ">f4"), "f32")


def test_empty_non_bool_tensor_is_valid():
    data = _native.dat_encode(np.zeros((0, 4), np.float32), "f32")
    assert data == header(0, [0, 4], 32, 0)
    assert _native.dat_decode(data).array().shape == (0, 4)


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [(0, 0, "magic"), (2, 2, "version"), (4, 9, "data_length"), (0x40, 1, "reserved"), (0x30, 7, "item type")],
)
def test_decoder_rejects_malformed_headers(offset, value, message):
    data = bytearray(_native.dat_encode(np.zeros(4, np.float32), "f32"))
    data[offset] = value
    with pytest.raises(T2NErrorDatFormat, match=message):
        _native.dat_decode(bytes(data))


NUMPY_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
ENCODING_OF = {np.dtype(d): e for e, d, _, _ in STANDARD[:11]} | {np.dtype(np.bool_): "bool"}


@st.composite
def strided_arrays(draw):
    """A numpy view with random shape, dtype and strides: permuted, stepped and flipped."""
    dtype = np.dtype(draw(st.sampled_from(NUMPY_DTYPES)))
    shape = draw(st.lists(st.integers(1, 5), min_size=0, max_size=4))
    steps = [draw(st.integers(1, 3)) for _ in shape]
    base_shape = [d * s for d, s in zip(shape, steps)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    low, high = {"b": (0, 2), "u": (0, 200)}.get(dtype.kind, (-100, 100))
    base = rng.integers(low, high, size=base_shape).astype(dtype)
    view = np.asarray(base[tuple(slice(None, None, s) for s in steps)])  # 0-d indexing gives a scalar
    for axis in range(view.ndim):
        if draw(st.booleans()):
            view = np.flip(view, axis)
    view = np.transpose(view, draw(st.permutations(range(view.ndim))))
    return view


@settings(max_examples=150, deadline=None)
@given(strided_arrays())
def test_property_encode_decode_round_trip_on_strided_views(view):
    encoding = ENCODING_OF[view.dtype]
    data = _native.dat_encode(view, encoding)
    contiguous = np.ascontiguousarray(view)
    if encoding == "bool":
        expected_payload = np.packbits(contiguous.reshape(-1)).tobytes()
    else:
        expected_payload = contiguous.tobytes()
    assert data[128:] == expected_payload
    decoded = _native.dat_decode(data)
    assert decoded.shape == list(view.shape)
    np.testing.assert_array_equal(decoded.array(), contiguous)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool]),
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.booleans(),
)
def test_property_torch_views_reach_rust_without_contiguous(dtype, shape, transpose):
    t = (torch.randn(*shape) * 10).to(dtype)
    if transpose and t.ndim > 1:
        t = t.transpose(0, -1)
    array, encoding, bf16 = torch_tensor_to_native(t)
    decoded = _native.dat_decode(_native.dat_encode(array, encoding, bf16=bf16)).array()
    expected = t.float() if dtype == torch.bfloat16 else t
    np.testing.assert_array_equal(decoded, expected.contiguous().numpy())
