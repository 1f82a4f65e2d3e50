"""Safetensors checkpoints are streamed: the model is built on the meta device and every
parameter is an OffloadedTensor of the checkpoint, so exports never hold the weights in
memory. Tract's greedy tokens are compared with those of Hugging Face's own
``from_pretrained`` model (not the streamed one, which would share a binding mistake),
and an export with ``-nv`` runs in a process whose address space cannot hold the weights."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.llm import dump_llm
from fastnnef.llm.bundles import Bundle
from fastnnef.llm.load import load_checkpoint
from fastnnef.llm.verify import check_bundle, torch_generate
from fastnnef.tensor.offload import ComposedOffloadedTensor, OffloadedTensor, open_checkpoint
from fastnnef.tensor.quant import fp_to_tract_q4_0_with_min_max_calibration
from tests.llm.tiny import build

ROOT = Path(__file__).resolve().parents[2]


def _hf_model(directory: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()


def _sharded(name: str, directory: Path) -> Path:
    """The tiny model saved in several shards with their index, as large checkpoints are."""
    build(name).save_pretrained(directory, max_shard_size="40KB")
    assert (directory / "model.safetensors.index.json").is_file()
    assert len(list(directory.glob("model-*.safetensors"))) > 1
    return directory


@pytest.mark.parametrize("name, sharded", [("llama", False), ("llama", True), ("qwen2", True), ("gpt2", False),
                                          ("gemma", False), ("mixtral", False), ("mixtral", True),
                                          ("qwen2_moe", True)])
def test_streamed_export_generates_as_hugging_face(name: str, sharded: bool, checkpoint: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    directory = _sharded(name, tmp_path / "ckpt") if sharded else checkpoint(name)
    loaded = load_checkpoint(directory, None, "eager", trust_remote_code=False)
    assert loaded.streamed
    params = dict(loaded.model.named_parameters(remove_duplicate=False))
    assert all(isinstance(p, OffloadedTensor) for p in params.values())
    # Experts stored one tensor each are composed (stacked when read), not loaded.
    experts = [n for n in params if ".experts." in n]
    assert all(isinstance(params[n], ComposedOffloadedTensor) for n in experts)
    assert bool(experts) == (name in ("mixtral", "qwen2_moe"))
    # Buffers absent from checkpoints are computed as Hugging Face computes them.
    hf = _hf_model(directory)
    for buffer_name, value in hf.named_buffers():
        torch.testing.assert_close(dict(loaded.model.named_buffers())[buffer_name], value, rtol=0, atol=0)
    del loaded

    report = dump_llm(tmp_path / "out", local_dir=directory)
    generation = report.generation
    assert generation is not None and generation.first_divergence is None
    expected = torch_generate(hf, torch.tensor([generation.prompt]), len(generation.tract_tokens))
    assert generation.tract_tokens == expected


def test_tied_embeddings_are_streamed_once(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """GPT-2 ties lm_head to the token embedding: the checkpoint holds it once, the model
    shares one OffloadedTensor, and the artefact one variable."""
    directory = checkpoint("gpt2")
    model = load_checkpoint(directory, None, "eager", trust_remote_code=False).model
    assert model.lm_head.weight is model.transformer.wte.weight
    assert isinstance(model.lm_head.weight, OffloadedTensor) and model.lm_head.weight.key == "transformer.wte.weight"
    report = dump_llm(tmp_path / "out", local_dir=directory, no_verify=True)
    with tarfile.open(report.model_path) as tar:
        members = [m.name for m in tar.getmembers() if m.name.endswith(".dat")]
    assert sum("wte" in m or "lm_head" in m for m in members) == 1, members


def test_streamed_q4_0_without_verification(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """-c min_max_q4_0 -nv: the linear weights are quantized by the Rust writer as they
    are streamed; their blocks are those of fastnnef's in-memory Q4_0 of the checkpoint's
    weights, and tract reproduces the test bundles PyTorch computed with them."""
    directory = checkpoint("llama")
    report = dump_llm(tmp_path / "out", local_dir=directory, compression_method="min_max_q4_0", no_verify=True)
    assert not report.verified and report.generation is None
    # The PyTorch run writing tests/ is timed on its own line (issue 19).
    assert re.search(r"^PyTorch run writing tests/ .*: \d+\.\d+ s$", report.summary(), re.MULTILINE), report.summary()
    hf = _hf_model(directory)
    with tarfile.open(report.model_path) as tar:
        for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"):
            member = tar.extractfile(f"model.{name}.dat")
            assert member is not None
            dat = _native.dat_decode(member.read())
            assert dat.encoding == "q4_0"
            expected = fp_to_tract_q4_0_with_min_max_calibration(hf.get_parameter(name).detach()).decompress()
            np.testing.assert_array_equal(dat.array(), expected.numpy())
        embed = _native.dat_decode(tar.extractfile("model.model.embed_tokens.weight.dat").read())  # type: ignore[union-attr]
        assert embed.encoding == "f32"  # not a Linear: stays float
    _tract_reproduces_every_bundle(report, tmp_path / "out")


CHILD = textwrap.dedent(
    """
    import resource, sys
    from fastnnef.llm import dump_llm

    warmup, checkpoint, out, headroom = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    # The same export of a tiny checkpoint first: every module imported, torch's and
    # Rust's threads started, before the address space is measured.
    dump_llm(out + "-warmup", local_dir=warmup, no_verify=True)

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    limit = vm_bytes() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    report = dump_llm(out, local_dir=checkpoint, no_verify=True)
    print("EXPORTED", report.model_path, flush=True)
    # Control, after the export (a failed allocation may leave a malloc arena reserved):
    # the weights do not fit in what this process may use.
    try:
        open(checkpoint + "/model.safetensors", "rb").read()
        print("CONTROL: read the whole checkpoint", flush=True)
    except MemoryError:
        print("CONTROL: MemoryError", flush=True)
    """
)


BIG_CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(
        num_hidden_layers=10, hidden_size=1024, intermediate_size=2048, num_attention_heads=8,
        num_key_value_heads=8, vocab_size=8192, max_position_embeddings=64, tie_word_embeddings=False,
    ),
    # 8 experts stored one tensor each: the largest parameter (a layer's stacked gate_up,
    # 32 MiB) is composed when read, never the model's experts at once.
    "mixtral": lambda: transformers.MixtralConfig(
        num_hidden_layers=8, hidden_size=512, intermediate_size=1024, num_attention_heads=8,
        num_key_value_heads=8, vocab_size=8192, max_position_embeddings=64, tie_word_embeddings=False,
        num_local_experts=8, num_experts_per_tok=2,
    ),
}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to measure the address space")
@pytest.mark.parametrize("name", sorted(BIG_CONFIGS))
def test_export_of_weights_larger_than_the_memory_the_process_may_use(name: str, tmp_path: Path) -> None:
    """A checkpoint of about 470 MiB exported with -nv by a process whose address space
    may grow by only 240 MiB once Python, torch, transformers and fastnnef are loaded
    (RLIMIT_AS, which any Linux process may set on itself): the test bundles' forward and
    the writer run at the same time, each with its own window of the checkpoint mapped
    (160 MiB was enough when they ran one after the other). The artefact then runs in
    tract and gives Hugging Face's logits."""
    headroom = 240 << 20
    torch.manual_seed(0)
    big = tmp_path / "big"
    transformers.AutoModelForCausalLM.from_config(BIG_CONFIGS[name]()).save_pretrained(big)
    assert (big / "model.safetensors").stat().st_size > headroom * 1.8
    tiny = tmp_path / "tiny"
    build(name).save_pretrained(tiny)
    # One malloc arena: a thread's first allocation would otherwise reserve a 64 MiB arena of
    # address space whenever it happens (before or after the measure), making the cap flaky.
    # A fixed mmap threshold: glibc otherwise raises it (up to 32 MiB) after each large free,
    # and the next tensors then come from the heap, whose holes make the address space vary
    # from run to run (mixtral's peak above the baseline: 133-276 MiB over 4 runs, 83-86 MiB
    # over 5 with the threshold fixed).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
           "MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tiny), str(big), str(out), str(headroom)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "CONTROL: MemoryError" in proc.stdout, proc.stdout
    assert f"EXPORTED {out / 'model' / 'model.nnef.tgz'}" in proc.stdout

    artefact = TractArtefact.load(out / "model" / "model.nnef.tgz")
    with np.load(out / "tests" / "prompt_inputs.npz") as npz:
        inputs = [npz[name] for name in artefact.input_names]
    logits = artefact.run(inputs)[0]
    hf = _hf_model(big)
    with torch.no_grad():
        expected = hf(torch.from_numpy(inputs[0])).logits[:, -1:]
    np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-3, atol=1e-3)


