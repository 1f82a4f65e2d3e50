"""Which tensors of an adapter file are PEFT matrices, and which base weight each adapts.

Conventions are torch_to_nnef_llm's (``peft/cli.py``): one regex per matrix kind (LoRA: A
then B), each with a ``(?P<name>...)`` group; the base weight a group adapts is
``map_name.format(name=...)`` (its name in the original model, i.e. in the base artefact)
and ``check_map_name.format(name=...)`` is the base weight that must also be in the file
(its name in the PEFT-wrapped model). ``peft_mapping.json`` holds
``{"method": ..., "mapping_table": {base weight: [one tensor per pattern, in pattern order]}}``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorMisuse

NAME_PLACEHOLDER = "(?P<name>.*)"
DEFAULT_METHOD_TYPE = "LoRA"
# Keys of a PeftModel's state_dict() (adapter "default"), as torch.save writes them.
PATTERN_LORA = [
    f"{NAME_PLACEHOLDER}.lora_A.default.weight$",
    f"{NAME_PLACEHOLDER}.lora_B.default.weight$",
]
MAP_TENSOR_NAME = "{name}.weight"
CHECK_MAP_TENSOR_NAME = "{name}.base_layer.weight"
PEFT_MAPPING_FILENAME = "peft_mapping.json"

# Patterns for the adapter_model.safetensors / .bin that PeftModel.save_pretrained writes
# (adapter name dropped, no base weights): the hint of the "nothing matched" error.
SAVE_PRETRAINED_HINT = (
    "-p 'base_model\\.model\\.(?P<name>.*)\\.lora_A\\.weight$' 'base_model\\.model\\.(?P<name>.*)\\.lora_B\\.weight$' "
    "-c ''"
)


@dataclass(frozen=True)
class PeftMapping:
    """The adapter tensors to write and the table of ``peft_mapping.json``."""

    method: str
    mapping_table: dict[str, list[str]]  # base weight -> adapter tensors, in pattern order
    check_names: dict[str, str]  # base weight -> the tensor of the file that must exist ("" : none)

    def tensor_keys(self) -> list[str]:
        return [key for keys in self.mapping_table.values() for key in keys]

    def as_json_dict(self) -> dict[str, object]:
        return {"method": self.method, "mapping_table": self.mapping_table}


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Each pattern compiled; each must have a ``name`` group (e.g. ``(?P<name>.*)``)."""
    if isinstance(patterns, str) or not patterns:
        raise T2NErrorInvalidArgument(f"patterns must be a non-empty list of regexes, got {patterns!r}")
    compiled = []
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise T2NErrorInvalidArgument(f"pattern {pattern!r} is not a valid regex: {err}") from None
        if "name" not in regex.groupindex:
            raise T2NErrorInvalidArgument(
                f"pattern {pattern!r} has no {NAME_PLACEHOLDER} group naming the base weight it adapts"
            )
        compiled.append(regex)
    if len({r.pattern for r in compiled}) != len(compiled):
        raise T2NErrorInvalidArgument(f"patterns repeat: {list(patterns)}")
    return compiled


def check_name_template(option: str, template: str) -> None:
    """``template`` must use ``{name}`` and no other field (``str.format`` syntax)."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as err:
        raise T2NErrorInvalidArgument(f"{option} {template!r} is not a valid format string: {err}") from None
    if fields != {"name"}:
        raise T2NErrorInvalidArgument(
            f"{option} {template!r} must contain {{name}} (the pattern's name group) and no other field"
        )


def plan_mapping(
    keys: Iterable[str],
    patterns: Sequence[str],
    map_name: str,
    check_map_name: str | None,
    method: str,
) -> PeftMapping:
    """Match ``keys`` (the tensor names of the file, in file order) against ``patterns``.

    A key belongs to the first pattern that matches at its start (``re.match``), as the
    reference's filter does. Every base weight must have exactly one tensor per pattern.
    Raises ``T2NErrorMisuse`` when nothing matches or a group is incomplete or ambiguous.
    """
    compiled = compile_patterns(patterns)
    check_name_template("map_name", map_name)
    if check_map_name:
        check_name_template("check_map_name", check_map_name)
    keys = list(keys)
    groups: dict[str, list[str | None]] = {}  # captured name -> one key per pattern
    for key in keys:
        for index, regex in enumerate(compiled):
            match = regex.match(key)
            if match is None:
                continue
            slot = groups.setdefault(match.group("name"), [None] * len(compiled))
            if slot[index] is not None:
                raise T2NErrorMisuse(
                    f"pattern {regex.pattern!r} gives the name {match.group('name')!r} to two tensors, "
                    f"{slot[index]!r} and {key!r} (several adapters in one file?): make the pattern select one"
                )
            slot[index] = key
            break
    if not groups:
        shown = ", ".join(repr(k) for k in keys[:6]) + (", ..." if len(keys) > 6 else "")
        raise T2NErrorMisuse(
            f"no tensor of the file matches the patterns {list(patterns)} (its tensors: {shown or 'none'}). "
            f"For an adapter saved by PeftModel.save_pretrained, use {SAVE_PRETRAINED_HINT}"
        )
    incomplete = {
        name: [compiled[i].pattern for i, key in enumerate(slot) if key is None]
        for name, slot in groups.items() if None in slot
    }
    if incomplete:
        listed = "; ".join(f"{name!r} lacks {missing}" for name, missing in sorted(incomplete.items()))
        n_found = sum(key is not None for slot in groups.values() for key in slot)
        raise T2NErrorMisuse(
            f"found {n_found} PEFT matrices, but each adapted weight needs one per pattern ({len(compiled)}): "
            f"{listed}. Is the file complete, and do the patterns cover every matrix kind?"
        )
    table = {map_name.format(name=name): [k for k in slot if k is not None] for name, slot in groups.items()}
    checks = {map_name.format(name=name): (check_map_name.format(name=name) if check_map_name else "")
              for name in groups}
    return PeftMapping(method=method, mapping_table=table, check_names=checks)


def missing_check_tensors(mapping: PeftMapping, file_keys: Iterable[str]) -> list[str]:
    """The ``check_map_name`` tensors the file lacks, sorted."""
    present = set(file_keys)
    return sorted(name for name in mapping.check_names.values() if name and name not in present)
