"""LLMExportOptions (llm/options.py): the keywords dump_llm and dump_multimodal share,
checked once; both exporters build it from their own public keywords."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.llm import dump_llm
from fastnnef.llm.options import DtypeStr, ExportDirStruct, LLMExportOptions
from fastnnef.multimodal import dump_multimodal


def _keywords(function: Any) -> dict[str, Any]:
    return {n: p.default for n, p in inspect.signature(function).parameters.items() if n != "export_dirpath"}


def test_every_keyword_of_both_exporters_is_an_option_and_no_other():
    built = set(inspect.signature(LLMExportOptions.build).parameters) - {"export_dirpath"}
    assert set(_keywords(dump_llm)) == built
    assert set(_keywords(dump_multimodal)) == built - {"sample_generation_total_size", "export_dir_struct"}


def test_checked_once_and_frozen(tmp_path: Path):
    options = LLMExportOptions.build(export_dirpath=tmp_path / "out", **{
        **_keywords(dump_llm), "force_module_dtype": "f16", "export_dir_struct": "flat",
        "compression_method": "min_max_q4_0",
    })
    assert (options.target, options.dtype, options.struct) == (tmp_path / "out", DtypeStr.FLOAT16, ExportDirStruct.FLAT)
    assert options.attn == "eager" and options.tolerance == "approximate" and callable(options.compress)
    assert not options.exact("f32")  # compressed: greedy tokens may differ
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.no_verify = True  # type: ignore[misc]


@pytest.mark.parametrize("change, message", [
    ({"force_module_dtype": "f8"}, "force_module_dtype: 'f8' is not one of"),
    ({"naming_scheme": "short"}, "naming_scheme: 'short' is not one of"),
    ({"reify_sdpa_operator": True, "attn_implementation": "eager"}, "--reify-sdpa-operator needs sdpa"),
    ({"num_logits_to_keep": -1}, "num_logits_to_keep must be an int >= 0"),
])
def test_multimodal_keywords_are_checked_as_the_llm_ones(tmp_path: Path, change: dict[str, Any], message: str):
    with pytest.raises(T2NErrorInvalidArgument, match=message):
        dump_multimodal(tmp_path / "out", local_dir=tmp_path, **change)
    assert list(tmp_path.iterdir()) == []
