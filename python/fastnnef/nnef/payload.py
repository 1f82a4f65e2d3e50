"""What a graph variable's ``<label>.dat`` holds, and the one way each kind is written.

Every ``NVariable`` carries exactly one payload, chosen once when the variable is declared
(``payload_for``) and written by ``Payload.write`` through the Rust sink:

- ``PlainPayload``: a torch tensor in its dtype's encoding (bf16 widened to f32, exactly),
  or quantized to a packed format by Rust as it is written;
- ``PackedPayload``: already-packed blocks of a packed format (tensor/quant/packed.py, e.g.
  Q4_0's ``QTensorTractScaleOnly``), written as they are (torch ran on exactly these values);
- ``TorchQuantPayload``: a torch-quantized (per-tensor) tensor: its integer codes, plus
  its ``graph.quant`` entry (per-channel tensors are refused when declared: graph.quant
  holds one scale and zero point per tensor).

- ``OffloadedPayload``: a weight still in its checkpoint, streamed from it.

The payload also says how the variable is declared: packed variables have no NNEF generic
(``variable(...)``, not ``variable<scalar>(...)``), and answers what the graph passes and
the builder ask (``written_format``, ``held_packed``, ``unpacked``, ``plain_data``), so
no module outside this one dispatches on payload classes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from fastnnef.artefact import (
    PER_CHANNEL_MESSAGE,
    PLAIN_ENCODINGS,
    TORCH_QUANTIZED,
    Artefact,
    quant_format_line,
    quant_line,
)
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.opaque import export_form
from fastnnef.tensor.quant.packed import PackedFormat, held_by, of_encoding

# torch dtype -> tract datum type of the values a variable holds: the .dat encodings,
# plus bf16, which tract lacks and which is computed in f32 (an exact upcast).
DATUM_TYPES: dict[torch.dtype, str] = {**PLAIN_ENCODINGS, torch.bfloat16: "f32"}

# torch-quantized dtype -> (tract's quantized type, the datum type of its integer codes).
_QUANTIZED_TYPE = re.compile(r"^(QU8|QI8|QI32)\(Z:(-?\d+) S:([0-9.]+)\)$")


def quantized_datum_type(dtype: torch.dtype, scale: float, zero_point: int) -> str:
    """tract's quantized datum type as its parser reads it (``QU8(Z:128 S:0.05)``): the
    NNEF tensor type of a quantized activation, written where an op names its output type
    (``tract_core_cast``'s ``to``, ``tract_core_qconv``'s ``output_dt``)."""
    # tract reads the scale as an f32 in positional notation: the f32's shortest digits.
    digits = np.format_float_positional(np.float32(scale), unique=True, trim="0")
    return f"{TORCH_QUANTIZED[dtype].tract_name}(Z:{int(zero_point)} S:{digits})"


def quantized_type_line(identifier: str, datum_type: str) -> str | None:
    """The ``graph.quant`` entry of a tensor whose datum type is quantized (an activation
    or a graph output computed by an op), ``None`` for any other type."""
    params = quantized_params(datum_type)
    if params is None:
        return None
    name = _QUANTIZED_TYPE.match(datum_type).group(1)  # type: ignore[union-attr]
    qtype = next(q for q in TORCH_QUANTIZED.values() if q.tract_name == name)
    _, zero_point, scale = params
    return quant_format_line(identifier, qtype, scale, zero_point)


def quantized_params(datum_type: str) -> tuple[str, int, float] | None:
    """``(codes datum type, zero point, scale)`` of a quantized datum type, ``None`` for
    any other type."""
    match = _QUANTIZED_TYPE.match(datum_type)
    if match is None:
        return None
    codes = {q.tract_name: q.codes for q in TORCH_QUANTIZED.values()}[match.group(1)]
    return codes, int(match.group(2)), float(match.group(3))


class Payload(Protocol):
    """The bytes behind one variable."""

    @property
    def nbytes(self) -> int:
        """Size of the source data (for progress reports)."""

    @property
    def has_generic(self) -> bool:
        """Declared ``variable<scalar>`` (True) or ``variable`` (packed)."""

    @property
    def written_format(self) -> PackedFormat | None:
        """The packed format its ``.dat`` is written in, ``None`` for plain elements."""

    @property
    def held_packed(self) -> PackedFormat | None:
        """The format of the packed blocks it holds in memory, written as they are."""

    @property
    def rank(self) -> int:
        """The rank of the weight (of its values, for packed ones)."""

    @property
    def plain_data(self) -> torch.Tensor | None:
        """The torch tensor written as plain elements, if it is one."""

    def unpacked(self) -> AnyPayload | None:
        """The same weight written as its dequantized floats, where it is packed in memory
        (``None`` otherwise: plain, or streamed from its checkpoint as it is)."""

    def check(self, label: str) -> None:
        """Refuse, before anything is written, what cannot be written."""

    def quant_entry(self, identifier: str) -> str | None:
        """The ``graph.quant`` line for this variable, if it is torch-quantized."""

    @property
    def writes_in_place(self) -> bool:
        """Written from the bytes where they are (memory or checkpoint), with no copy of
        the tensor made on the way: such writes may run side by side."""

    def write(self, artefact: Artefact, label: str) -> None:
        """Write ``<label>.dat`` into ``artefact``."""


class _PayloadDefaults:
    """What a payload answers unless its class says otherwise: no packed blocks held, no
    plain data, nothing to check, no ``graph.quant`` entry, written in place."""

    @property
    def writes_in_place(self) -> bool:
        return True

    @property
    def held_packed(self) -> PackedFormat | None:
        return None

    @property
    def plain_data(self) -> torch.Tensor | None:
        return None

    def unpacked(self) -> AnyPayload | None:
        return None

    def check(self, label: str) -> None:
        pass

    def quant_entry(self, identifier: str) -> str | None:
        return None


@dataclass(frozen=True)
class PlainPayload(_PayloadDefaults):
    """A tensor written in its dtype's encoding, or as ``encoding`` when given (a packed
    format's encoding, e.g. ``"q4_0"``, quantizes in Rust as the bytes go out)."""

    data: torch.Tensor
    encoding: str | None = None

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    @property
    def written_format(self) -> PackedFormat | None:
        return of_encoding(self.encoding)

    @property
    def has_generic(self) -> bool:
        return self.written_format is None

    @property
    def rank(self) -> int:
        return self.data.dim()

    @property
    def plain_data(self) -> torch.Tensor | None:
        return self.data

    def unpacked(self) -> AnyPayload | None:
        return PlainPayload(self.data) if self.written_format is not None else None

    def write(self, artefact: Artefact, label: str) -> None:
        artefact.add_tensor(label, self.data, encoding=self.encoding)


