"""The ``.safetensors`` format on the Python side: its dtype names (``SAFETENSORS_DTYPES``,
the one table both directions read) and a writer of plain tensors (``write_safetensors``:
offloading an in-memory tensor, and a ``.bin`` checkpoint converted once for offloading),
which checks dtypes here and leaves the bytes to Rust (``_native.write_safetensors``,
rust/safetensors_write.rs). Reading is Rust's too (``_native.Checkpoint``, rust/checkpoint.rs)."""

from __future__ import annotations

import os
from typing import Union

import numpy as np
import numpy.typing as npt
import torch

from fastnnef import _native
from fastnnef.exceptions import T2NErrorInvalidArgument

PathLike = Union[str, "os.PathLike[str]"]

# safetensors dtype name <-> torch dtype (one table, both directions).
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64")):
    if hasattr(torch, _attr):  # torch >= 2.3
        SAFETENSORS_DTYPES[_name] = getattr(torch, _attr)
_TORCH_TO_SAFETENSORS = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}


def write_safetensors(
    path: PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (plain tensors) and the ``__metadata__`` strings ``metadata`` as a
    ``.safetensors`` file, byte-identical to the ``safetensors`` package's. Rust streams each
    tensor from its storage (no copy of the set, the GIL released) into a file beside
    ``path`` renamed into place, so a failure leaves nothing (rust/safetensors_write.rs)."""
    entries: list[tuple[str, str, list[int], npt.NDArray[np.uint8]]] = []
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        dtype_name = _TORCH_TO_SAFETENSORS.get(tensor.dtype)
        if dtype_name is None:
            raise T2NErrorInvalidArgument(f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot hold")
        # Flattened before the byte view: a 0-d tensor cannot be viewed as another size.
        raw = tensor.reshape(-1).view(torch.uint8).numpy()
        entries.append((name, dtype_name, list(tensor.shape), raw))
    _native.write_safetensors(os.fspath(path), entries, metadata)
