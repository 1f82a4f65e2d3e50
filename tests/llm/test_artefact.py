"""The artefact follows torch_to_nnef_llm's conventions, so tract's LLM tooling reads ours:
IO names and order, dtypes and symbolic shapes, the header's symbols and assertions in
the reference's order, the deep and flat layouts, modes.json, the tests/ bundles and
the metadata properties."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fastnnef.check import TractArtefact
from fastnnef.llm import dump_llm

HEADER = """extension tract_registry tract_core;
extension tract_symbol S;
extension tract_symbol P;
extension tract_assert P >= 0;
extension tract_assert S >= 1;
extension tract_assert S+P < 64;
extension tract_assert tg: S==1;
extension tract_assert pp: P==0;
"""
INPUTS = ["input_ids", "in_cache_key_0", "in_cache_value_0", "in_cache_key_1", "in_cache_value_1"]
OUTPUTS = ["outputs", "out_cache_key_0", "out_cache_value_0", "out_cache_key_1", "out_cache_value_1"]
BUNDLES = [f"tests/{m}_{io}.npz" for m in ("export", "prompt", "prompt_with_past", "text_generation")
           for io in ("inputs", "outputs")]


def _graph_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        member = tar.extractfile("graph.nnef")
        assert member is not None
        return member.read().decode()


@pytest.fixture(scope="module")
def deep(checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> object:
    out = tmp_path_factory.mktemp("deep") / "llama"
    return dump_llm(out, local_dir=checkpoint("llama", tokenizer=True), dump_with_tokenizer_and_conf=True)


def test_deep_layout(deep: object) -> None:
    root = deep.export_dir  # type: ignore[attr-defined]
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == sorted([
        "model/model.nnef.tgz", "model/config.json", "modes.json", *BUNDLES,
        "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
    ])
    assert deep.files == files  # type: ignore[attr-defined]
    assert json.loads((root / "modes.json").read_text()) == {
        "pytorch_supported_modes": ["prompt", "prompt_with_past", "text_generation"]
    }
    assert json.loads((root / "model/config.json").read_text())["model_type"] == "llama"
    assert not list(root.parent.glob(".llama.tmp-*"))  # no staging directory left


def test_io_names_shapes_and_header(deep: object) -> None:
    path = deep.model_path  # type: ignore[attr-defined]
    artefact = TractArtefact.load(path)
    assert artefact.input_names == INPUTS
    assert artefact.output_names == OUTPUTS
    assert artefact.input_facts == [("i64", [1, "S"])] + [("f32", [1, 2, "P", 8])] * 4
    text = _graph_text(path)
    assert text.startswith("version 1.0;\n\n" + HEADER)
    assert "input_ids = tract_core_external(shape = [1, S], datum_type = 'i64');" in text
    assert "in_cache_key_0 = tract_core_external(shape = [1, 2, P, 8], datum_type = 'f32');" in text


def test_properties(deep: object, checkpoint: Callable[..., Path]) -> None:
    props = TractArtefact.load(deep.model_path).properties  # type: ignore[attr-defined]
    # Whatever the directory (this one is under the system temp directory): no special case.
    assert props["name_or_path"] == str(checkpoint("llama", tokenizer=True))
    assert props["hf_model_type"] == "llama"
    assert props["n_parameters"] == str(deep.n_parameters)  # type: ignore[attr-defined]
    assert props["main_base_weight_dtype"] == "f32"
    assert props["forced_module_dtype"] == ""
    assert props["as_float16"] == "0"
    assert props["inputs_dtype"] == "f32"
    assert "compression_method" not in props
    assert "hostname" not in props  # reproducible artefacts: no identity


def test_bundles_have_the_graph_names_and_the_mode_shapes(deep: object) -> None:
    root = deep.export_dir  # type: ignore[attr-defined]
    expected_sizes = {"export": (5, 6), "prompt": (6, 0), "prompt_with_past": (3, 3), "text_generation": (1, 5)}
    for mode, (new, past) in expected_sizes.items():
        with np.load(root / f"tests/{mode}_inputs.npz") as inputs, np.load(root / f"tests/{mode}_outputs.npz") as outs:
            assert list(inputs.files) == INPUTS and list(outs.files) == OUTPUTS
            assert inputs["input_ids"].dtype == np.int64 and inputs["input_ids"].shape == (1, new)
            assert inputs["in_cache_key_0"].dtype == np.float32 and inputs["in_cache_key_0"].shape == (1, 2, past, 8)
            assert outs["outputs"].shape == (1, 1, 128)
            assert outs["out_cache_value_1"].shape == (1, 2, past + new, 8)
            # the output cache is the input cache followed by the new entries
            np.testing.assert_array_equal(outs["out_cache_key_0"][:, :, :past], inputs["in_cache_key_0"])


def test_modes_continue_the_sample_text(deep: object) -> None:
    """prompt_with_past and text_generation continue the prompt (tokens after their past)."""
    root = deep.export_dir  # type: ignore[attr-defined]
    prompt = np.load(root / "tests/prompt_inputs.npz")["input_ids"][0]
    assert list(np.load(root / "tests/prompt_with_past_inputs.npz")["input_ids"][0]) == list(prompt[3:])
    assert list(np.load(root / "tests/text_generation_inputs.npz")["input_ids"][0]) == list(prompt[5:])
    assert deep.generation.texts["prompt"].startswith("A lighthouse keeper")  # type: ignore[attr-defined]


def test_flat_layout(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "flat"
    report = dump_llm(out, local_dir=checkpoint("qwen2", tokenizer=True), export_dir_struct="flat",
                      dump_with_tokenizer_and_conf=True, no_verify=True, num_logits_to_keep=0)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(["model.nnef.tgz", "config.json", "modes.json", "tokenizer.json",
                            "tokenizer_config.json", *BUNDLES])
    assert report.model_path == out / "model.nnef.tgz"
    assert not report.verified and report.generation is None and report.bundle_checks == []
    # num_logits_to_keep=0: the logits of every position
    with np.load(out / "tests/prompt_outputs.npz") as outs:
        assert outs["outputs"].shape == (1, 6, 128)
    assert TractArtefact.load(report.model_path).output_facts[0] == ("f32", [1, "S", 128])