@dataclass(frozen=True)
class PackedPayload(_PayloadDefaults):
    """Blocks of a packed format, never re-quantized; ``encoding`` is the target's."""

    data: torch.Tensor
    format: PackedFormat
    encoding: str

    @property
    def nbytes(self) -> int:
        return self.format.nbytes(self.data)

    @property
    def written_format(self) -> PackedFormat | None:
        return self.format

    @property
    def held_packed(self) -> PackedFormat | None:
        return self.format

    @property
    def has_generic(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        return self.data.dim()

    def unpacked(self) -> AnyPayload | None:
        return PlainPayload(self.format.dequantize(self.data))

    def write(self, artefact: Artefact, label: str) -> None:
        self.format.write_blocks(artefact, label, self.data, self.encoding)


@dataclass(frozen=True)
class TorchQuantPayload(_PayloadDefaults):
    """A per-tensor torch-quantized tensor: integer codes plus a ``graph.quant`` entry."""

    data: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    @property
    def has_generic(self) -> bool:
        return True

    @property
    def written_format(self) -> PackedFormat | None:
        return None

    @property
    def rank(self) -> int:
        return self.data.dim()

    def quant_entry(self, identifier: str) -> str | None:
        return quant_line(identifier, self.data)

    @property
    def writes_in_place(self) -> bool:
        return False  # its integer codes are a copy (int_repr)

    def write(self, artefact: Artefact, label: str) -> None:
        artefact.add_tensor(label, self.data)


@dataclass(frozen=True)
class OffloadedPayload(_PayloadDefaults):
    """A weight still in its checkpoint (``OffloadedTensor``), written as ``encoding``
    (streamed as it is: never unpacked by the graph passes)."""

    tensor: OffloadedTensor
    encoding: str

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()

    @property
    def written_format(self) -> PackedFormat | None:
        return of_encoding(self.encoding)

    @property
    def has_generic(self) -> bool:
        return self.written_format is None

    @property
    def rank(self) -> int:
        return self.tensor.dim()

    def check(self, label: str) -> None:
        """Refuse, before anything is written, what the checkpoint cannot give as ``encoding``."""
        self.tensor.check(label, self.encoding)

    @property
    def writes_in_place(self) -> bool:
        return self.tensor.streams_as(self.encoding)

    def write(self, artefact: Artefact, label: str) -> None:
        if self.tensor.streams_as(self.encoding):
            artefact.add_offloaded(label, self.tensor, self.encoding)
            return
        # Written from its value (composed, or rounded to bf16 as torch rounds it): this one
        # tensor is materialized, written (quantized on the way when asked), and dropped.
        artefact.add_tensor(label, self.tensor.written_values(), encoding=self.encoding)


AnyPayload = PlainPayload | PackedPayload | TorchQuantPayload | OffloadedPayload


def payload_for(data: torch.Tensor, caps: Any, where: str = "", label: str = "") -> AnyPayload:
    """The payload of a weight for a target (its ``TargetCapabilities``): packed blocks as
    they are where the target reads their format, their dequantized floats elsewhere;
    weights still in a checkpoint streamed from it (quantized on the way when asked for and
    the target reads that format); torch-quantized tensors as codes; everything else plain."""
    data = export_form(data)  # the tensor behind an OpaqueTensorRef; offloaded packed blocks
    if isinstance(data, OffloadedTensor):
        fmt = data.packed_format
        encoding = fmt.encoding_for(caps) if fmt is not None else None
        return OffloadedPayload(data, encoding or DATUM_TYPES[data.dtype])
    fmt = held_by(data)
    if fmt is not None:
        encoding = fmt.encoding_for(caps)
        return PackedPayload(data, fmt, encoding) if encoding is not None else PlainPayload(fmt.dequantize(data))
    if data.dtype in TORCH_QUANTIZED:
        if data.qscheme() != torch.per_tensor_affine:  # refused here, before anything is written
            message = PER_CHANNEL_MESSAGE.format(name=label or "a weight", qscheme=data.qscheme())
            raise T2NErrorNotImplemented(f"{where}: {message}" if where else message)
        return TorchQuantPayload(data)
    if data.dtype not in DATUM_TYPES and not data.is_complex():
        raise T2NErrorNotImplemented(
            f"dtype {data.dtype} has no tract equivalent{(' (' + where + ')') if where else ''}: "
            "cast the model or this value to a supported dtype (float16/32/64, ints, bool)"
        )
    return PlainPayload(data)


def datum_type(payload: AnyPayload, logical: torch.dtype) -> str:
    """The tract datum type a variable is declared with: its logical dtype (Q4_0 keeps the
    dtype the model computes in: tract dequantizes to it)."""
    if isinstance(payload, TorchQuantPayload):
        return TORCH_QUANTIZED[payload.data.dtype].codes
    dtype = logical
    if isinstance(payload, PlainPayload) and payload.data.is_complex():
        dtype = torch.float32 if payload.data.dtype == torch.complex64 else torch.float64
    return DATUM_TYPES[dtype]
