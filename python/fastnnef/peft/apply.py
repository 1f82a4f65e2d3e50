"""The runtime side of a ``.peft.nnef.tgz``: read it back, and apply a LoRA adapter to a base
artefact at load time, ``W' = W + scaling * B @ A`` for each base weight of the mapping
table (the reference ships the matrices for the runtime to patch the base weights it loads;
the scaling, ``lora_alpha / r`` in the adapter's ``adapter_config.json``, is not in the
archive). ``lora_merged_artefact`` builds the patched artefact in memory, for
``fastnnef.check.TractArtefact.load(bytes)``: the base file stays as it is.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

from fastnnef import _native
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorMisuse, T2NErrorNotImplemented
from fastnnef.peft.mapping import PEFT_MAPPING_FILENAME

PathLike = Union[str, "os.PathLike[str]"]
_FLOAT_ENCODINGS = ("f16", "f32", "f64")


@dataclass
class PeftArchive:
    """A ``.peft.nnef.tgz`` read back: ``peft_mapping.json`` and the decoded tensors."""

    method: str
    mapping_table: dict[str, list[str]]
    tensors: dict[str, np.ndarray]  # tensor name (the .dat label) -> values


def read_peft_archive(path: PathLike) -> PeftArchive:
    """Read every member of a ``.peft.nnef.tgz``; raises ``T2NErrorInvalidArgument`` when
    the mapping file is missing or names a tensor the archive lacks."""
    mapping = None
    tensors = {}
    for name, data in _members(Path(path)):
        if name == PEFT_MAPPING_FILENAME:
            mapping = json.loads(data)
        elif name.endswith(".dat"):
            tensors[name[: -len(".dat")]] = _native.dat_decode(data).array()
    if mapping is None:
        raise T2NErrorInvalidArgument(f"{str(path)!r} has no {PEFT_MAPPING_FILENAME}: not a .peft.nnef.tgz")
    table = mapping["mapping_table"]
    absent = sorted({key for keys in table.values() for key in keys} - set(tensors))
    if absent:
        raise T2NErrorInvalidArgument(f"{str(path)!r}: {PEFT_MAPPING_FILENAME} names tensors it lacks: {absent}")
    return PeftArchive(method=mapping["method"], mapping_table=table, tensors=tensors)


def lora_merged_artefact(
    base_artefact: PathLike, adapter: PathLike | PeftArchive, scaling: float | Mapping[str, float]
) -> bytes:
    """The base artefact (directory, ``.tar`` or ``.tgz``) as an uncompressed tar in memory,
    each mapped weight replaced by ``W + scaling * B @ A`` (``scaling``: one number, or one
    per base weight when the adapter has per-module ranks or alphas), stored in W's encoding.

    Only LoRA on ``(out, in)`` weights (``nn.Linear``) is applied here. Raises
    ``T2NErrorMisuse`` when a mapped weight is not in the base or the shapes disagree,
    ``T2NErrorNotImplemented`` for other methods or non-float (e.g. Q4_0) base weights.
    """
    peft = adapter if isinstance(adapter, PeftArchive) else read_peft_archive(adapter)
    if peft.method.lower() != "lora" or any(len(keys) != 2 for keys in peft.mapping_table.values()):
        raise T2NErrorNotImplemented(
            f"only LoRA adapters (an A and a B per weight) can be merged here, not {peft.method!r}"
        )
    pending = {f"{base}.dat": base for base in peft.mapping_table}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in _members(Path(base_artefact)):
            base = pending.pop(name, None)
            if base is not None:
                factor = scaling[base] if isinstance(scaling, Mapping) else scaling
                data = _merged(base, data, peft, float(factor))
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if pending:
        raise T2NErrorMisuse(
            f"the adapter patches weights the base artefact {str(base_artefact)!r} lacks: {sorted(pending.values())}; "
            "was it exported with the right -m/--map-name?"
        )
    return out.getvalue()


def _merged(base: str, data: bytes, peft: PeftArchive, scaling: float) -> bytes:
    dat = _native.dat_decode(data)
    if dat.encoding not in _FLOAT_ENCODINGS:
        raise T2NErrorNotImplemented(
            f"base weight {base!r} is stored as {dat.encoding}: LoRA is merged into float weights only"
        )
    weight = dat.array()
    a, b = (peft.tensors[key] for key in peft.mapping_table[base])
    if a.ndim != 2 or b.ndim != 2 or weight.shape != (b.shape[0], a.shape[1]) or b.shape[1] != a.shape[0]:
        raise T2NErrorMisuse(
            f"LoRA of {base!r} does not fit: weight {list(weight.shape)}, A {list(a.shape)}, B {list(b.shape)} "
            "(expected A (r, in), B (out, r), weight (out, in))"
        )
    delta = (b.astype(np.float32) @ a.astype(np.float32)) * np.float32(scaling)
    merged = (weight.astype(np.float32) + delta).astype(weight.dtype)
    return _native.dat_encode(merged, dat.encoding)


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """``(member name, bytes)`` of an artefact directory, ``.tar`` or ``.tgz``, in stored order."""
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            yield file.relative_to(path).as_posix(), file.read_bytes()
        return
    with tarfile.open(path, mode="r:*") as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file always has one
                yield member.name.removeprefix("./"), handle.read()
