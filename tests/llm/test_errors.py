"""Bad input: a clear fastnnef error naming the problem and the fix, raised before the
export directory exists (or with an existing one untouched), and no staging left."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from fastnnef.exceptions import (
    T2NError,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.llm import dump_llm


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
           r"model\.layers\.0\.self_attn\.k_proj\.weight is \[8, 32\] in model\.safetensors, the config needs \[16, 32\]",
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


def test_unsupported_architecture_lists_the_supported_ones(tmp_path: Path) -> None:
    import transformers

    directory = tmp_path / "opt"
    config = transformers.OPTConfig(num_hidden_layers=1, hidden_size=16, ffn_dim=32, num_attention_heads=2,
                                    vocab_size=64, max_position_embeddings=64, word_embed_proj_dim=16)
    transformers.OPTForCausalLM(config).save_pretrained(directory)
    _fails(tmp_path, T2NErrorNotImplemented, r"model_type 'opt' is not supported by the LLM exporter; supported: "
           r"gemma, gemma2, gpt2, gpt_neox, llama, mistral, mixtral, phi, phi3, qwen2, qwen2_moe, qwen3\.",
           local_dir=directory)


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
