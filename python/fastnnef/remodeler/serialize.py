"""Signatures as JSON (``--inspect-format json``): a model label and each subnet's stage, IO,
flags and dynamic axes."""

from __future__ import annotations

import json
import typing as T
from pathlib import Path

from fastnnef.remodeler.signature import IODescriptor, SubnetSignature


def _io(io: IODescriptor) -> dict[str, T.Any]:
    return {"name": io.name, "shape": [str(d) for d in io.shape], "dtype": io.dtype, "notes": list(io.notes or [])}


def signatures_to_json_payload(sigs: list[SubnetSignature], *, model_label: str | None = None) -> dict[str, T.Any]:
    """The JSON-ready mapping of ``sigs``."""
    return {
        "model": model_label,
        "subnets": [
            {
                "name": s.name,
                "stage": s.stage.value,
                "inputs": [_io(i) for i in s.inputs],
                "outputs": [_io(o) for o in s.outputs],
                "applied_flags": list(s.applied_flags),
                "symbol_axes": {
                    k: {int(a): str(sym) for a, sym in v.items()} for k, v in (s.symbol_axes or {}).items()
                },
            }
            for s in sigs
        ],
    }


def signatures_to_json_text(sigs: list[SubnetSignature], *, model_label: str | None = None, indent: int = 2) -> str:
    """``sigs`` as JSON text."""
    return json.dumps(signatures_to_json_payload(sigs, model_label=model_label), indent=indent)


def write_signatures_json(
    sigs: list[SubnetSignature],
    *,
    to_path: Path | None = None,
    stream: T.TextIO | None = None,
    model_label: str | None = None,
    indent: int = 2,
) -> None:
    """Write ``sigs`` as JSON to ``stream``, else to the file ``to_path``, else to stdout."""
    text = signatures_to_json_text(sigs, model_label=model_label, indent=indent) + "\n"
    if stream is not None:
        stream.write(text)
    elif to_path is not None:
        to_path.parent.mkdir(parents=True, exist_ok=True)
        to_path.write_text(text, encoding="utf8")
    else:
        print(text, end="")
