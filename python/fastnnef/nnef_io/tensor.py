"""The 128-byte header of NNEF ``.dat`` tensor files (nnef-format.md §1.1), as
torch_to_nnef's ``nnef_io.tensor.DatBinHeader``: build one, serialize it, read one from a
file, and name the dtype it declares (a torch dtype, or a tract vendor block format).

``item_type`` is kept as the reference keeps it: the hex of the field's two bytes in file
order (Q4_0 is ``"4030"``, the little-endian u16 0x3040); ``item_type_vendor`` as those
two bytes (tract's are ``b"RT"``, the u16 0x5452)."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import BinaryIO

import torch

from fastnnef.exceptions import T2NErrorMisuse

HEADER_SIZE = 128
_MAGIC = "4eef"
_VENDOR_BLOCK_BITS = 0xFFFFFFFF  # bits_per_item of vendor layouts: no generic length check
# Standard (vendor 0) item-type codes -> torch dtype by bits (nnef-format.md §1.3; the
# quantized codes 2 and 3 hold plain integer codes, their quantization is in graph.quant).
_STANDARD_DTYPES: dict[int, dict[int, torch.dtype]] = {
    0: {16: torch.float16, 32: torch.float32, 64: torch.float64},
    1: {8: torch.uint8, 16: torch.uint16, 32: torch.uint32, 64: torch.uint64},
    2: {8: torch.uint8, 16: torch.uint16, 32: torch.uint32, 64: torch.uint64},
    3: {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64},
    4: {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64},
    5: {1: torch.bool, 8: torch.bool},
}


class DatBinHeader:
    """One ``.dat`` header. ``MAX_TENSOR_RANK`` dims at most; ``item_type_params_deprecated``
    (32 bytes) and ``padding`` (11 u32) are the reserved area, zeros unless read so."""

    MAX_TENSOR_RANK = 8
    TRACT_ITEM_TYPE_VENDOR = struct.pack("<H", 0x5452)  # b"RT"

    class TractCustomTypes(str, Enum):
        """tract's vendor block formats (item_type as the hex of its two bytes)."""

        Q40 = "4030"
        Q40_LEGACY = "4020"

    def __init__(
        self,
        data_size_bytes: int,
        rank: int,
        dims: list[int],
        item_type: str,
        item_type_vendor: bytes,
        version_maj: int = 1,
        version_min: int = 0,
        item_type_params_deprecated: list[int] | None = None,
        padding: list[int] | None = None,
        bits_per_item: int = 32,
        magic: str = _MAGIC,
    ):
        if not (isinstance(magic, str) and len(magic) == 4):
            raise T2NErrorMisuse(f"magic must be 4 hex digits, got {magic!r}")
        if not (isinstance(item_type, str) and len(item_type) == 4):
            raise T2NErrorMisuse(f"item_type must be 4 hex digits (2 bytes), got {item_type!r}")
        if not (isinstance(item_type_vendor, bytes) and len(item_type_vendor) == 2):
            raise T2NErrorMisuse(f"item_type_vendor must be 2 bytes, got {item_type_vendor!r}")
        if not (0 <= rank <= self.MAX_TENSOR_RANK and len(dims) == rank):
            raise T2NErrorMisuse(f"rank {rank} with dims {dims}: rank must be 0..8 and give the number of dims")
        if item_type_params_deprecated is not None and len(item_type_params_deprecated) != 32:
            raise T2NErrorMisuse("item_type_params_deprecated must be a list of 32 ints")
        if padding is not None and len(padding) != 11:
            raise T2NErrorMisuse("padding must be a list of 11 ints")
        self.magic = magic
        self.version_maj = int(version_maj)
        self.version_min = int(version_min)
        self.data_size_bytes = int(data_size_bytes)
        self.rank = int(rank)
        self.dims = [int(d) for d in dims]
        self.bits_per_item = int(bits_per_item)
        self.item_type = item_type
        self.item_type_vendor = item_type_vendor
        self.item_type_params_deprecated = item_type_params_deprecated
        self.padding = padding

    @classmethod
    def build_tract_qtensor(cls, item_type: DatBinHeader.TractCustomTypes, shape: Sequence[int]) -> DatBinHeader:
        """The header of a tract Q4_0 tensor of ``shape`` (18 bytes per 32 values)."""
        count = 1
        for d in shape:
            count *= int(d)
        return cls(
            data_size_bytes=count // 32 * 18, rank=len(shape), dims=list(shape),
            item_type=cls.TractCustomTypes(item_type).value, item_type_vendor=cls.TRACT_ITEM_TYPE_VENDOR,
            bits_per_item=_VENDOR_BLOCK_BITS,
        )

    def to_bytes(self) -> bytes:
        """The 128 header bytes (little-endian fields)."""
        head = bytes.fromhex(self.magic) + struct.pack("<BBII", self.version_maj, self.version_min,
                                                       self.data_size_bytes, self.rank)
        head += struct.pack("<8I", *(self.dims + [0] * (self.MAX_TENSOR_RANK - self.rank)))
        head += struct.pack("<I", self.bits_per_item) + bytes.fromhex(self.item_type) + self.item_type_vendor
        head += bytes(self.item_type_params_deprecated or [0] * 32)
        head += struct.pack("<11I", *(self.padding or [0] * 11))
        assert len(head) == HEADER_SIZE
        return head

    @property
    def torch_dtype_or_custom(self) -> torch.dtype | DatBinHeader.TractCustomTypes:
        """The torch dtype of a standard item type, or the tract block format."""
        if self.item_type_vendor == self.TRACT_ITEM_TYPE_VENDOR:
            return self.TractCustomTypes(self.item_type)
        code = struct.unpack("<H", bytes.fromhex(self.item_type))[0]
        try:
            return _STANDARD_DTYPES[code][self.bits_per_item]
        except KeyError:
            raise T2NErrorMisuse(f"item type {code} at {self.bits_per_item} bits has no torch dtype") from None

    @classmethod
    def from_dat_file(cls, file: BinaryIO) -> DatBinHeader:
        """Read the header from an open binary file (its size is checked when it is a
        seekable file on disk)."""
        if isinstance(file, (str, os.PathLike)):
            raise T2NErrorMisuse("from_dat_file takes an open binary file; use from_dat for a path")
        head = file.read(HEADER_SIZE)
        if len(head) != HEADER_SIZE or head[:2] != bytes.fromhex(_MAGIC):
            raise T2NErrorMisuse("not an NNEF tensor file (no 4E EF magic or shorter than its 128-byte header)")
        major, minor, data_length, rank = struct.unpack_from("<BBII", head, 2)
        if rank > cls.MAX_TENSOR_RANK:
            raise T2NErrorMisuse(f"tensor rank {rank} exceeds the maximum, {cls.MAX_TENSOR_RANK}")
        try:
            size: int | None = os.fstat(file.fileno()).st_size if file.seekable() else None
        except (AttributeError, OSError):  # an in-memory or archive member stream
            size = None
        if size is not None and size != HEADER_SIZE + data_length:
            raise T2NErrorMisuse(f"invalid tensor file: {size} bytes where the header says {HEADER_SIZE + data_length}")
        dims = list(struct.unpack_from("<8I", head, 12))[:rank]
        (bits,) = struct.unpack_from("<I", head, 0x2C)
        return cls(
            data_size_bytes=data_length, rank=rank, dims=dims, item_type=head[0x30:0x32].hex(),
            item_type_vendor=head[0x32:0x34], version_maj=major, version_min=minor,
            item_type_params_deprecated=list(head[0x34:0x54]), padding=list(struct.unpack_from("<11I", head, 0x54)),
            bits_per_item=bits, magic=head[:2].hex(),
        )

    @classmethod
    def from_dat(cls, filepath: str | os.PathLike) -> DatBinHeader:
        with Path(filepath).open("rb") as fh:
            return cls.from_dat_file(fh)
