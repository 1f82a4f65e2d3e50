"""Torch side of the artefact sink: dtype policy, ``graph.quant`` lines, and a context
manager around ``_native.ArtefactWriter`` that never leaves a partial artefact behind.

Tensors reach Rust as numpy *views* of their storage (``t.detach().numpy()``), never as
Python bytes; bfloat16, which numpy lacks, travels as its 16-bit pattern with
``bf16=True`` and is widened in Rust.

Example::

    with Artefact("model.nnef.tgz", "tgz", compression_level=1) as art:
        art.add_file("graph.nnef", graph_text)
        art.add_tensor("linear.weight", model.linear.weight)
    print(art.path)   # the final path, renamed into place atomically
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import NamedTuple

import numpy as np
import torch

from fastnnef import _native
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.nnef.literals import format_string
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.quant import QTensorTractScaleOnly

# torch dtype -> .dat encoding for tensors whose numpy view has the same element type.
PLAIN_ENCODINGS = {
    torch.float16: "f16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "bool",
}
for _name, _enc in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64")):
    # These dtypes exist from torch 2.3 on.
    if hasattr(torch, _name):
        PLAIN_ENCODINGS[getattr(torch, _name)] = _enc

# torch-quantized dtype -> (encoding of the int_repr() codes, graph.quant bits, signed).
class QuantizedDtype(NamedTuple):
    """How a torch-quantized dtype is written and typed."""

    encoding: str  # .dat encoding of its int_repr() codes
    bits: int  # graph.quant bits
    signed: bool
    tract_name: str  # tract's quantized datum type name (``QU8(Z:.. S:..)``)
    codes: str  # datum type of the integer codes


# torch-quantized dtype -> its encoding and types: the one table of them.
TORCH_QUANTIZED: dict[torch.dtype, QuantizedDtype] = {
    torch.quint8: QuantizedDtype("qu8", 8, False, "QU8", "u8"),
    torch.qint8: QuantizedDtype("qi8", 8, True, "QI8", "i8"),
    torch.qint32: QuantizedDtype("qi32", 32, True, "QI32", "i32"),
}

_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_affine_float_qparams)

PER_CHANNEL_MESSAGE = (
    "tensor {name!r} is quantized per channel ({qscheme}); tract's graph.quant accepts only a "
    "scalar scale and zero_point and has no per-channel quantized type, so it cannot be exported. "
    "Dequantize it (tensor.dequantize()) to export it as float, or requantize it per tensor "
    "(torch.quantize_per_tensor) to keep it quantized."
)


def torch_tensor_to_native(
    tensor: torch.Tensor, bf16_as: str = "f32", name: str = "tensor"
) -> tuple[np.ndarray, str, bool]:
    """Map a CPU tensor to ``(numpy view, encoding, bf16)`` for ``_native``.

    - bfloat16 goes as its int16 bit pattern, encoded as ``bf16_as`` (``"f32"``: exact,
      the default; ``"f16"``: checked in Rust for overflow);
    - torch-quantized tensors go as their integer codes (``int_repr()``); their
      ``graph.quant`` line comes from :func:`quant_line`;
    - complex tensors go as real tensors with a trailing dimension of 2 (re, im).
    """
    if not isinstance(tensor, torch.Tensor):
        raise T2NErrorInvalidArgument(f"{name!r} is a {type(tensor).__name__}, expected a torch.Tensor")
    if tensor.device.type != "cpu":
        raise T2NErrorInvalidArgument(
            f"tensor {name!r} is on {tensor.device}; move it to the CPU first (tensor.cpu())"
        )
    if bf16_as not in ("f32", "f16"):
        raise T2NErrorInvalidArgument(f"bf16_as must be 'f32' or 'f16', got {bf16_as!r}")
    tensor = tensor.detach()
    dtype = tensor.dtype
    if dtype in TORCH_QUANTIZED:
        # int_repr() copies: quantized storage has no numpy view.
        return tensor.int_repr().numpy(), TORCH_QUANTIZED[dtype].encoding, False
    if dtype == torch.bfloat16:
        # Same element size, so .view(dtype) keeps the strides: still no copy.
        return tensor.view(torch.int16).numpy(), bf16_as, True
    if dtype.is_complex:
        return _view_numpy(torch.view_as_real(tensor.resolve_conj())), (
            "f32" if dtype == torch.complex64 else "f64"
        ), False
    encoding = PLAIN_ENCODINGS.get(dtype)
    if encoding is None:
        raise T2NErrorNotImplemented(
            f"tensor {name!r} has dtype {dtype}, which tract cannot load; convert it first "
            "(e.g. tensor.float() for float8 types)"
        )
    return _view_numpy(tensor), encoding, False


def _view_numpy(tensor: torch.Tensor) -> np.ndarray:
    # Conjugate/negative bits are lazy flags numpy cannot express; resolving them is a
    # no-op when unset.
    return tensor.resolve_conj().resolve_neg().numpy()


def quant_line(identifier: str, tensor: torch.Tensor) -> str:
    """The ``graph.quant`` entry of a per-tensor quantized tensor, in the reference's
    argument order (scale, zero_point, bits, signed, symmetric) with Python ``str()``
    numbers. Per-channel tensors raise ``T2NErrorNotImplemented`` (nnef-format.md §4)."""
    if tensor.dtype not in TORCH_QUANTIZED:
        raise T2NErrorInvalidArgument(f"tensor {identifier!r} has dtype {tensor.dtype}, not a torch-quantized dtype")
    qscheme = tensor.qscheme()
    if qscheme in _PER_CHANNEL:
        raise T2NErrorNotImplemented(PER_CHANNEL_MESSAGE.format(name=identifier, qscheme=qscheme))
    return quant_format_line(identifier, TORCH_QUANTIZED[tensor.dtype], float(tensor.q_scale()),
                             int(tensor.q_zero_point()))


def quant_format_line(identifier: str, qtype: QuantizedDtype, scale: float, zero_point: int) -> str:
    """One ``graph.quant`` entry: the tensor named ``identifier`` holds ``qtype`` codes of
    ``scale`` and ``zero_point``."""
    name = format_string(identifier, quote='"')
    return (
        f"{name}: zero_point_linear_quantize(scale = {scale}, zero_point = {zero_point}, "
        f"bits = {qtype.bits}, signed = {str(qtype.signed).lower()}, symmetric = {str(zero_point == 0).lower()});\n"
    )


class Artefact:
    """Context manager writing one artefact (``"dir"``, ``"tar"`` or ``"tgz"``); with
    ``past_cache``, its large files past the page cache where the filesystem allows it
    (for an artefact nothing reads right after: ``ArtefactWriter``).

    On normal exit the artefact is finished and renamed into place (``.path`` holds the
    final path); on ANY exception, ``KeyboardInterrupt`` included, it is aborted: the
    temporary is removed and an existing target is left untouched.
    """

    def __init__(self, path: str | os.PathLike, format: str, compression_level: int = 0,
                 past_cache: bool = False) -> None:
        self._writer: _native.ArtefactWriter | None = _native.ArtefactWriter(
            os.fspath(path), format, compression_level, past_cache
        )
        self.path: str | None = None

    def __enter__(self) -> Artefact:
        return self

    def add_file(self, name: str, data: str | bytes) -> None:
        """Add ``graph.nnef`` / ``graph.quant`` (text is written as UTF-8)."""
        self._live().add_file(name, data.encode("utf-8") if isinstance(data, str) else data)

    def add_tensor(
        self,
        label: str,
        tensor: torch.Tensor | np.ndarray,
        encoding: str | None = None,
        bf16_as: str = "f32",
        percentile: float = 1.0,
    ) -> int:
        """Add ``<label>.dat``; ``encoding`` overrides the dtype's default (e.g. ``"q4_0"``).
        Returns the bytes written."""
        if isinstance(tensor, torch.Tensor):
            array, default, bf16 = torch_tensor_to_native(tensor, bf16_as=bf16_as, name=label)
        else:
            array, default, bf16 = tensor, None, False
        chosen = encoding or default
        if chosen is None:
            raise T2NErrorInvalidArgument(f"tensor {label!r}: a numpy array needs an explicit encoding")
        return self._live().add_tensor(label, array, chosen, bf16, percentile)

    def add_q4_0_blocks(self, label: str, qtensor: QTensorTractScaleOnly, encoding: str = "q4_0") -> int:
        """Add ``<label>.dat`` from a Q4_0 tensor's packed blocks, never re-quantized
        (``encoding`` ``"q4_0"``, or ``"q4_0_legacy"`` for tract < 0.21.11)."""
        blocks = qtensor.blocks.detach().cpu().contiguous().numpy()
        return self._live().add_q4_0_blocks(label, blocks, list(qtensor.shape), encoding)

    def add_offloaded(self, label: str, tensor: OffloadedTensor, encoding: str) -> int:
        """Add ``<label>.dat`` streamed from the checkpoint behind an offloaded tensor,
        converted (bf16/f16/f32) or quantized (``"q4_0"``) on the way by Rust."""
        return self._live().add_checkpoint_tensor(label, tensor.checkpoint, tensor.key, encoding)

    def remove(self, name: str) -> None:
        """Remove member ``name`` of a directory artefact, written earlier (it may then be
        written again)."""
        self._live().remove_member(name)

    def finish(self) -> str:
        """Finish and rename into place; returns the final path."""
        writer = self._live()
        self._writer = None
        try:
            self.path = writer.finish()
        except BaseException:
            writer.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Remove everything written so far. Idempotent."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif self._writer is not None:
            self.finish()

    def _live(self) -> _native.ArtefactWriter:
        if self._writer is None:
            raise T2NErrorInvalidArgument("this Artefact is already finished or aborted")
        return self._writer
