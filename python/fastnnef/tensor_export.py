"""Tensor-only exports (torch_to_nnef-api.md §4): one ``<name>.dat`` per tensor, written
by the Rust codec straight from the tensor's storage.

Differences from the reference, all on inputs it could not export anyway:
- bfloat16 tensors are written as exact float32 (the reference raises ``TypeError``);
- qint8 / quint8 / qint32 tensors quantized *per tensor* are written as their integer
  codes (codes 3 / 2 / 3) with a line appended to ``output_dir/graph.quant``; tensors
  quantized *per channel* raise ``T2NErrorNotImplemented``, because tract's ``graph.quant``
  accepts only scalar scales: dequantize them or requantize them per tensor first;
- every name and size is checked before the first file is written;
- checkpoints stream (``.safetensors`` through the Rust extension, one tensor at a time;
  ``.pt``/``.bin`` memory-mapped), and pickles are never executed unless the caller passes
  ``weights_only=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from fastnnef import _native
from fastnnef.artefact import PLAIN_ENCODINGS, quant_line, torch_tensor_to_native
from fastnnef.exceptions import (
    T2NErrorCheckpoint,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.log import get_logger
from fastnnef.tensor.offload import OffloadedTensor, open_checkpoint
from fastnnef.tensor.opaque import export_form

LOGGER = get_logger(__name__)

_TORCH_PICKLE_SUFFIXES = (".pt", ".pth", ".bin")


def _writes_itself(tensor: object) -> bool:
    # Quantized tensor types (QTensor and kin) serialize themselves, as in the reference.
    return callable(getattr(type(tensor), "write_in_file", None))


def export_tensors_to_nnef(
    name_to_torch_tensors: dict[str, torch.Tensor], output_dir: Path | str
) -> dict[str, torch.Tensor]:
    """Write each tensor as ``output_dir/<name>.dat`` (a ``/`` in a name makes a
    sub-folder) and return the dict unchanged. ``output_dir`` must exist.

    Raises ``T2NErrorInvalidArgument`` for a name that would escape ``output_dir`` or be
    ignored by tract, ``T2NErrorTensorTooLarge`` for a tensor over the ``.dat`` limits
    (4 GiB payload, rank 8), ``T2NErrorNotImplemented`` for per-channel quantized tensors;
    all before anything is written.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise T2NErrorNotFoundFile(
            f"output_dir {str(output_dir)!r} does not exist or is not a directory; create it first"
        )
    # (name, what is written: a tensor that writes itself, an offloaded tensor or an array,
    # its .dat encoding (None: it writes itself), bf16)
    planned: list[tuple[str, Any, str | None, bool]] = []
    quant_lines = []
    for name, tensor in name_to_torch_tensors.items():
        if not isinstance(name, str):
            raise T2NErrorInvalidArgument(f"tensor names must be strings, got {name!r}")
        _native.validate_member_name(f"{name}.dat")
        tensor = export_form(tensor)  # the tensor behind an OpaqueTensorRef; offloaded Q4_0 blocks
        if _writes_itself(tensor):
            planned.append((name, tensor, None, False))
            continue
        if isinstance(tensor, OffloadedTensor):  # streamed from its checkpoint by Rust
            encoding = offloaded_encoding(tensor)
            tensor.checkpoint.check(name, tensor.key, encoding)
            planned.append((name, tensor, encoding, False))
            continue
        array, encoding, bf16 = torch_tensor_to_native(tensor, name=name)
        _native.dat_payload_size(name, list(array.shape), encoding)
        if encoding in ("qu8", "qi8", "qi32"):
            quant_lines.append(quant_line(name, tensor))
        planned.append((name, array, encoding, bf16))
    for name, payload, dat_encoding, bf16 in planned:
        path = output_dir / f"{name}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        if dat_encoding is None:
            payload.write_in_file(output_dir, name)
        elif isinstance(payload, OffloadedTensor):
            _native.checkpoint_dat_write(str(path), payload.checkpoint, payload.key, dat_encoding, label=name)
        else:
            _native.dat_write(str(path), payload, dat_encoding, bf16, label=name)
    if quant_lines:
        with open(output_dir / "graph.quant", "a", encoding="utf-8") as f:
            f.writelines(quant_lines)
    return name_to_torch_tensors


def offloaded_encoding(tensor: OffloadedTensor) -> str:
    """The ``.dat`` encoding an offloaded tensor is written in (the PEFT exporter's too)."""
    # As for in-memory tensors: bf16 is written as exact f32; Q4_0 when the tensor asks.
    if tensor.q4_0:
        return "q4_0"
    return "f32" if tensor.dtype == torch.bfloat16 else PLAIN_ENCODINGS[tensor.dtype]


def is_safetensors(path: Path) -> bool:
    """Whether ``path`` names a safetensors file or a sharded checkpoint's index."""
    return path.suffix == ".safetensors" or path.name.endswith(".safetensors.index.json")


