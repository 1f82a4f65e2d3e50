"""exporter_run.py: the family-neutral phases of an exporter run. The LLM and multimodal
exporters' own tests run them end to end (tests/llm/test_errors.py: nothing left on error,
-iaed, a killed export's staging removed); these pin each phase on its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.exporter_run import check_destination, compressor, files_in, staged_export, timed, tract_target
from fastnnef.inference_target.tract import TractNNEF


def test_a_finished_export_is_moved_into_place(tmp_path: Path) -> None:
    target = tmp_path / "out" / "export"
    with staged_export(target) as staging:
        assert staging.parent == target.parent and staging.name.startswith(f".export.tmp-{os.getpid()}-")
        (staging / "sub").mkdir()
        (staging / "sub" / "a.txt").write_text("a")
        assert files_in(staging) == ["sub/a.txt"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["export"]
    assert (target / "sub" / "a.txt").read_text() == "a"


def test_into_an_existing_directory_files_are_replaced_and_others_kept(tmp_path: Path) -> None:
    target = tmp_path / "export"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    (target / "a.txt").write_text("old")
    with staged_export(check_destination(target, into_existing=True)) as staging:
        (staging / "a.txt").write_text("new")
    assert {p.name: p.read_text() for p in target.iterdir()} == {"keep.txt": "kept", "a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_an_error_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "export"
    with pytest.raises(KeyboardInterrupt), staged_export(target) as staging:
        (staging / "half.txt").write_text("half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_destination_checks(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    assert check_destination(tmp_path / "new", into_existing=False) == tmp_path / "new"
    with pytest.raises(T2NErrorInvalidArgument, match="already exists: choose another, or pass -iaed"):
        check_destination(tmp_path / "dir", into_existing=False)
    with pytest.raises(T2NErrorInvalidArgument, match="exists and is not a directory"):
        check_destination(tmp_path / "file", into_existing=True)


def test_compressor_and_target_choices() -> None:
    registry = "fastnnef.compress.DEFAULT_COMPRESSION"
    assert compressor(None, registry) is None
    assert callable(compressor("min_max_q4_0", registry))
    with pytest.raises(T2NErrorInvalidArgument, match="'q3' is not in .*available: .*min_max_q4_0"):
        compressor("q3", registry)
    assert tract_target(None, None) == (None, TractNNEF.latest_version())
    assert tract_target(None, "0.21.13")[1].to_str() == "0.21.13"
    with pytest.raises(T2NErrorInvalidArgument, match="exclude each other"):
        tract_target("/usr/bin/tract", "0.21.13")


def test_timed_adds_up() -> None:
    timings: dict[str, float] = {}
    for _ in range(2):
        with timed(timings, "phase"):
            pass
    assert list(timings) == ["phase"] and timings["phase"] >= 0.0
