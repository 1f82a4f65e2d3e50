"""Signatures rendered with Rich tables (the caller passes its ``rich`` module: fastnnef does not
depend on Rich), or as plain text into a file."""

from __future__ import annotations

import importlib
import typing as T
from pathlib import Path
from types import ModuleType

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.remodeler.inspect_utils import (
    group_by_subnet,
    group_consecutive,
    input_changes,
    render_diffs_plain,
    render_groups_plain,
)
from fastnnef.remodeler.signature import SubnetSignature

# Below this console width the input and output tables are printed one under the other.
SIDE_BY_SIDE_WIDTH = 100


def _plain_lines(sigs: list[SubnetSignature], diff: bool, model_label: str | None) -> list[str]:
    lines = [f"Model: {model_label}"] if model_label else []
    for name, entries in group_by_subnet(sigs).items():
        groups = group_consecutive(sorted(entries, key=lambda e: e.stage.order))
        lines += render_groups_plain(name, groups)
        if diff and len(groups) >= 2:
            lines += render_diffs_plain(groups)
    return lines


def print_signatures_rich(
    sigs: list[SubnetSignature],
    *,
    to_path: Path | None = None,
    diff: bool = False,
    rich: ModuleType | None = None,
    model_label: str | None = None,
) -> None:
    """Print each subnet's signatures (and, with ``diff``, what changed between stages) with
    ``rich``; with ``to_path``, write the plain-text rendering there instead."""
    if to_path is not None:
        lines = _plain_lines(sigs, diff, model_label)
        to_path.parent.mkdir(parents=True, exist_ok=True)
        to_path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf8")
        return
    if rich is None:
        raise T2NErrorInvalidArgument("print_signatures_rich needs the rich module (rich=rich) or a to_path")
    table_cls: T.Any = importlib.import_module(f"{rich.__name__}.table").Table
    console: T.Any = importlib.import_module(f"{rich.__name__}.console").Console()
    columns_cls: T.Any = importlib.import_module(f"{rich.__name__}.columns").Columns
    esc: T.Callable[[str], str] = importlib.import_module(f"{rich.__name__}.markup").escape  # "[b, 6]" is no tag
    if model_label:
        console.rule(f"[bold]Model: {esc(model_label)}")
    for name, entries in group_by_subnet(sigs).items():
        groups = group_consecutive(sorted(entries, key=lambda e: e.stage.order))
        console.print(f"[bold]Subnet: {esc(name)}")
        for stages, rep in groups:
            tin = table_cls("Input", "Shape", "Dtype", "Notes", title=", ".join(s.value for s in stages))
            for i in rep.inputs:
                shape = f"[{', '.join(map(str, i.shape))}]"
                tin.add_row(*map(esc, (i.name, shape, i.dtype or "", " ".join(i.notes or []))))
            tout = table_cls("Output")
            for o in rep.outputs:
                tout.add_row(esc(o.name))
            if console.size.width >= SIDE_BY_SIDE_WIDTH:
                console.print(columns_cls([tin, tout], padding=1))
            else:
                console.print(tin)
                console.print(tout)
        for (stages_a, a), (stages_b, b) in zip(groups, groups[1:]) if diff else ():
            left, right = ",".join(s.value for s in stages_a), ",".join(s.value for s in stages_b)
            td = table_cls("Input", left, "", right, title=f"Diff: {left} -> {right}")
            for input_name, x, y in input_changes(a, b):
                td.add_row(esc(input_name), esc(x), "->", esc(y))
            console.print(td)
