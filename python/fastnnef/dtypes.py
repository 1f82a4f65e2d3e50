"""Drop-in: torch_to_nnef's ``dtypes`` module, the dtype tables between PyTorch, NumPy,
tract and NNEF with their lookup helpers, for code that imports them from there.

fastnnef's own export path keeps its tables where they are used; the tables here are
derived from those where one exists (the tract names are the ``.dat`` encodings of
``artefact.PLAIN_ENCODINGS``, the NNEF generics come from ``nnef.writer.value_kind``),
so the two never disagree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fastnnef.artefact import PLAIN_ENCODINGS
from fastnnef.nnef.writer import value_kind

# Integer dtypes (the unsigned 16/32/64-bit ones exist from torch 2.3 on).
WHOLE_NUMBER_DTYPES: list[torch.dtype] = [
    d for d, name in PLAIN_ENCODINGS.items() if name[0] in "iu"
]



def _numpy_to_torch() -> dict[type, torch.dtype]:
    """NumPy scalar type -> torch dtype, for every type torch.from_numpy takes (np.double
    is np.float64: one key)."""
    table: dict[type, torch.dtype] = {}
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16, np.float32, np.float64, np.bool_,
              np.complex64, np.complex128, np.uint16, np.uint32, np.uint64):
        try:
            table[t] = torch.from_numpy(np.zeros(1, dtype=t)).dtype
        except TypeError:  # unsigned 16/32/64-bit: torch 2.3 and later
            continue
    return table


NUMPY_TO_TORCH_DTYPE: dict[type, torch.dtype] = _numpy_to_torch()

# torch dtype -> NumPy scalar type; torch's quantized dtypes map to their codes' type.
TORCH_TO_NUMPY_DTYPE: dict[torch.dtype, type] = {
    **{v: k for k, v in NUMPY_TO_TORCH_DTYPE.items()},
    torch.quint8: np.uint8,
    torch.qint8: np.int8,
    torch.qint32: np.int32,
}

# c10::ScalarType codes (the index) -> torch dtype, as TorchScript graphs give them.
SCALAR_TYPE_TO_PYTORCH_TYPE: list[torch.dtype | None] = [
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
    torch.float64, None, torch.complex64, torch.complex128, torch.bool, torch.qint8, torch.quint8,
    torch.qint32, torch.bfloat16,
]

# The type names TorchScript and tract print -> NumPy scalar type (tract's TDim, a symbolic
# size, is read as the reference reads it).
STR_TO_NUMPY_DTYPE: dict[str, type] = {
    "QUInt8": np.int8, "Byte": np.uint8, "Long": np.int64, "Float": np.float32, "float": np.float32,
    "Short": np.int16, "short": np.int16, "Char": np.int8, "char": np.int8, "Double": np.float64,
    "double": np.float64, "i64": np.int64, "I64": np.int64, "int": np.int32, "Int": np.int32,
    "Bool": np.bool_, "bool": np.bool_, "Half": np.float16, "ComplexFloat": np.complex64,
    "TDim": np.bool_, "tdim": np.bool_, "UInt16": np.uint16, "uint16": np.uint16,
}
# The last name given for a type wins, as in the reference; Python ints are Long.
NUMPY_DTYPE_TO_STR: dict[Any, str] = {**{v: k for k, v in STR_TO_NUMPY_DTYPE.items()}, int: "Long"}

# torch dtype -> tract's datum type name.
TORCH_DTYPE_TO_TRACT_STR: dict[torch.dtype, str] = {
    **PLAIN_ENCODINGS, torch.complex64: "complexf64", torch.complex128: "complexf128",
}

# torch dtype -> NNEF generic type (scalar, integer, logical) of the values it holds.
TORCH_DTYPE_TO_NNEF_STR: dict[torch.dtype, str] = {d: value_kind(n) for d, n in PLAIN_ENCODINGS.items()}

_QUANTIZED = (torch.quint8, torch.qint8, torch.qint32)
_FLOATING = (torch.float16, torch.float32, torch.float64, torch.bfloat16)


def str_to_torch_dtype(torch_type_str: str) -> torch.dtype:
    """A TorchScript or tract type name (``"Float"``, ``"Long"``, ``"i64"``...) as a torch dtype."""
    return NUMPY_TO_TORCH_DTYPE[STR_TO_NUMPY_DTYPE[torch_type_str]]


def torch_dtype_to_str(torch_type: torch.dtype) -> str:
    """A torch dtype's TorchScript type name (8-bit quantized dtypes: their codes' ``Char``)."""
    if torch_type in (torch.quint8, torch.qint8):
        torch_type = torch.int8
    return NUMPY_DTYPE_TO_STR[TORCH_TO_NUMPY_DTYPE[torch_type]]


def numpy_dtype_to_tract_str(dtype: Any) -> str:
    """A NumPy scalar type's tract datum type name (``np.float32`` -> ``"f32"``)."""
    return TORCH_DTYPE_TO_TRACT_STR[NUMPY_TO_TORCH_DTYPE[np.dtype(dtype).type]]


def is_quantized_dtype(dtype: torch.dtype | None) -> bool:
    return dtype in _QUANTIZED


def _as_torch(dtype: Any) -> Any:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return NUMPY_TO_TORCH_DTYPE.get(np.dtype(dtype).type)
    except TypeError:  # neither a torch nor a NumPy dtype
        return None


def dtype_is_whole_number(dtype: Any) -> bool:
    """True for integer torch or NumPy dtypes (bool is not one)."""
    return _as_torch(dtype) in WHOLE_NUMBER_DTYPES


def dtype_is_floating_point(dtype: Any) -> bool:
    """True for f16, f32, f64 and bf16, as torch or NumPy dtypes."""
    return _as_torch(dtype) in _FLOATING
