"""Quantized weights that stay runnable in torch (torch_to_nnef-api.md §9.1): the
quantization schemes and the ``QTensor`` base (torch_to_nnef's ``tensor.quant.base``).

A :class:`QTensor` is a ``torch.Tensor`` subclass with no float storage of its own: it
holds its quantized codes and dequantizes on every torch op (``__torch_dispatch__``), so
the model still runs in torch, and ``torch.jit.trace`` records the parameter itself
(a ``prim::GetAttr``), not a dequantized constant. The tract Q4_0 form is in ``qtract.py``.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Sequence
from typing import Any, Self, TypeVar

import torch
from torch.utils._pytree import tree_map

from fastnnef.exceptions import (
    T2NErrorImpossibleQuantization,
    T2NErrorInvalidArgument,
    T2NErrorNotImplemented,
)
from fastnnef.tensor.traced import traced_torch_function
from fastnnef.utils import torch_version

# QTensor needs tensor subclasses with __torch_dispatch__ (torch >= 1.12); the names are
# torch_to_nnef's.
QTENSOR_UNSUPPORTED = torch_version() < "1.12.0"
QTENSOR_UNSUPPORTED_MSG = "QTensor is supported only starting pytorch v1.12"

_aten = torch.ops.aten
# Ops that return the same tensor object's data under another Python object: they keep
# the quantized form (nn.Parameter() detaches its argument, for instance).
_SHARING_OPS = {_aten.detach.default, _aten.alias.default}


def check_percentile(percentile: float) -> None:
    if not 0.0 < percentile <= 1.0:
        raise T2NErrorInvalidArgument(
            f"percentile must satisfy 0 < percentile <= 1, got {percentile}; use 1.0 for plain "
            "absmax calibration"
        )


class QScheme(abc.ABC):
    """How floats map to unsigned 8-bit codes and back."""

    @abc.abstractmethod
    def quantize_as_u8(self, fp_tensor: torch.Tensor) -> torch.Tensor:
        """One uint8 code per element, same shape."""

    @abc.abstractmethod
    def dequantize(self, u8_tensor: torch.Tensor, target_dtype: torch.dtype) -> torch.Tensor:
        """Floats of ``target_dtype`` from codes."""

    def quantize_as_torch(self, fp_tensor: torch.Tensor) -> torch.Tensor:
        """``fp_tensor`` after a quantize/dequantize round trip, in its dtype."""
        return self.dequantize(self.quantize_as_u8(fp_tensor), fp_tensor.dtype)

    @abc.abstractmethod
    def to_device(self, new_device: Any) -> None:
        """Move the scheme's tensor attributes to ``new_device``."""


