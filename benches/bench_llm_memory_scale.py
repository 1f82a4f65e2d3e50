"""Peak memory of ``fastnnef-llm`` on a checkpoint with llama-3-70B's dimensions (hidden
8192, ffn 28672, 64 heads / 8 kv heads, vocab 128256, untied head; issue 19): each
export in a fresh process, its peak anonymous memory (RssAnon) and peak RSS (VmHWM)
sampled from /proc/<pid>/status.

    python benches/bench_llm_memory_scale.py [--layers 4] [--python-path DIR ...] [--runs f16 q4_0]
        [--front-ends jit export] [--smoke]

Writes a random-weight bf16 checkpoint, sharded (one shard per layer, plus one for the
embedding, the final norm and the head), tensor by tensor with safetensors' layout from a
256 MiB pool of random values: it is never in memory (11.0 GB at 4 layers, written and
deleted in a temporary directory), with a tiny word-level tokenizer. Then, for each
``--python-path`` (a ``python/`` directory holding a fastnnef package with its built
extension; default: this tree's), runs ``python -m fastnnef.llm -nv -dt f16`` and
``-nv -c min_max_q4_0``, printing per run: wall time, peak RssAnon, peak VmHWM, and the
summary's timings (the PyTorch run writing ``tests/`` is ``bundles``). RssAnon is what
the export allocates; VmHWM also counts the checkpoint's pages mapped from the page cache,
which the kernel reclaims under pressure. ``--runs`` picks among those two, and
``--front-ends jit export`` runs each once per front end (``--front-end``; fastnnef
versions before it take no such flag). ``--smoke`` does the same with hidden size 64
(a few hundred KB; CI runs it, tests/test_benches.py); the temporary directory is removed
in every case."""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

LLAMA_3_70B = dict(
    hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
    rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=False,
)
SMOKE = dict(LLAMA_3_70B, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=256, max_position_embeddings=256)
RUNS = {"f16": ["-dt", "f16"], "q4_0": ["-c", "min_max_q4_0"]}
POOL_VALUES = 128 << 20  # bf16 values of random data reused for every tensor (256 MiB)
STD = 0.02  # an initializer's scale: logits and activations stay well inside f16


