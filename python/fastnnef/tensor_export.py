"""Tensor-only exports (torch_to_nnef-api.md §4): one ``<name>.dat`` per tensor, written
by the Rust codec straight from the tensor's storage.

Differences from the reference, all on inputs it could not export anyway:
- bfloat16 tensors are written as exact float32 (the reference raises ``TypeError``);
- qint8 / quint8 / qint32 tensors quantized *per tensor* are written as their integer
  codes (codes 3 / 2 / 3) with a line appended to ``output_dir/graph.quant``; tensors
  quantized *per channel* raise ``T2NErrorNotImplemented``, because tract's ``graph.quant``
  accepts only scalar scales: dequantize them or requantize them per tensor first;
- every name and size is checked before the first file is written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Tuple, Union

import torch

from fastnnef import _native
from fastnnef.artefact import quant_line, torch_tensor_to_native
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)

LOGGER = logging.getLogger(__name__)

_TORCH_PICKLE_SUFFIXES = (".pt", ".pth", ".bin")


def _writes_itself(tensor: object) -> bool:
    # Quantized tensor types (QTensor and kin) serialize themselves, as in the reference.
    return callable(getattr(type(tensor), "write_in_file", None))


def export_tensors_to_nnef(
    name_to_torch_tensors: Dict[str, torch.Tensor], output_dir: Union[Path, str]
) -> Dict[str, torch.Tensor]:
    """Write each tensor as ``output_dir/<name>.dat`` (a ``/`` in a name makes a
    sub-folder) and return the dict unchanged. ``output_dir`` must exist.

    Raises ``T2NErrorInvalidArgument`` for a name that would escape ``output_dir`` or be
    ignored by tract, ``T2NErrorTensorTooLarge`` for a tensor over the ``.dat`` limits
    (4 GiB payload, rank 8), ``T2NErrorNotImplemented`` for per-channel quantized tensors;
    all before anything is written.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise T2NErrorNotFoundFile(f"output_dir {str(output_dir)!r} does not exist or is not a directory; create it first")
    planned = []
    quant_lines = []
    for name, tensor in name_to_torch_tensors.items():
        if not isinstance(name, str):
            raise T2NErrorInvalidArgument(f"tensor names must be strings, got {name!r}")
        _native.validate_member_name(f"{name}.dat")
        if _writes_itself(tensor):
            planned.append((name, tensor, None, False))
            continue
        array, encoding, bf16 = torch_tensor_to_native(tensor, name=name)
        _native.dat_payload_size(name, list(array.shape), encoding)
        if encoding in ("qu8", "qi8", "qi32"):
            quant_lines.append(quant_line(name, tensor))
        planned.append((name, array, encoding, bf16))
    for name, array, encoding, bf16 in planned:
        path = output_dir / f"{name}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        if encoding is None:
            array.write_in_file(output_dir, name)
        else:
            _native.dat_write(str(path), array, encoding, bf16, label=name)
    if quant_lines:
        with open(output_dir / "graph.quant", "a", encoding="utf-8") as f:
            f.writelines(quant_lines)
    return name_to_torch_tensors


def iter_torch_tensors_from_disk(
    store_filepath: Union[Path, str],
    filter_key: Optional[Callable[[str], bool]] = None,
    map_location: Union[str, torch.device] = "cpu",
) -> Iterator[Tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` from a checkpoint: ``.safetensors`` lazily, one tensor at a
    time; ``.pt`` / ``.pth`` / ``.bin`` loaded whole (``weights_only=True`` first)."""
    path = Path(store_filepath)
    keep = filter_key or (lambda _name: True)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt", device=str(map_location)) as store:
            for name in store.keys():
                if keep(name):
                    yield name, store.get_tensor(name)
        return
    if path.suffix not in _TORCH_PICKLE_SUFFIXES:
        raise T2NErrorNotImplemented(
            f"cannot read tensors from {str(path)!r}: expected a .safetensors, .pt, .pth or .bin file"
        )
    try:
        loaded = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any refusal of the safe loader falls back, loudly
        LOGGER.warning(
            "weights-only load of %s failed (%s); loading it as a full pickle: only do this for files you trust",
            path,
            err,
        )
        loaded = torch.load(path, map_location=map_location, weights_only=False)
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
    store_filepath: Union[Path, str],
    output_dir: Union[Path, str],
    filter_key: Optional[Callable[[str], bool]] = None,
    fn_check_found_tensors: Optional[Callable[[Dict[str, torch.Tensor]], bool]] = None,
    map_location: Union[str, torch.device] = "cpu",
) -> Dict[str, torch.Tensor]:
    """Read the tensors of a checkpoint that pass ``filter_key``, let
    ``fn_check_found_tensors`` inspect them (it must raise to stop the export; its return
    value is ignored, as in the reference), then write them with
    :func:`export_tensors_to_nnef`. Returns the tensors found."""
    found = dict(iter_torch_tensors_from_disk(store_filepath, filter_key=filter_key, map_location=map_location))
    if fn_check_found_tensors is not None:
        fn_check_found_tensors(found)
    return export_tensors_to_nnef(found, output_dir)
