"""``fastnnef inspect``: what an artefact holds: IO, op histogram, tensors, properties."""

from __future__ import annotations

import argparse
import collections
import re
import struct
import tarfile
from collections.abc import Iterator
from pathlib import Path

from fastnnef.exceptions import T2NErrorNotFoundFile

_OP = re.compile(r"=\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:<[^>]*>)?\s*\(")
_DTYPE_OF_CODE = {0: "f", 1: "u", 2: "qu", 3: "qi", 4: "i", 5: "bool"}
_VENDOR = {(0x5452, 0x3040): "q4_0", (0x5452, 0x2040): "q4_0_legacy"}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("inspect", help="describe an NNEF artefact (dir, .tar, .tgz)")
    p.add_argument("artefact", type=Path)
    p.add_argument("--tensors", action="store_true", help="list every tensor, not only totals")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print(describe_artefact(args.artefact, list_tensors=args.tensors))
    return 0


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, first bytes) of graph files and .dat headers, without extracting anything."""
    if not path.exists():
        raise T2NErrorNotFoundFile(f"no artefact at {path}")
    if path.is_dir():
        for f in sorted(path.rglob("*")):
            if f.is_file():
                name = f.relative_to(path).as_posix()
                with f.open("rb") as fh:
                    yield name, fh.read() if not name.endswith(".dat") else fh.read(128)
        return
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            if member.isfile():
                member_file = tar.extractfile(member)
                assert member_file is not None
                data = member_file.read() if not member.name.endswith(".dat") else member_file.read(128)
                yield member.name, data


def _dat_header(head: bytes) -> tuple[str, list[int], int]:
    """(dtype, shape, payload bytes) from a 128-byte .dat header (nnef-format §1.1)."""
    length, rank = struct.unpack_from("<II", head, 4)
    dims = list(struct.unpack_from("<8I", head, 12))[:rank]
    bits, code, vendor = struct.unpack_from("<IHH", head, 0x2C)
    dtype = _VENDOR.get((vendor, code)) or f"{_DTYPE_OF_CODE.get(code, '?')}{bits if code != 5 else ''}"
    return dtype, dims, length


def describe_artefact(path: Path, list_tensors: bool = False) -> str:
    from fastnnef.check import TractArtefact

    lines = [f"artefact {path} ({_size(path)})"]
    tensors: list[tuple[str, str, list[int], int]] = []
    ops: collections.Counter[str] = collections.Counter()
    for name, data in _members(Path(path)):
        if name.endswith(".dat"):
            tensors.append((name[:-4], *_dat_header(data)))
        elif name == "graph.nnef":
            body = data.decode().split("graph ", 1)[-1]
            ops.update(_OP.findall(body))
    art = TractArtefact.load(path, optimize=False)
    for label, names, facts in (("inputs", art.input_names, art.input_facts),
                                ("outputs", art.output_names, art.output_facts)):
        lines.append(f"{label}:")
        for n, (dtype, dims) in zip(names, facts):
            lines.append(f"  {n}: {dtype}[{', '.join(str(d) for d in dims)}]")
    lines.append("ops: " + ", ".join(f"{k}×{v}" for k, v in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))))
    total = sum(t[3] for t in tensors)
    by_dtype = collections.Counter(t[1] for t in tensors)
    lines.append(f"tensors: {len(tensors)} ({_human(total)}), "
                 + ", ".join(f"{k}×{v}" for k, v in sorted(by_dtype.items())))
    if list_tensors:
        for label, dtype, shape, size in tensors:
            lines.append(f"  {label}: {dtype}{shape} {_human(size)}")
    props = art.properties
    if props:
        lines.append("properties:")
        lines.extend(f"  {k} = {v}" for k, v in props.items())
    return "\n".join(lines)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _size(path: Path) -> str:
    p = Path(path)
    if p.is_dir():
        return _human(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()))
    return _human(p.stat().st_size)