class QScalePerGroupF16(QScheme):
    """Symmetric ``n_bits`` quantization, one f16 scale per ``group_size`` consecutive
    values of the flattened tensor, no zero point. Scales are negative by convention.

    code = clamp(floor(x * (1/scale) + (2^n + 1)/2), 0, 2^n - 1); x ≈ (code - 2^n/2) * scale.
    """

    def __init__(self, group_size: int, scale: torch.Tensor, n_bits: int):
        if group_size <= 0 or not 1 <= n_bits <= 8:
            raise T2NErrorInvalidArgument(
                f"QScalePerGroupF16 needs group_size > 0 and 1 <= n_bits <= 8, got {group_size}, {n_bits}"
            )
        self.group_size = group_size
        self.scale = scale.reshape(-1, 1) if scale.dtype == torch.float16 else scale.to(torch.float16).reshape(-1, 1)
        self.n_bits = n_bits

    def __repr__(self) -> str:
        return f"QScalePerGroupF16(group_size={self.group_size}, n_bits={self.n_bits}, groups={self.scale.shape[0]})"

    def reshape_tensor_per_group(self, fp_tensor: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
        """``fp_tensor`` flattened to ``(groups, group_size)``."""
        size = group_size or self.group_size
        if fp_tensor.numel() % size:
            raise T2NErrorImpossibleQuantization(
                f"a tensor of shape {tuple(fp_tensor.shape)} ({fp_tensor.numel()} values) cannot be split "
                f"into groups of {size}; keep it in float"
            )
        return fp_tensor.reshape(-1, size)

    def clone_with_scale_factor(self, factor: float) -> QScalePerGroupF16:
        """The same scheme with every scale multiplied by ``factor``."""
        return QScalePerGroupF16(self.group_size, self.scale * factor, self.n_bits)

    def quantize_as_u8(self, fp_tensor: torch.Tensor) -> torch.Tensor:
        groups = self.reshape_tensor_per_group(fp_tensor)
        if groups.shape[0] != self.scale.shape[0]:
            raise T2NErrorInvalidArgument(
                f"the scheme has {self.scale.shape[0]} scales but the tensor has {groups.shape[0]} groups"
            )
        # 1/scale rounded to f16 as torch_to_nnef does; a zero scale (all-zero group) keeps
        # itself so that x * r stays 0 instead of 0 * inf.
        recip = torch.where(self.scale == 0, self.scale, 1 / self.scale)
        shifted = groups * recip + (2**self.n_bits + 1) / 2
        codes = torch.clamp(torch.floor(shifted), 0, 2**self.n_bits - 1)
        return codes.to(torch.uint8).reshape(fp_tensor.shape)

    def dequantize(self, u8_tensor: torch.Tensor, target_dtype: torch.dtype) -> torch.Tensor:
        groups = self.reshape_tensor_per_group(u8_tensor)
        centred = groups.to(torch.float32) - 2 ** (self.n_bits - 1)
        return (centred * self.scale.to(torch.float32)).to(target_dtype).reshape(u8_tensor.shape)

    def to_device(self, new_device: Any) -> None:
        self.scale = self.scale.to(new_device)


def qscale_per_group_f16_min_max_calibration(
    fp_tensor: torch.Tensor, n_bits: int, group_size: int, percentile: float = 1.0
) -> QScalePerGroupF16:
    """Scales from each group's max |x| (or its ``percentile`` quantile, in f32):
    ``scale = f16(amax / -(2^n / 2))``."""
    check_percentile(percentile)
    if fp_tensor.numel() % group_size:
        raise T2NErrorImpossibleQuantization(
            f"a tensor of shape {tuple(fp_tensor.shape)} ({fp_tensor.numel()} values) cannot be split "
            f"into groups of {group_size}; keep it in float"
        )
    groups = fp_tensor.detach().reshape(-1, group_size).abs()
    if percentile < 1.0:
        amax = torch.quantile(groups.float(), percentile, dim=1)
    else:
        amax = groups.amax(dim=1).float()
    return QScalePerGroupF16(group_size, (amax / -(2**n_bits / 2)).to(torch.float16), n_bits)


_Q = TypeVar("_Q", bound="QTensor")


class U8Compressor(abc.ABC):
    """A lossless, shape-preserving transform of uint8 codes (none ships, as in the reference)."""

    @abc.abstractmethod
    def compress(self, u8_tensor: torch.Tensor) -> torch.Tensor: ...

    @abc.abstractmethod
    def decompress(self, u8_tensor: torch.Tensor) -> torch.Tensor: ...

    def to_device(self, new_device: Any) -> None:  # noqa: B027 (an optional hook: a no-op unless overridden)
        """Move tensor attributes, if any."""


class QTensor(torch.Tensor):
    """A quantized weight that behaves as the float tensor it stands for.

    Holds ``u8_blob`` (one code per value, after ``u8_compressors``), ``qscheme``,
    ``dequant_to_dtype`` and ``nnef_name`` (the ``.dat`` label); no float copy. Every torch
    op sees ``decompress()``; writing into it raises (quantize the new values instead).
    """

    # The reference's attribute, shadowing torch's Tensor.qscheme() method on purpose.
    qscheme: QScheme  # type: ignore[assignment]
    u8_compressors: list[U8Compressor]
    dequant_to_dtype: torch.dtype
    nnef_name: str | None

    @staticmethod
    def __new__(
        cls: type[_Q],
        fp_tensor: torch.Tensor,
        qscheme: QScheme,
        dequant_to_dtype: torch.dtype = torch.float32,
        u8_compressors: Sequence[U8Compressor] | None = None,
    ) -> _Q:
        if QTENSOR_UNSUPPORTED:
            raise T2NErrorNotImplemented(QTENSOR_UNSUPPORTED_MSG)
        if not isinstance(fp_tensor, torch.Tensor) or not fp_tensor.dtype.is_floating_point:
            raise T2NErrorInvalidArgument(
                f"{cls.__name__} quantizes a float tensor, got {getattr(fp_tensor, 'dtype', type(fp_tensor))}"
            )
        self = cls._empty(tuple(fp_tensor.shape), dequant_to_dtype, fp_tensor.device)
        self.qscheme = qscheme
        self.u8_compressors = list(u8_compressors or [])
        self._store(fp_tensor.detach())
        return self

    @classmethod
    def _empty(cls, shape: Sequence[int], dtype: torch.dtype, device: Any) -> Self:
        # A wrapper subclass: sizes and dtype only, no storage.
        self = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=device, requires_grad=False)
        self.dequant_to_dtype = dtype
        self.nnef_name = None
        return self

    def _store(self, fp_tensor: torch.Tensor) -> None:
        u8 = self.qscheme.quantize_as_u8(fp_tensor)
        for compressor in self.u8_compressors:
            u8 = compressor.compress(u8)
        self.u8_blob = u8

    def _state(self) -> dict[str, Any]:
        """Attributes that make the quantized value (shared by detach/alias)."""
        return {k: v for k, v in self.__dict__.items()}

    def _shallow(self, copy_tensors: bool = False) -> Self:
        new = type(self)._empty(tuple(self.shape), self.dtype, self.device)
        for key, value in self._state().items():
            setattr(new, key, value.clone() if copy_tensors and isinstance(value, torch.Tensor) else value)
        return new

    # --- decompression ----------------------------------------------------------------
    def decompress_to_u8(self) -> torch.Tensor:
        """The uint8 codes, one per value, in the tensor's shape."""
        u8 = self.u8_blob
        for compressor in reversed(self.u8_compressors):
            u8 = compressor.decompress(u8)
        return u8

    def decompress(self) -> torch.Tensor:
        """A plain tensor of ``dequant_to_dtype`` (new memory each call)."""
        return self.qscheme.dequantize(self.decompress_to_u8(), self.dequant_to_dtype)

    def to_device(self, new_device: Any) -> QTensor:
        """A copy whose quantized state lives on ``new_device``."""
        new = type(self)._empty(tuple(self.shape), self.dtype, new_device)
        for key, value in self._state().items():
            setattr(new, key, value.to(new_device) if isinstance(value, torch.Tensor) else value)
        new.qscheme = _copy_scheme_to(self.qscheme, new_device)
        for compressor in new.u8_compressors:
            compressor.to_device(new_device)
        return new

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return (
            f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dequant_to_dtype}, "
            f"qscheme={self.qscheme!r}, nnef_name={self.nnef_name!r})"
        )

    # --- torch integration ----------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        # Under jit.trace, composite ops (convolutions) would otherwise run whole inside
        # __torch_dispatch__ and be recorded as a constant.
        return traced_torch_function(func, args, kwargs, QTensor, QTensor.decompress)

    # torch's stubs type Tensor.__torch_dispatch__ as the disabled impl, not as the
    # classmethod torch calls (this signature, from torch's docs).
    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _SHARING_OPS:
            return args[0]._shallow()
        if func is _aten.clone.default:
            return args[0]._shallow(copy_tensors=True)
        _refuse_writes(func, args, kwargs)

        def plain(a: Any) -> Any:
            return a.decompress() if isinstance(a, QTensor) else a

        return func(*tree_map(plain, args), **tree_map(plain, kwargs))


def _copy_scheme_to(qscheme: QScheme, device: Any) -> QScheme:
    moved = copy.copy(qscheme)
    moved.to_device(device)
    return moved


def _refuse_writes(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        if isinstance(value, QTensor) and arg.alias_info is not None and arg.alias_info.is_write:
            raise T2NErrorNotImplemented(
                f"{func} writes into a quantized tensor ({value.nnef_name or 'QTensor'}), which holds "
                "codes, not floats; quantize the new values into a new QTensor instead"
            )
