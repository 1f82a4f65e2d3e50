"""Packed weight formats: weights stored as blocks of codes and scales, not as elements.

A ``PackedFormat`` answers everything the export asks about one format, so that no other
module recognizes a format by its encoding's name or by a tensor class:

- which torch tensors are its packed blocks already (``holds``), their size and values;
- which ``.dat`` encoding a target reads it as (``encoding_for``: none where the target
  cannot hold it, and the weights are then written as their dequantized floats), and which
  encodings are its own (``of_encoding``);
- which readers tract runs it with (``unsupported_readers``, the rank rule that the
  ``unpack_packed`` graph pass applies);
- how its blocks are written (``write_blocks``: the Rust sink's codec; float tensors and
  checkpoint tensors are quantized to it by Rust as they stream, given the encoding).

Adding a format is one subclass here, listed in ``PACKED_FORMATS``, plus its codec in
Rust (an ``Encoding`` in rust/dat.rs, the quantizer in rust/quant.rs, exposed in
rust/python/codec.rs).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar

import torch

from fastnnef.tensor.quant.qtract import QTensorTractScaleOnly


class PackedFormat(ABC):
    """One packed weight format."""

    #: Its name in messages (``"Q4_0"``).
    name: ClassVar[str]
    #: The ``.dat`` encodings of rust/dat.rs that write it (pinned to the extension by
    #: tests/test_native_tables.py).
    encodings: ClassVar[tuple[str, ...]]

    @abstractmethod
    def encoding_for(self, caps: Any) -> str | None:
        """The encoding a target (its ``TargetCapabilities``) reads this format as, or
        ``None`` where it has none."""

    @abstractmethod
    def holds(self, data: torch.Tensor) -> bool:
        """Whether ``data`` is this format's packed blocks (written as they are)."""

    @abstractmethod
    def nbytes(self, data: torch.Tensor) -> int:
        """The packed bytes of ``data`` (which this format ``holds``)."""

    @abstractmethod
    def dequantize(self, data: torch.Tensor) -> torch.Tensor:
        """The values of packed ``data``, in the dtype the model computes in."""

    @abstractmethod
    def write_blocks(self, artefact: Any, label: str, data: torch.Tensor, encoding: str) -> None:
        """Write packed ``data`` as ``<label>.dat`` into an ``artefact.Artefact``."""

    @abstractmethod
    def unsupported_readers(self, rank: int, readers: AbstractSet[str]) -> frozenset[str]:
        """Of the NNEF ops that read a weight of this format and ``rank``, those that tract
        cannot run on its blocks (empty: the weight stays packed)."""

    def __repr__(self) -> str:
        return self.name


class Q4_0Format(PackedFormat):
    """tract's Q4_0: blocks of 32 values, an f16 scale and 4-bit codes (18 bytes)."""

    name = "Q4_0"
    encodings = ("q4_0", "q4_0_legacy")
    # The ops tract runs on Q4_0 blocks of rank > 2: convolution filters.
    _HIGH_RANK_READERS = frozenset({"conv", "deconv"})

    def encoding_for(self, caps: Any) -> str | None:
        """GGML's nibble order from tract 0.21.11 on, the legacy order before; none for a
        target that is not tract."""
        if caps.tract_version is None:
            return None
        return "q4_0" if caps.supports("q4_0_ggml_order") else "q4_0_legacy"

    def holds(self, data: torch.Tensor) -> bool:
        return isinstance(data, QTensorTractScaleOnly)

    def nbytes(self, data: torch.Tensor) -> int:
        assert isinstance(data, QTensorTractScaleOnly)
        return data.blocks.numel()

    def dequantize(self, data: torch.Tensor) -> torch.Tensor:
        assert isinstance(data, QTensorTractScaleOnly)
        return data.decompress()

    def write_blocks(self, artefact: Any, label: str, data: torch.Tensor, encoding: str) -> None:
        artefact.add_q4_0_blocks(label, data, encoding)

    def unsupported_readers(self, rank: int, readers: AbstractSet[str]) -> frozenset[str]:
        return frozenset() if rank <= 2 else frozenset(readers) - self._HIGH_RANK_READERS


Q4_0 = Q4_0Format()

PACKED_FORMATS: tuple[PackedFormat, ...] = (Q4_0,)


def of_encoding(encoding: str | None) -> PackedFormat | None:
    """The packed format a ``.dat`` encoding writes, ``None`` for plain encodings."""
    return next((f for f in PACKED_FORMATS if encoding in f.encodings), None)


def held_by(data: torch.Tensor) -> PackedFormat | None:
    """The packed format whose blocks ``data`` is, ``None`` for any other tensor."""
    return next((f for f in PACKED_FORMATS if f.holds(data)), None)
