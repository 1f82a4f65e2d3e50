"""Signatures shown for inspection: grouped by stage, diffed, as JSON, with Rich or as text."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import rich

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.remodeler import IODescriptor, Stage, SubnetSignature
from fastnnef.remodeler.inspect_utils import group_by_subnet, group_consecutive, render_diffs_plain, render_groups_plain
from fastnnef.remodeler.rich_render import print_signatures_rich
from fastnnef.remodeler.serialize import signatures_to_json_payload, write_signatures_json

RAW_INPUTS = [IODescriptor("audio_signal", ["B", 6, "T"], "float32"), IODescriptor("length", ["B"], "int64")]
OUTPUTS = [IODescriptor("pooled", ["B", 5])]


def snapshots() -> list[SubnetSignature]:
    raw = {"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}}
    return [
        SubnetSignature("encoder", Stage.FINAL, [IODescriptor("audio_signal", [6, "S"], "float32", ["collapsed"])],
                        OUTPUTS, {"audio_signal": {1: "S"}}, ["collapse", "bind"]),
        SubnetSignature("encoder", Stage.RAW, RAW_INPUTS, OUTPUTS, raw),
        SubnetSignature("encoder", Stage.COLLAPSED, RAW_INPUTS, OUTPUTS, raw),
        SubnetSignature("joint", Stage.RAW, [IODescriptor("f", ["B", 5])], [IODescriptor("logits", ["B", 9])]),
    ]


PLAIN = [
    "Subnet: encoder",
    "  Stages: raw, collapsed",
    "    Inputs:",
    "      - audio_signal: [B, 6, T] (float32)",
    "      - length: [B] (int64)",
    "    Outputs:",
    "      - pooled",
    "  Stages: final",
    "    Inputs:",
    "      - audio_signal: [6, S] (float32) [collapsed]",
    "    Outputs:",
    "      - pooled",
]
DIFF = [
    "  Diff: raw,collapsed -> final",
    "    - audio_signal: ['B', 6, 'T'] -> [6, 'S']",
    "    - length: present -> removed",
]


def test_groups_and_plain_text() -> None:
    per = group_by_subnet(snapshots())
    assert list(per) == ["encoder", "joint"]
    groups = group_consecutive(sorted(per["encoder"], key=lambda s: s.stage.order))
    assert [stages for stages, _ in groups] == [[Stage.RAW, Stage.COLLAPSED], [Stage.FINAL]]
    assert render_groups_plain("encoder", groups) == PLAIN
    assert render_diffs_plain(groups) == DIFF


def test_json(tmp_path: Path) -> None:
    payload = signatures_to_json_payload(snapshots(), model_label="asr")
    assert payload["model"] == "asr"
    first = payload["subnets"][0]
    assert first["stage"] == "final" and first["applied_flags"] == ["collapse", "bind"]
    assert first["inputs"] == [
        {"name": "audio_signal", "shape": ["6", "S"], "dtype": "float32", "notes": ["collapsed"]}
    ]
    stream = io.StringIO()
    write_signatures_json(snapshots(), stream=stream, model_label="asr", indent=1)
    out = tmp_path / "sub" / "sigs.json"
    write_signatures_json(snapshots(), to_path=out, model_label="asr")
    # JSON object keys are strings: the axes come back as "1"
    assert json.loads(stream.getvalue())["subnets"][0]["symbol_axes"] == {"audio_signal": {"1": "S"}}
    assert json.loads(out.read_text()) == json.loads(stream.getvalue())


def test_rich_and_text_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    print_signatures_rich(snapshots(), diff=True, rich=rich, model_label="asr")
    shown = capsys.readouterr().out
    for part in ("Model: asr", "Subnet: encoder", "audio_signal", "[B, 6, T]", "[6, S]", "Diff: raw,collapsed -> final",
                 "removed", "Subnet: joint", "logits"):
        assert part in shown, part
    out = tmp_path / "sigs.txt"
    print_signatures_rich(snapshots(), to_path=out, diff=True, model_label="asr")
    lines = out.read_text().splitlines()
    assert lines[0] == "Model: asr"
    assert lines[1: 1 + len(PLAIN) + len(DIFF)] == PLAIN + DIFF
    with pytest.raises(T2NErrorInvalidArgument, match="needs the rich module"):
        print_signatures_rich(snapshots())