def _load_pickled(path: Path, map_location: str | torch.device, weights_only: bool) -> object:
    """``torch.load`` with ``mmap=True`` (tensors stay in the file's pages until read) and
    ``weights_only`` as asked: never a silent fallback to executing the pickle."""
    try:
        try:
            return torch.load(path, map_location=map_location, weights_only=weights_only, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
            # Files from torch.save(_use_new_zipfile_serialization=False) cannot be mapped.
            return torch.load(path, map_location=map_location, weights_only=weights_only)
    except Exception as err:  # torch raises many kinds; keep its message
        hint = (
            " If you trust this file and it holds more than tensors, pass weights_only=False to "
            "execute its pickle (only for files from a trusted source)."
            if weights_only
            else ""
        )
        raise T2NErrorCheckpoint(f"cannot read tensors from {str(path)!r}: {err}.{hint}") from err


def iter_torch_tensors_from_disk(
    store_filepath: Path | str,
    filter_key: Callable[[str], bool] | None = None,
    map_location: str | torch.device = "cpu",
    *,
    weights_only: bool = True,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` from a checkpoint, one tensor at a time.

    - ``.safetensors`` files (or a sharded ``*.safetensors.index.json``) are read by the Rust
      extension: headers validated up front (a truncated or corrupt file raises
      ``T2NErrorCheckpoint`` naming the file and the tensor), each tensor a zero-copy view
      of a private map of its bytes, released when the caller drops it;
    - ``.pt`` / ``.pth`` / ``.bin`` files load with ``weights_only=True`` and ``mmap=True``.
      A file the safe loader refuses raises; ``weights_only=False`` (an explicit opt-in,
      for trusted files only) executes its pickle. An ``nn.Module`` yields its parameters;
      non-tensor values of a dict are skipped with a warning.
    """
    path = Path(store_filepath)
    keep = filter_key or (lambda _name: True)
    if is_safetensors(path):
        ckpt = open_checkpoint(path)
        for name in ckpt.keys():
            if keep(name):
                tensor = OffloadedTensor(ckpt, name).to_base_tensor()
                yield name, tensor if torch.device(map_location).type == "cpu" else tensor.to(map_location)
        return
    if path.suffix not in _TORCH_PICKLE_SUFFIXES:
        raise T2NErrorNotImplemented(
            f"cannot read tensors from {str(path)!r}: expected a .safetensors, .pt, .pth or .bin file "
            "(or a sharded .safetensors.index.json)"
        )
    if not path.is_file():
        raise T2NErrorNotFoundFile(f"checkpoint {str(path)!r} does not exist")
    loaded = _load_pickled(path, map_location, weights_only)
    items: Iterable[tuple[Any, Any]]
    if isinstance(loaded, torch.nn.Module):
        items = loaded.named_parameters()
    elif isinstance(loaded, dict):
        items = loaded.items()
    else:
        raise T2NErrorNotImplemented(
            f"{str(path)!r} holds a {type(loaded).__name__}; expected a state dict or an nn.Module"
        )
    for name, value in items:
        if not isinstance(value, torch.Tensor):
            LOGGER.warning("skipping %r in %s: a %s, not a tensor", name, path, type(value).__name__)
            continue
        if keep(name):
            yield name, value


def export_tensors_from_disk_to_nnef(
    store_filepath: Path | str,
    output_dir: Path | str,
    filter_key: Callable[[str], bool] | None = None,
    fn_check_found_tensors: Callable[[dict[str, torch.Tensor]], bool] | None = None,
    map_location: str | torch.device = "cpu",
    *,
    weights_only: bool = True,
) -> dict[str, torch.Tensor]:
    """Write the tensors of a checkpoint that pass ``filter_key`` as ``<name>.dat`` files in
    ``output_dir`` (which must exist), after ``fn_check_found_tensors`` has seen them (it
    must raise to stop the export; its return value is ignored, as in the reference).
    Returns the tensors found.

    ``.safetensors`` checkpoints stream: the found tensors are :class:`OffloadedTensor`
    values (any torch op reads them from the file), and Rust writes each ``.dat`` straight
    from the mapped file, so memory stays bounded whatever the checkpoint's size. Every
    name and size is checked before the first file is written. ``.pt``/``.pth``/``.bin``
    load as in :func:`iter_torch_tensors_from_disk` (memory-mapped) and are written one
    tensor at a time.
    """
    path = Path(store_filepath)
    if not is_safetensors(path):
        found = dict(
            iter_torch_tensors_from_disk(path, filter_key=filter_key, map_location=map_location,
                                         weights_only=weights_only)
        )
        if fn_check_found_tensors is not None:
            fn_check_found_tensors(found)
        return export_tensors_to_nnef(found, output_dir)
    ckpt = open_checkpoint(path)
    keep = filter_key or (lambda _name: True)
    found_off = {name: OffloadedTensor(ckpt, name) for name in ckpt.keys() if keep(name)}
    if fn_check_found_tensors is not None:
        fn_check_found_tensors(dict(found_off))
    out = Path(output_dir)
    if not out.is_dir():
        raise T2NErrorNotFoundFile(f"output_dir {str(out)!r} does not exist or is not a directory; create it first")
    plan = []
    for name, tensor in found_off.items():
        _native.validate_member_name(f"{name}.dat")
        encoding = offloaded_encoding(tensor)
        ckpt.check(name, name, encoding)
        plan.append((name, encoding))
    for name, encoding in plan:
        target = out / f"{name}.dat"
        target.parent.mkdir(parents=True, exist_ok=True)
        _native.checkpoint_dat_write(str(target), ckpt, name, encoding, label=name)
    return dict(found_off)