def _with_extra(directory: Path, tmp_path: Path, extra: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import load_file, save_file

    copy = Path(shutil.copytree(directory, tmp_path / "ckpt"))
    weights = load_file(copy / "model.safetensors")
    save_file({**weights, **extra}, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_unused_checkpoint_weights_are_refused(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    directory = _with_extra(checkpoint("llama"), tmp_path, {"model.layers.7.mlp.up_proj.weight": torch.zeros(64, 32)})
    out = tmp_path / "out"
    with pytest.raises(T2NErrorInvalidArgument, match=r"ckpt holds weights its config\.json does not use: "
                       r"model\.layers\.7\.mlp\.up_proj\.weight; the checkpoint belongs to another configuration"):
        dump_llm(out, local_dir=directory)
    assert not out.exists() and list(tmp_path.iterdir()) == [directory]


def test_rotary_tables_of_old_checkpoints_are_recomputed(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """Old checkpoints saved rotary inv_freq per layer; as from_pretrained, fastnnef
    ignores them and uses the values the model computes (here deliberately wrong ones
    in the file, which would change every token if used)."""
    directory = _with_extra(checkpoint("llama"), tmp_path, {
        f"model.layers.{i}.self_attn.rotary_emb.inv_freq": torch.full((4,), 7.0) for i in range(2)})
    loaded = load_checkpoint(directory, None, "eager", trust_remote_code=False)
    assert loaded.streamed and float(loaded.model.model.rotary_emb.inv_freq[0]) == 1.0
    report = dump_llm(tmp_path / "out", local_dir=directory)
    generation = report.generation
    assert generation is not None
    expected = torch_generate(_hf_model(checkpoint("llama")), torch.tensor([generation.prompt]), 16)
    assert generation.tract_tokens == expected


def test_streamed_experts_with_q4_0_without_verification(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """-c min_max_q4_0 -nv on mixtral: the linear weights (router included) are quantized
    on the way, the stacked experts (not Linear modules) are written in float, as
    tract_moe_ffn takes them (gate and up halves of transformers' fused parameter), and
    tract reproduces the test bundles PyTorch computed."""
    directory = checkpoint("mixtral")
    report = dump_llm(tmp_path / "out", local_dir=directory, compression_method="min_max_q4_0", no_verify=True)
    hf = _hf_model(directory)
    with tarfile.open(report.model_path) as tar:
        def dat(name: str) -> Any:
            member = tar.extractfile(f"model.{name}.dat")
            assert member is not None
            return _native.dat_decode(member.read())

        assert dat("model.layers.0.self_attn.q_proj.weight").encoding == "q4_0"
        gate_up = hf.get_parameter("model.layers.0.mlp.experts.gate_up_proj").detach().numpy()
        half = gate_up.shape[1] // 2
        expected = {"model.layers.0.mlp.experts.w1": gate_up[:, :half],
                    "model.layers.0.mlp.experts.w3": gate_up[:, half:],
                    "model.layers.1.mlp.experts.down_proj": hf.get_parameter("model.layers.1.mlp.experts.down_proj")
                    .detach().numpy()}
        for name, values in expected.items():
            assert dat(name).encoding == "f32"
            np.testing.assert_array_equal(dat(name).array(), values)
    _tract_reproduces_every_bundle(report, tmp_path / "out")


def test_a_missing_expert_is_refused(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    directory = Path(shutil.copytree(checkpoint("mixtral"), tmp_path / "ckpt"))
    weights = load_file(directory / "model.safetensors")
    del weights["model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.raises(T2NErrorInvalidArgument, match=r"ckpt do not fit its config\.json: model\.layers\.1\.mlp\."
                       r"experts\.gate_up_proj is made of one tensor per expert and projection, but the checkpoint "
                       r"holds 4 for '\.experts\.\*\.w1\.weight', 3 for '\.experts\.\*\.w3\.weight'"):
        dump_llm(out, local_dir=directory)
    assert not out.exists()
    # An expert missing from every projection: the stacked parameters are too small.
    weights = {k: v for k, v in weights.items() if ".experts.3." not in k}
    weights["model.layers.1.block_sparse_moe.experts.2.w3.weight"] = torch.zeros(64, 32)
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(T2NErrorInvalidArgument,
                       match=r"experts\.gate_up_proj composed of cat\(\[stack\(\[.*\], 0\)\], 1\) "
                       r"is \[3, 128, 32\], the config needs \[4, 128, 32\]"):
        dump_llm(out, local_dir=directory)
    assert not out.exists()


def test_conversions_other_than_stacking_are_loaded_in_memory(caplog: pytest.LogCaptureFixture,
                                                              checkpoint: Callable[..., Path]) -> None:
    """A transformers conversion that is not a stack (then a concatenation) of checkpoint
    tensors is left to from_pretrained, with a debug log saying why."""
    from transformers.core_model_loading import MergeModulelist, Transpose, WeightConverter

    from fastnnef.llm.load import _composed

    directory = checkpoint("mixtral")
    converter = WeightConverter(".experts.*.w2.weight", ".experts.down_proj",
                                operations=[MergeModulelist(dim=0), Transpose(1, 2)])
    keys = [f"model.layers.0.block_sparse_moe.experts.{e}.w2.weight" for e in range(4)]
    with caplog.at_level("DEBUG", logger="fastnnef.llm"):
        got = _composed(open_checkpoint(directory), "model.layers.0.mlp.experts.down_proj", converter,
                        {".experts.*.w2.weight": keys}, torch.float32, directory)
    assert got is None
    assert "not a stack (and concatenation) of tensors" in caplog.text and "Transpose" in caplog.text


def _tract_reproduces_every_bundle(report: Any, out: Path) -> None:
    """tract, on the artefact, reproduces every mode bundle the export wrote."""
    artefact = TractArtefact.load(report.model_path)
    for mode in report.modes:
        bundle = Bundle(mode, *(dict(np.load(out / "tests" / f"{mode}_{io}.npz"))  # type: ignore[arg-type]
                                for io in ("inputs", "outputs")))
        bundle.inputs = {k: torch.from_numpy(v) for k, v in bundle.inputs.items()}
        bundle.outputs = {k: torch.from_numpy(v) for k, v in bundle.outputs.items()}
        assert check_bundle(artefact, bundle, "approximate").ok, mode
