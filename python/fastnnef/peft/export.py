"""``export_peft``: the PEFT matrices of an adapter file into one ``.peft.nnef.tgz``.

Every check runs before the first byte is written (patterns, pairs, the base weights the
file must hold, dtypes and ``.dat`` limits, the output path); the archive is then streamed
by the Rust writer: ``peft_mapping.json`` first (a reader learns the table without reading
the tensors), then one ``<tensor name>.dat`` per matrix in byte order. ``.safetensors``
tensors go from the mapped file to the archive without passing through Python;
``.pt``/``.pth``/``.bin`` files load memory-mapped with ``weights_only=True`` unless the
caller opts in to running their pickle. A failed or interrupted export leaves nothing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from fastnnef import _native
from fastnnef.artefact import Artefact, torch_tensor_to_native
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorMisuse, T2NErrorNotFoundFile
from fastnnef.log import get_logger
from fastnnef.peft.mapping import (
    CHECK_MAP_TENSOR_NAME,
    DEFAULT_METHOD_TYPE,
    MAP_TENSOR_NAME,
    PATTERN_LORA,
    PEFT_MAPPING_FILENAME,
    PeftMapping,
    missing_check_tensors,
    plan_mapping,
)
from fastnnef.tensor.offload import OffloadedTensor, open_checkpoint
from fastnnef.tensor.safetensors_file import SAFETENSORS_DTYPES
from fastnnef.tensor_export import is_safetensors, iter_torch_tensors_from_disk, offloaded_encoding

LOGGER = get_logger(__name__)

ARCHIVE_SUFFIX = ".peft.nnef.tgz"
_PICKLE_SUFFIXES = (".pt", ".pth", ".bin")


@dataclass
class PeftExportReport:
    """What ``export_peft`` wrote."""

    archive: Path
    method: str
    mapping_table: dict[str, list[str]]  # as in peft_mapping.json
    n_tensors: int
    dat_bytes: int  # the .dat files written, 128-byte headers included, before gzip
    seconds: float

    def summary(self) -> str:
        return (
            f"exported {self.n_tensors} {self.method} matrices for {len(self.mapping_table)} base weights "
            f"({self.dat_bytes / 2**20:.1f} MiB) to {self.archive} in {self.seconds:.2f} s"
        )


def export_peft(
    read_filepath: Path | str,
    output_archive: Path | str,
    patterns: list[str] | None = None,
    map_name: str = MAP_TENSOR_NAME,
    check_map_name: str | None = CHECK_MAP_TENSOR_NAME,
    method_name: str = DEFAULT_METHOD_TYPE,
    *,
    weights_only: bool = True,
    compression_level: int = 0,
) -> PeftExportReport:
    """Write the tensors of ``read_filepath`` matched by ``patterns`` (default: LoRA A/B of a
    ``PeftModel.state_dict()``) as ``.dat`` files with ``peft_mapping.json`` into
    ``output_archive`` (a new file ending in ``.peft.nnef.tgz``; ``compression_level`` 0..9,
    0 = stored deflate blocks).

    ``map_name`` names each adapted weight as the base artefact does; ``check_map_name`` the
    base weight the file must also hold (``None`` or ``""``: no check, for adapter-only
    files such as ``adapter_model.safetensors``). ``weights_only=False`` runs the pickle of
    a ``.pt``/``.bin`` file (trusted files only).

    Raises ``T2NErrorMisuse`` (nothing matched, a matrix without its partner, a checked base
    weight missing), ``T2NErrorInvalidArgument`` (bad output path or option),
    ``T2NErrorNotFoundFile``, ``T2NErrorCheckpoint`` (unreadable file); nothing is written then.
    """
    start = time.perf_counter()
    source = Path(read_filepath)
    target = _check_output(Path(output_archive), compression_level)
    _check_source(source)
    patterns = list(PATTERN_LORA if patterns is None else patterns)
    if is_safetensors(source):
        mapping, plan = _plan_safetensors(source, patterns, map_name, check_map_name, method_name)
    else:
        mapping, plan = _plan_pickled(source, patterns, map_name, check_map_name, method_name, weights_only)
    LOGGER.info("found %s matrices for %d base weights in %s", method_name, len(mapping.mapping_table), source)
    payload = 0
    with Artefact(target, "tgz", compression_level) as art:
        art.add_file(PEFT_MAPPING_FILENAME, json.dumps(mapping.as_json_dict(), indent=2))
        for label, tensor, encoding in plan:
            LOGGER.debug("writing %s.dat", label)
            if isinstance(tensor, OffloadedTensor):  # streamed by Rust from the mapped file
                payload += art.add_offloaded(label, tensor, encoding)
            else:
                payload += art.add_tensor(label, tensor)
    LOGGER.info("wrote %s", art.path)
    return PeftExportReport(
        archive=Path(art.path or target), method=method_name, mapping_table=mapping.mapping_table,
        n_tensors=len(plan), dat_bytes=payload, seconds=time.perf_counter() - start,
    )


def _check_output(path: Path, compression_level: int) -> Path:
    if not path.name.endswith(ARCHIVE_SUFFIX) or path.name == ARCHIVE_SUFFIX:
        raise T2NErrorInvalidArgument(f"output archive {str(path)!r} must be named <something>{ARCHIVE_SUFFIX}")
    if os.path.lexists(path):
        raise T2NErrorInvalidArgument(f"output archive {str(path)!r} already exists: remove it or choose another name")
    if not path.parent.is_dir():
        raise T2NErrorNotFoundFile(f"the folder of the output archive, {str(path.parent)!r}, does not exist")
    if isinstance(compression_level, bool) or not isinstance(compression_level, int) or not 0 <= compression_level <= 9:
        raise T2NErrorInvalidArgument(f"compression_level must be an int from 0 to 9, got {compression_level!r}")
    return path


def _check_source(path: Path) -> None:
    if not (is_safetensors(path) or path.suffix in _PICKLE_SUFFIXES):
        raise T2NErrorInvalidArgument(
            f"cannot read tensors from {str(path)!r}: expected a .safetensors, .pt, .pth or .bin file "
            "(or a sharded .safetensors.index.json)"
        )
    if not path.is_file():
        raise T2NErrorNotFoundFile(f"adapter file {str(path)!r} does not exist")


# A planned member: its label, the tensor and the .dat encoding of an offloaded one.
_Planned = tuple[str, torch.Tensor, str]


def _plan_safetensors(
    path: Path, patterns: list[str], map_name: str, check_map_name: str | None, method: str
) -> tuple[PeftMapping, list[_Planned]]:
    ckpt = open_checkpoint(path)  # headers only
    keys = ckpt.keys()
    mapping = _checked_mapping(keys, path, patterns, map_name, check_map_name, method)
    shapes = {}
    plan: list[_Planned] = []
    for key in sorted(mapping.tensor_keys()):
        dtype_name, shape, _ = ckpt.info(key)
        _check_float(key, dtype_name, SAFETENSORS_DTYPES.get(dtype_name))
        tensor = OffloadedTensor(ckpt, key)
        encoding = offloaded_encoding(tensor)
        _native.validate_member_name(f"{key}.dat")
        ckpt.check(key, key, encoding)
        shapes[key] = list(shape)
        plan.append((key, tensor, encoding))
    _check_lora_shapes(mapping, shapes)
    return mapping, plan


def _plan_pickled(
    path: Path, patterns: list[str], map_name: str, check_map_name: str | None, method: str, weights_only: bool
) -> tuple[PeftMapping, list[_Planned]]:
    # Memory-mapped: tensors stay in the file's pages until written.
    tensors = dict(iter_torch_tensors_from_disk(path, weights_only=weights_only))
    mapping = _checked_mapping(list(tensors), path, patterns, map_name, check_map_name, method)
    plan: list[_Planned] = []
    for key in sorted(mapping.tensor_keys()):
        tensor = tensors[key]
        _check_float(key, str(tensor.dtype), tensor.dtype)
        array, encoding, _ = torch_tensor_to_native(tensor, name=key)
        _native.validate_member_name(f"{key}.dat")
        _native.dat_payload_size(key, list(array.shape), encoding)
        plan.append((key, tensor, encoding))
    _check_lora_shapes(mapping, {key: list(tensors[key].shape) for key in mapping.tensor_keys()})
    return mapping, plan


def _checked_mapping(
    keys: list[str], path: Path, patterns: list[str], map_name: str, check_map_name: str | None, method: str
) -> PeftMapping:
    mapping = plan_mapping(keys, patterns, map_name, check_map_name, method)
    missing = missing_check_tensors(mapping, keys)
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise T2NErrorMisuse(
            f"{str(path)!r} lacks base weights that check_map_name {check_map_name!r} names: {shown}. "
            "Fix -c/--check-map-name, or pass -c '' for an adapter-only file (no base weights in it)"
        )
    return mapping


def _check_float(key: str, dtype_name: str, dtype: torch.dtype | None) -> None:
    if dtype is None or not dtype.is_floating_point:
        raise T2NErrorInvalidArgument(
            f"tensor {key!r} matched a PEFT pattern but has dtype {dtype_name}: PEFT matrices are float tensors; "
            "narrow the patterns (-p)"
        )


def _check_lora_shapes(mapping: PeftMapping, shapes: dict[str, list[int]]) -> None:
    """For LoRA (A then B): B's dim 1 is A's dim 0, the rank. Catches swapped patterns."""
    if mapping.method.lower() != "lora":
        return
    for base, keys in mapping.mapping_table.items():
        if len(keys) != 2:
            return  # not the A/B layout: nothing to compare
        a_shape, b_shape = shapes[keys[0]], shapes[keys[1]]
        if len(a_shape) < 2 or len(b_shape) < 2 or b_shape[1] != a_shape[0]:
            raise T2NErrorMisuse(
                f"LoRA matrices of {base!r} do not chain: A {keys[0]!r} is {a_shape}, B {keys[1]!r} is {b_shape} "
                "(B's dim 1 must equal A's dim 0, the rank); are the patterns in A, B order?"
            )
