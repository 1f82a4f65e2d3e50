"""Q4_0 weights for tract (torch_to_nnef's ``tensor.quant.qtract``).

:class:`QTensorTractScaleOnly` (what ``fp_to_tract_q4_0_with_min_max_calibration`` and
``fastnnef.compress`` build) keeps ONLY the packed Q4_0 blocks, 18 bytes per 32 values
(the reference keeps the float weight plus one byte per value). It quantizes and
dequantizes through ``fastnnef._native`` (tract's recipe), so torch computes with exactly
the values tract will, and the export writes the blocks as they are, never re-quantized.

Example::

    q = fp_to_tract_q4_0_with_min_max_calibration(linear.weight.data)
    linear.weight = torch.nn.Parameter(q, requires_grad=False)
    y = linear(x)          # runs on the dequantized weight
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fastnnef import _native
from fastnnef.exceptions import (
    T2NErrorImpossibleQuantization,
    T2NErrorInvalidArgument,
    T2NErrorNotImplemented,
)
from fastnnef.tensor.quant.base import QScalePerGroupF16, QTensor, check_percentile

Q4_0_GROUP = _native.Q4_0_BLOCK  # values per block: the Rust core's constant
Q4_0_BLOCK_BYTES = 18
# The float dtypes Rust dequantizes into directly, by the names it takes (bfloat16 as uint16 bits).
FLOAT_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


class QTensorTract(QTensor):
    """Marker base of the QTensors that tract can load."""


class QTensorTractScaleOnly(QTensorTract):
    """Q4_0 (4 bits, groups of 32, one f16 scale per group): stored as the packed blocks
    tract reads (``blocks``: uint8, 18 bytes per 32 values, GGML nibble order), nothing
    else. ``u8_blob`` and ``qscheme.scale`` are computed from / views of the blocks."""

    blocks: torch.Tensor
    specific_machine: str | None

    @staticmethod
    def __new__(cls, *args: Any, specific_machine: str | None = None, **kwargs: Any) -> QTensorTractScaleOnly:
        self = QTensor.__new__(cls, *args, **kwargs)
        self.specific_machine = specific_machine
        return self

    @classmethod
    def _empty(cls, shape: Sequence[int], dtype: torch.dtype, device: Any) -> QTensorTractScaleOnly:
        self = super()._empty(shape, dtype, device)
        self.specific_machine = None
        return self

    def _store(self, fp_tensor: torch.Tensor) -> None:
        scheme = self.qscheme
        if not isinstance(scheme, QScalePerGroupF16) or scheme.n_bits != 4 or scheme.group_size != Q4_0_GROUP:
            raise T2NErrorImpossibleQuantization(
                f"QTensorTractScaleOnly stores Q4_0: it needs QScalePerGroupF16(group_size=32, n_bits=4), "
                f"got {scheme!r}"
            )
        if self.u8_compressors:
            raise T2NErrorInvalidArgument(
                "QTensorTractScaleOnly stores packed Q4_0 blocks; u8_compressors do not apply"
            )
        check_q4_0_shape(tuple(fp_tensor.shape))
        codes = scheme.quantize_as_u8(fp_tensor).reshape(-1, Q4_0_GROUP)
        packed = codes[:, :16] | (codes[:, 16:] << 4)  # GGML order: byte j = q[j] | q[j+16] << 4
        scale_bytes = scheme.scale.reshape(-1).contiguous().view(torch.uint8).reshape(-1, 2)
        self._set_blocks(torch.cat([scale_bytes, packed], dim=1).reshape(-1))

    @classmethod
    def _from_blocks(
        cls, blocks: torch.Tensor, shape: Sequence[int], dequant_to_dtype: torch.dtype
    ) -> QTensorTractScaleOnly:
        self = cls._empty(tuple(shape), dequant_to_dtype, blocks.device)
        self.u8_compressors = []
        self._set_blocks(blocks)
        return self

    def _set_blocks(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks.contiguous()
        # The scales are the first two bytes of each block: a view, no copy.
        scale = self.blocks.view(-1, Q4_0_BLOCK_BYTES)[:, :2].view(torch.float16).reshape(-1)
        self.qscheme = QScalePerGroupF16(Q4_0_GROUP, scale, 4)

    def _state(self) -> dict[str, Any]:
        # qscheme is rebuilt from the (possibly copied) blocks.
        return {k: v for k, v in self.__dict__.items() if k != "qscheme"}

    def _shallow(self, copy_tensors: bool = False) -> QTensorTractScaleOnly:
        new = super()._shallow(copy_tensors)
        new._set_blocks(new.blocks)
        return new

    def to_device(self, new_device: Any) -> QTensorTractScaleOnly:
        return type(self)._from_blocks(self.blocks.to(new_device), tuple(self.shape), self.dequant_to_dtype)

    @property
    def u8_blob(self) -> torch.Tensor:  # type: ignore[override]
        """The 4-bit codes, one uint8 per value (computed from the blocks)."""
        return self.decompress_to_u8()

    def decompress_to_u8(self) -> torch.Tensor:
        nibbles = self.blocks.view(-1, Q4_0_BLOCK_BYTES)[:, 2:]
        return torch.cat([nibbles & 0x0F, nibbles >> 4], dim=1).reshape(self.shape)

    def decompress(self) -> torch.Tensor:
        """Dequantized by ``_native`` (tract's arithmetic); through f16 on ARM machines,
        as tract's ARM kernels do. Rust writes the values in their final float dtype
        (rounded from f32 as a cast would): no f32 copy of the tensor on the way."""
        through = torch.float16 if "arm" in (self.specific_machine or platform.machine()).lower() else None
        dtype = through or self.dequant_to_dtype
        name = FLOAT_DTYPE_NAMES.get(dtype, "f32")
        values = torch.from_numpy(_native.q4_0_dequantize(self.blocks.cpu().numpy(), list(self.shape), name))
        if name == "bf16":
            values = values.view(torch.bfloat16)
        return values.to(device=self.device, dtype=self.dequant_to_dtype)

    def nbytes_quantized(self) -> int:
        """Bytes held: the packed blocks only."""
        return self.blocks.numel()

    def write_in_file(self, dirpath: os.PathLike[str] | str, label: str, inference_target: Any = None) -> None:
        """Write ``<dirpath>/<label>.dat``: code 0x3040 for tract >= 0.21.11 (or no target),
        0x2040 before. An existing file with the same bytes is left as is; a different one
        raises ``T2NErrorNotImplemented``."""
        data = _native.q4_0_blocks_dat_encode(
            self.blocks.cpu().numpy(), list(self.shape), q4_0_encoding(inference_target)
        )
        path = Path(dirpath) / f"{label}.dat"
        if path.exists():
            if path.read_bytes() == data:
                return
            raise T2NErrorNotImplemented(
                f"{path} already exists with different content; two tensors share the label {label!r}"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def q4_0_encoding(inference_target: Any) -> str:
    """``"q4_0"`` (GGML order) unless ``inference_target`` is a tract older than 0.21.11."""
    if inference_target is None:
        return "q4_0"
    return inference_target.capabilities().q4_0_encoding or "q4_0"


def check_q4_0_shape(shape: Sequence[int], label: str = "tensor") -> None:
    """Raise ``T2NErrorImpossibleQuantization`` unless tract can hold ``shape`` as Q4_0
    (the rule lives in the Rust core, which writes the blocks)."""
    _native.q4_0_check_shape(label, [int(d) for d in shape])


def fp_to_tract_q4_0_with_min_max_calibration(
    fp_tensor: torch.Tensor, percentile: float = 1.0
) -> QTensorTractScaleOnly:
    """Q4_0 of ``fp_tensor`` (min-max, or ``percentile`` of |x| per block), quantized by
    ``_native`` on all cores; dequantizes back to ``fp_tensor``'s dtype."""
    check_percentile(percentile)
    if not isinstance(fp_tensor, torch.Tensor):
        raise T2NErrorInvalidArgument(f"expected a torch.Tensor, got {type(fp_tensor).__name__}")
    check_q4_0_shape(tuple(fp_tensor.shape))
    if isinstance(fp_tensor, QTensor):
        fp_tensor = fp_tensor.decompress()
    values = fp_tensor.detach().cpu()
    if values.dtype == torch.bfloat16:
        array, bf16 = values.view(torch.int16).numpy(), True
    elif values.dtype in (torch.float16, torch.float32):
        array, bf16 = values.numpy(), False
    elif values.dtype == torch.float64:
        array, bf16 = values.float().numpy(), False
    else:
        raise T2NErrorInvalidArgument(f"Q4_0 quantizes float tensors, got {values.dtype}")
    blocks = torch.from_numpy(_native.q4_0_quantize(array, bf16=bf16, percentile=percentile))
    return QTensorTractScaleOnly._from_blocks(blocks.to(fp_tensor.device), tuple(fp_tensor.shape), fp_tensor.dtype)