def layer_tensors(config: dict, layer: int) -> Iterator[tuple[str, list[int]]]:
    h, f = config["hidden_size"], config["intermediate_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    p = f"model.layers.{layer}."
    yield p + "input_layernorm.weight", [h]
    yield p + "self_attn.q_proj.weight", [h, h]
    yield p + "self_attn.k_proj.weight", [kv, h]
    yield p + "self_attn.v_proj.weight", [kv, h]
    yield p + "self_attn.o_proj.weight", [h, h]
    yield p + "post_attention_layernorm.weight", [h]
    yield p + "mlp.gate_proj.weight", [f, h]
    yield p + "mlp.up_proj.weight", [f, h]
    yield p + "mlp.down_proj.weight", [h, f]


def write_shard(path: Path, tensors: list[tuple[str, list[int]]], pool: Any, rng: Any) -> None:
    """A .safetensors file of bf16 ``tensors``, each written in 64 MiB pieces of the pool
    (norm weights are ones, as initialized): memory for the pool and one piece only."""
    import numpy as np

    header, offset = {}, 0
    for name, shape in tensors:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    one = np.full(1, 0x3F80, np.uint16)  # bf16 1.0
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in tensors:
            left = int(np.prod(shape))
            if name.endswith("norm.weight"):
                f.write(np.repeat(one, left).tobytes())
                continue
            while left:
                n = min(left, 32 << 20, len(pool))
                start = int(rng.integers(0, len(pool) - n + 1))
                f.write(pool[start:start + n].tobytes())
                left -= n


def build_checkpoint(directory: Path, config: dict, layers: int) -> int:
    """The sharded bf16 checkpoint and a tokenizer in ``directory``; returns its bytes."""
    import numpy as np
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from tests.llm.conftest import save_tokenizer

    directory.mkdir()
    transformers.LlamaConfig(**config, num_hidden_layers=layers, dtype="bfloat16").save_pretrained(directory)
    generator = torch.Generator().manual_seed(0)
    pool_size = min(POOL_VALUES, 64 * config["hidden_size"] * config["intermediate_size"])
    pool = (torch.randn(pool_size, generator=generator) * STD).to(torch.bfloat16).view(torch.int16).numpy()
    pool = pool.view(np.uint16)
    rng = np.random.default_rng(0)
    h, v = config["hidden_size"], config["vocab_size"]
    shards = [[(n, s) for n, s in layer_tensors(config, i)] for i in range(layers)]
    shards.append([("model.embed_tokens.weight", [v, h]), ("model.norm.weight", [h]), ("lm_head.weight", [v, h])])
    weight_map = {}
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_shard(directory / name, tensors, pool, rng)
        weight_map.update({t: name for t, _ in tensors})
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    save_tokenizer(directory)
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def status_kib(pid: int) -> dict[str, int]:
    """RssAnon and VmHWM of ``pid`` in KiB (empty once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(RssAnon|VmHWM):\s+(\d+) kB", text, re.MULTILINE)}


def export(python_path: str, checkpoint: Path, out: Path, flags: list[str]) -> tuple[float, float, float, str]:
    """(wall s, peak RssAnon MiB, peak VmHWM MiB, the summary's timings line ending with
    the process's CPU seconds) of one export in a fresh process, RssAnon sampled every
    20 ms. CPU time (user + system) moves less than wall time on a shared machine."""
    command = [sys.executable, "-m", "fastnnef.llm", "-d", str(checkpoint), "-e", str(out), "-nv", *flags]
    env = {**os.environ, "PYTHONPATH": python_path}
    start, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"RssAnon": 0, "VmHWM": 0}

    def sample() -> None:
        while proc.poll() is None:
            for key, value in status_kib(proc.pid).items():
                peak[key] = max(peak[key], value)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.join()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    lines = stdout.splitlines()
    timings = next((line for line in lines if line.startswith("timings:")), "")
    # The PyTorch run writing tests/: its own summary line, or (older versions) "bundles".
    torch_run = next((line for line in lines if line.startswith("PyTorch run writing")), "")
    old_style = re.search(r"bundles (\d+\.\d+) s", timings)
    if not torch_run and old_style:
        torch_run = f"PyTorch run writing tests/: {old_style.group(1)} s"
    return wall, peak["RssAnon"] / 1024, peak["VmHWM"] / 1024, f"{timings}; {torch_run}; CPU {cpu:.1f} s"



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--python-path", nargs="*", default=[str(ROOT / "python")])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--front-ends", nargs="+", choices=["auto", "export", "jit"],
                        help="run each export once per front end (default: the command's own)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (1 layer, hidden 64) to check the bench works")
    args = parser.parse_args()
    front_ends: list[str | None] = args.front_ends or [None]
    config, layers = (SMOKE, 1) if args.smoke else (LLAMA_3_70B, args.layers)
    with tempfile.TemporaryDirectory(prefix="bench-llm-scale-") as tmp:
        checkpoint = Path(tmp) / "ckpt"
        start = time.perf_counter()
        size = build_checkpoint(checkpoint, config, layers)
        print(f"checkpoint: {layers} layers, hidden {config['hidden_size']}, ffn {config['intermediate_size']}, "
              f"vocab {config['vocab_size']}: {size / 1e9:.2f} GB bf16, written in {time.perf_counter() - start:.0f} s")
        for i, path in enumerate(args.python_path):
            for run in args.runs:
                for front_end in front_ends:
                    flags = RUNS[run] + (["--front-end", front_end] if front_end else [])
                    label = f"{run} {front_end}" if front_end else run
                    out = Path(tmp) / f"out-{i}-{run}"
                    wall, anon, hwm, timings = export(path, checkpoint, out, flags)
                    print(f"{path} {label}: {wall:.1f} s wall, peak RssAnon {anon:.0f} MiB, peak VmHWM {hwm:.0f} MiB")
                    print(f"    {timings}")
                    shutil.rmtree(out)


if __name__ == "__main__":
    main()
