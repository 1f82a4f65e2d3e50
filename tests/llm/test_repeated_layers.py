"""Alike decoder layers captured once (fx_graph/repeats.py, ``KVCacheLM.repeat_plan``):
families with enough layers to repeat some, exported by ``dump_llm`` (every test bundle
run in tract, 16 greedy tokens equal to ``generate``), their artefacts byte for byte the
ones a capture layer by layer gives; a family whose layers compute by their index
(GPT-2's attention scaled by depth) is captured layer by layer."""

from __future__ import annotations

import hashlib
import logging
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from fastnnef.llm import dump_llm
from fastnnef.llm.wrapper import KVCacheLM
from tests import helpers
from tests.llm.tiny import CONFIGS

pytestmark = pytest.mark.skipif(helpers.FRONT_END == "jit", reason="torch.export's capture only")


def _deeper(name: str, layers: int, **extra: Any) -> Any:
    """The tiny config ``name`` with ``layers`` layers, its layer-type pattern repeated."""
    config = CONFIGS[name]()
    for attribute in ("num_hidden_layers", "n_layer"):
        if hasattr(config, attribute):
            before = getattr(config, attribute)
            setattr(config, attribute, layers)
    types = getattr(config, "layer_types", None)
    if isinstance(types, list) and len(types) == before:
        config.layer_types = [types[i % before] for i in range(layers)]
    for key, value in extra.items():
        setattr(config, key, value)
    return config


def _checkpoint(config: Any, directory: Path) -> Path:
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().save_pretrained(directory)
    return directory


def _members(export_dir: Path) -> dict[str, str]:
    (path,) = export_dir.rglob("*.nnef.tgz")
    with tarfile.open(path) as archive:
        return {m.name: hashlib.sha256(archive.extractfile(m).read()).hexdigest()  # type: ignore[union-attr]
                for m in archive.getmembers() if m.isfile()}


def _verified(checkpoint: Path, out: Path) -> None:
    report = dump_llm(out, local_dir=checkpoint, front_end=helpers.FRONT_END)
    assert all(c.ok for c in report.bundle_checks), report.summary()
    generation = report.generation
    assert generation is not None and generation.tract_tokens == generation.torch_tokens, generation.summary()


def _layer_by_layer(checkpoint: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    with monkeypatch.context() as patch:
        patch.setattr(KVCacheLM, "repeat_plan", lambda _self: None)
        dump_llm(out, local_dir=checkpoint, no_verify=True, front_end=helpers.FRONT_END)
    return _members(out)


# family -> (layers, how many are repeats): a group of n alike layers repeats n - 3
# (its first, second and last are captured and compared); Gemma 2 alternates sliding and
# full layers (two groups of 4), DeepSeek V3's first layer is dense (5 MoE layers);
# Mixtral's experts are one module kept whole per layer (tract_moe_ffn), copied as each
# layer's own.
FAMILIES = {"llama": (6, 3), "gpt2": (6, 3), "gemma2": (8, 2), "bloom": (6, 3), "deepseek_v3": (6, 2),
            "mixtral": (6, 3)}
# Families whose layers each compute a constant of their own (DeepSeek's router: an arange
# of its experts), which the repeats share with the second layer: fewer constants, so
# the others' labels (``.c<n>``) are numbered otherwise; the weights are the same files.
SHARED_CONSTANTS = {"deepseek_v3"}
_CONSTANT = re.compile(r"\.c\d+\.dat$")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_alike_layers_captured_once_give_the_same_artefact(
        family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    layers, repeated = FAMILIES[family]
    checkpoint = _checkpoint(_deeper(family, layers), tmp_path / "checkpoint")
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        _verified(checkpoint, tmp_path / "once")
    assert f"{repeated} alike layers captured once" in caplog.text
    once, by_layer = _members(tmp_path / "once"), _layer_by_layer(checkpoint, tmp_path / "by_layer", monkeypatch)
    if family in SHARED_CONSTANTS:
        weights = {name for name in once if name.endswith(".dat") and not _CONSTANT.search(name)}
        assert weights and {n: once[n] for n in weights} == {n: by_layer.get(n) for n in weights}
        assert len(once) < len(by_layer)
    else:
        assert once == by_layer


def test_layers_that_compute_by_their_index_are_captured_layer_by_layer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """GPT-2's ``scale_attn_by_inverse_layer_idx`` divides each layer's attention scores by
    its index + 1, a scale each layer keeps as an attribute: the layers are not alike, so
    each is captured (tests/fx_graph/test_repeats.py: layers that differ only in what
    their forward does with their index are found by the comparison)."""
    checkpoint = _checkpoint(_deeper("gpt2", 6, scale_attn_by_inverse_layer_idx=True), tmp_path / "checkpoint")
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        _verified(checkpoint, tmp_path / "once")
    assert "alike layers" not in caplog.text
