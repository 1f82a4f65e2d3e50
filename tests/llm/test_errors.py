"""Bad input: a clear fastnnef error naming the problem and the fix, raised before the
export directory exists (or with an existing one untouched), and no staging left."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from fastnnef.exceptions import (
    T2NError,
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.llm import architectures, dump_llm
from tests.llm.tiny import REFUSED


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / "ckpt"))


def _rewrite_weights(directory: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    weights = load_file(directory / "model.safetensors")
    edit(weights)
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})


def _fails(tmp_path: Path, error: type, match: str, **kwargs: Any) -> None:
    out = tmp_path / "out" / "llm"
    with pytest.raises(error, match=match):
        dump_llm(out, **kwargs)
    assert not out.exists()
    assert not (out.parent.exists() and list(out.parent.iterdir()))  # no staging directory left


def test_no_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"")
    _fails(tmp_path, T2NErrorNotFoundFile, r"no config\.json in .*empty \(none found\): point -d at a Hugging Face "
           r"checkpoint directory", local_dir=tmp_path / "empty")


def test_missing_directory(tmp_path: Path) -> None:
    _fails(tmp_path, T2NErrorNotFoundFile, "checkpoint directory .*nowhere does not exist",
           local_dir=tmp_path / "nowhere")


def test_no_weights(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    (directory / "model.safetensors").unlink()
    _fails(tmp_path, T2NErrorNotFoundFile, r"no weights in .*ckpt: expected model\.safetensors", local_dir=directory)


def test_missing_weight(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    _rewrite_weights(directory, lambda w: w.pop("model.layers.1.mlp.up_proj.weight"))
    _fails(tmp_path, T2NErrorInvalidArgument, r"weights missing from .*ckpt for its config\.json: "
           r"model\.layers\.1\.mlp\.up_proj\.weight; they would be random", local_dir=directory)


def test_weight_of_the_wrong_shape(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    _rewrite_weights(directory, lambda w: w.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(8, 32)}))
    _fails(tmp_path, T2NErrorInvalidArgument, r"weights of .*ckpt do not fit its config\.json: "
           r"model\.layers\.0\.self_attn\.k_proj\.weight is \[8, 32\] in model\.safetensors, "
           r"the config needs \[16, 32\]",
           local_dir=directory)


def test_corrupt_shard(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    data = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(data[: len(data) // 2])
    _fails(tmp_path, T2NErrorInvalidArgument, r"checkpoint shard .*model\.safetensors is corrupt or truncated",
           local_dir=directory)


def test_shard_missing_from_a_sharded_checkpoint(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    weights = load_file(directory / "model.safetensors")
    names = sorted(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for shard, keys in shards.items():
        save_file({k: weights[k] for k in keys}, directory / shard, metadata={"format": "pt"})
    (directory / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    (directory / "model-00002-of-00002.safetensors").unlink()
    _fails(tmp_path, T2NErrorNotFoundFile, r"lists shards missing from .*ckpt: model-00002-of-00002\.safetensors; "
           "the checkpoint is incomplete", local_dir=directory)


def test_remote_code_is_not_run_unless_allowed(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _copy(checkpoint("llama"), tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "modeling_evil.py").write_text("raise SystemExit('remote code ran')\n")
    _fails(tmp_path, T2NErrorInvalidArgument, r"ships its own model code \(auto_map in config\.json: "
           r"\['AutoModelForCausalLM'\]\).*pass --trust-remote-code", local_dir=directory)


REFUSALS = {
    "deepseek_v32": r"layer 0 is a 'indexed_attention' layer: sparse attention layers \(DeepSeek sparse attention's "
                    r"lightning indexer\) keep indexer keys",
    "qwen3_next": r"its gated delta net has key heads of 8 and value heads of 16 dimensions; "
                  r"tract_transformers_gdn_recurrent needs them equal",
    "gemma4_text": r"use_bidirectional_attention='all' makes every token see the ones after it: the model is not a "
                   r"causal decoder",
    "recurrent_gemma": r"its recurrent layers \(RG-LRU: a gated linear recurrence whose input scale resets at "
                       r"position 0\) are not among the state-space layers the exporter lays out",
    "minimax": r"its linear_attention layers are lightning attention",
    "gemma3n_text": r"tract cannot load the exported graph: its optimizer fails on the matrix product of the "
                    r"per-layer input gate",
    "phimoe": r"its rotary embedding picks short_mscale=1\.0 or long_mscale=1\.2 "
              r"with a Python branch on the sequence length",
}


@pytest.mark.parametrize("model_type", sorted(REFUSALS))
def test_known_failures_are_refused_up_front(model_type: str, tmp_path: Path) -> None:
    """Refused from config.json alone, before any weight is read (there are none here)."""
    directory = tmp_path / model_type
    REFUSED[model_type]().save_pretrained(directory)
    _fails(tmp_path, T2NErrorNotImplemented, rf"model_type '{model_type}' cannot be exported by the LLM exporter: "
           rf"{REFUSALS[model_type]}.*Tested families: apertus, ", local_dir=directory)


def test_a_wrong_config_field_is_named(tmp_path: Path) -> None:
    import transformers

    directory = tmp_path / "llama"
    transformers.LlamaConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, vocab_size=64,
                             max_position_embeddings=0).save_pretrained(directory)
    _fails(tmp_path, T2NErrorInvalidArgument, r"config\.json of this llama model has max_position_embeddings=0; "
           r"a positive integer is needed", local_dir=directory)


def _untested(monkeypatch: pytest.MonkeyPatch, model_type: str) -> None:
    """``model_type`` as a family outside the tested table (an unknown one to the exporter)."""
    monkeypatch.setattr(architectures, "TESTED", {k: v for k, v in architectures.TESTED.items() if k != model_type})


def test_an_untested_family_is_attempted_and_verified(checkpoint: Callable[..., Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _untested(monkeypatch, "opt")
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("opt"))
    generation = report.generation
    assert report.model_type == "opt" and generation is not None
    assert generation.tract_tokens == generation.torch_tokens and all(c.ok for c in report.bundle_checks)


def test_an_untested_family_without_verification_is_a_warning(
    checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _untested(monkeypatch, "opt")
    with caplog.at_level(logging.WARNING, logger="fastnnef.llm"):
        dump_llm(tmp_path / "out", local_dir=checkpoint("opt"), no_verify=True)
    assert "model_type 'opt' is not among the tested families and was exported without verification (-nv)" \
        in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fastnnef.llm"):
        dump_llm(tmp_path / "tested", local_dir=checkpoint("llama"), no_verify=True)
    assert "not among the tested families" not in caplog.text


def test_a_family_failing_verification_names_the_divergence(
    checkpoint: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """phi3's generation re-processes the sequence when long-rope switches factors; an
    exporter unaware of it (phi3 as an untested family) gets other tokens from tract."""
    _untested(monkeypatch, "phi3")
    _fails(tmp_path, T2NErrorIOPytorchTractNotISO, r"greedy generation in tract differs from Hugging Face's for this "
           r"f32 phi3 model \(not a tested family\): at generated token \d+ of 16 \(after the 6-token prompt "
           r"\[[\d, ]+\] and \[[\d, ]*\]\), PyTorch picks token \d+ and tract \d+; teacher-forced agreement "
           r"[\d.]+%; layers: 2 full_attention \(Phi3DecoderLayer\)\. Nothing was written",
           local_dir=checkpoint("phi3-longrope"))


def test_existing_directory_is_left_alone(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(T2NErrorInvalidArgument, match=r"export directory .*out already exists: choose another, "
                       r"or pass -iaed"):
        dump_llm(out, local_dir=checkpoint("llama"))
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_existing_directory_with_iaed(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    report = dump_llm(out, local_dir=checkpoint("llama"), ignore_already_exist_dir=True, no_verify=True)
    assert (out / "mine.txt").read_text() == "keep me"
    assert report.model_path == out / "model" / "model.nnef.tgz" and report.model_path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # staging moved in, then removed


def test_a_killed_export_leaves_nothing_the_next_run_keeps(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """SIGKILL of a real export while it stages: nothing at the destination, and the next
    export to it removes the dead process's staging directory."""
    source, out = checkpoint("llama"), tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-m", "fastnnef.llm", "-d", str(source), "-e", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob(".out.tmp-*")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    child.kill()
    child.wait()
    staged = list(tmp_path.glob(".out.tmp-*"))
    assert len(staged) == 1 and staged[0].name.startswith(f".out.tmp-{child.pid}-")
    assert not out.exists()
    dump_llm(out, local_dir=source, no_verify=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("kwargs, match", [
    ({"sample_generation_total_size": 1}, r"sample_generation_total_size \(-sgts\) must be an int >= 2"),
    ({"sample_generation_total_size": 60}, r"the model handles positions below 64, but the export needs 76"),
    ({"num_logits_to_keep": -1}, r"num_logits_to_keep must be an int >= 0"),
    ({"force_module_dtype": "f8"}, r"force_module_dtype: 'f8' is not one of 'f32', 'f16', 'bf16'"),
    ({"compression_method": "zip"}, r"compression method 'zip' is not in fastnnef\.compress\.DEFAULT_COMPRESSION; "
                                    r"available: min_max_q4_0, "),
    ({"export_dir_struct": "tree"}, r"export_dir_struct: 'tree' is not one of 'deep', 'flat'"),
    ({"attn_implementation": "eager", "reify_sdpa_operator": True}, r"--reify-sdpa-operator needs sdpa attention"),
])
def test_bad_options(kwargs: dict[str, Any], match: str, checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    _fails(tmp_path, T2NError, match, local_dir=checkpoint("llama"), **kwargs)


def test_both_or_no_source(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    _fails(tmp_path, T2NErrorInvalidArgument, "give exactly one model source")
    _fails(tmp_path, T2NErrorInvalidArgument, "give exactly one model source", local_dir=checkpoint("llama"),
           model_slug="org/model")
