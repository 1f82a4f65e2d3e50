"""Signatures grouped for display: by subnet, consecutive stages with equal IO merged, and the
plain-text rendering of each group and of the changes between groups."""

from __future__ import annotations

from fastnnef.remodeler.signature import IODescriptor, Stage, SubnetSignature

StageGroup = tuple[list[Stage], SubnetSignature]


def group_by_subnet(snapshots: list[SubnetSignature]) -> dict[str, list[SubnetSignature]]:
    """The snapshots of each subnet, in the order given."""
    per: dict[str, list[SubnetSignature]] = {}
    for s in snapshots:
        per.setdefault(s.name, []).append(s)
    return per


def _io_key(ios: list[IODescriptor]) -> tuple:
    return tuple((io.name, tuple(map(str, io.shape)), io.dtype or "", tuple(io.notes or [])) for io in ios)


def _sig_key(sig: SubnetSignature) -> tuple:
    return _io_key(sig.inputs), _io_key(sig.outputs)


def group_consecutive(entries: list[SubnetSignature]) -> list[StageGroup]:
    """Consecutive snapshots with the same IO merged: ``[(stages, representative)]``."""
    groups: list[StageGroup] = []
    for e in entries:
        if groups and _sig_key(groups[-1][1]) == _sig_key(e):
            groups[-1][0].append(e.stage)
        else:
            groups.append(([e.stage], e))
    return groups


def _stages(stages: list[Stage], sep: str = ", ") -> str:
    return sep.join(s.value for s in stages)


def render_groups_plain(subnet_name: str, groups: list[StageGroup]) -> list[str]:
    """One subnet's groups as text lines: stages, then each input (shape, dtype, notes) and output."""
    lines = [f"Subnet: {subnet_name}"]
    for stages, rep in groups:
        lines += [f"  Stages: {_stages(stages)}", "    Inputs:"]
        for i in rep.inputs:
            shape = f" [{', '.join(map(str, i.shape))}]" if i.shape else ""
            dtype = f" ({i.dtype})" if i.dtype else ""
            notes = f" [{' '.join(i.notes)}]" if i.notes else ""
            lines.append(f"      - {i.name}:{shape}{dtype}{notes}")
        lines.append("    Outputs:")
        lines += [f"      - {o.name}" for o in rep.outputs]
    return lines


def input_changes(a: SubnetSignature, b: SubnetSignature) -> list[tuple[str, str, str]]:
    """``(input, before, after)`` for each input that changed, appeared or left from ``a`` to ``b``."""
    before, after = {i.name: i for i in a.inputs}, {i.name: i for i in b.inputs}
    changes = []
    for name in sorted(before.keys() | after.keys()):
        x, y = before.get(name), after.get(name)
        if x is None:
            changes.append((name, "absent", "present"))
        elif y is None:
            changes.append((name, "present", "removed"))
        elif _io_key([x]) != _io_key([y]):
            changes.append((name, str(x.shape), str(y.shape)))
    return changes


def render_diffs_plain(groups: list[StageGroup]) -> list[str]:
    """The input changes between successive groups, as text lines."""
    lines = []
    for (stages_a, a), (stages_b, b) in zip(groups, groups[1:]):
        lines.append(f"  Diff: {_stages(stages_a, ',')} -> {_stages(stages_b, ',')}")
        lines += [f"    - {name}: {x} -> {y}" for name, x, y in input_changes(a, b)]
    return lines
