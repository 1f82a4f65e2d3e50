"""The ``.safetensors`` format on the Python side: its dtype names (``SAFETENSORS_DTYPES``,
the one table both directions read) and a writer of plain tensors (``write_safetensors``:
offloading an in-memory tensor, and a ``.bin`` checkpoint converted once for offloading).
Reading is Rust's (``_native.Checkpoint``, rust/checkpoint.rs)."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Union

import torch

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


def write_safetensors(path: PathLike, tensors: dict[str, torch.Tensor]) -> None:
    """Write ``tensors`` (plain tensors) as a ``.safetensors`` file, one tensor at a time from
    its storage (no copy of the whole set); written beside and renamed, so a failure leaves
    nothing."""
    header: dict[str, Any] = {}
    offset = 0
    plain: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        dtype_name = _TORCH_TO_SAFETENSORS.get(tensor.dtype)
        if dtype_name is None:
            raise T2NErrorInvalidArgument(f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot hold")
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": dtype_name, "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
        plain[name] = tensor
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "xb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for tensor in plain.values():
                if tensor.numel():
                    # An ndarray is a buffer; numpy's stubs say so for Python 3.12+ only.
                    f.write(memoryview(tensor.view(torch.uint8).reshape(-1).numpy()))  # type: ignore[arg-type]
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
