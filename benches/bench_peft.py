"""fastnnef-peft against torch_to_nnef_llm's t2n_export_peft_to_nnef on the same LoRA adapter
file: wall time and peak RSS of each command, run as separate processes.

The adapter is built here (random matrices, safetensors, the key layout of
``PeftModel.save_pretrained``) for a Llama-7B-like model: 32 layers, hidden 4096, rank 64,
LoRA on q_proj and v_proj (peft's default targets for Llama): 134 MB in f32. Both commands
get the same flags; ``-c`` names each module's A matrix, a tensor the file holds, because
the reference always checks ``-c`` names against the file and an adapter-only file has no
base weights. Before printing, both archives are read back: the mapping tables and every
tensor must be equal, so the two commands did the same work.

torch_to_nnef_llm is not a dependency; install it apart, e.g.
    pip install --target /tmp/t2nllm --no-deps torch_to_nnef==0.24.12 torch_to_nnef_llm==0.24.12 \\
        nnef nnef-tools mako pyyaml six
    PYTHONPATH=python .venv/bin/python benches/bench_peft.py --reference /tmp/t2nllm
    PYTHONPATH=python .venv/bin/python benches/bench_peft.py --smoke          # tiny, seconds
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FASTNNEF_PYTHON = Path(__file__).resolve().parents[1] / "python"
PATTERNS = [r"base_model\.model\.(?P<name>.*)\.lora_A\.weight$", r"base_model\.model\.(?P<name>.*)\.lora_B\.weight$"]
CHECK_NAME = "base_model.model.{name}.lora_A.weight"  # present in the file: see the docstring

# (layers, hidden, rank)
SIZES = {"llama7b": (32, 4096, 64), "smoke": (2, 256, 8)}


def build_adapter(path: Path, size: str, targets: list[str], dtype: str) -> None:
    """Written by a separate process: a child forked from a process that held the tensors
    would inherit its peak RSS (ru_maxrss survives exec)."""
    if not path.is_file():
        subprocess.run([sys.executable, __file__, "--build", str(path), "--size", size, "--targets", *targets,
                        "--dtype", dtype], check=True)


def _build(path: Path, size: str, targets: list[str], dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    layers, hidden, rank = SIZES[size]
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(layers):
        for target in targets:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=gen).to(getattr(torch, dtype))
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(hidden, rank, generator=gen).to(getattr(torch, dtype))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one command; the RSS includes the children it
    waited for (the reference's ``tar``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{cmd[:4]} failed: {err.read().decode()}")
        return wall, usage.ru_maxrss / 1024, out.read().decode()


def same_archives(ours: Path, theirs: Path) -> None:
    import numpy as np

    sys.path.insert(0, str(FASTNNEF_PYTHON))
    from fastnnef.peft import read_peft_archive

    a, b = read_peft_archive(ours), read_peft_archive(theirs)
    assert a.method == b.method and a.mapping_table == b.mapping_table, "mapping tables differ"
    assert a.tensors.keys() == b.tensors.keys()
    for key in a.tensors:
        assert np.array_equal(a.tensors[key], b.tensors[key]), key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/fastnnef-bench-peft"))
    parser.add_argument("--smoke", action="store_true", help="a tiny adapter (2 layers, hidden 256, rank 8)")
    parser.add_argument("--reference", type=Path, help="folder where torch_to_nnef_llm is installed (--target)")
    parser.add_argument("--targets", nargs="+", default=["q_proj", "v_proj"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--level", type=int, default=0, help="fastnnef-peft --compression-level")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command, alternating")
    parser.add_argument("--cleanup", action="store_true", help="delete the adapter and archives afterwards")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--size", default="llama7b", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        _build(args.build, args.size, args.targets, args.dtype)
        return
    size = "smoke" if args.smoke else "llama7b"
    adapter = args.dir / f"adapter_{size}_{'_'.join(args.targets)}_{args.dtype}.safetensors"
    build_adapter(adapter, size, args.targets, args.dtype)
    mb = adapter.stat().st_size / 1e6
    flags = ["-r", str(adapter), "-p", *PATTERNS, "-c", CHECK_NAME]
    env = dict(os.environ, PYTHONPATH=str(FASTNNEF_PYTHON))
    commands = {"fastnnef-peft": ([sys.executable, "-m", "fastnnef.peft", *flags, "--compression-level",
                                   str(args.level)], env)}
    if args.reference is not None:
        commands["t2n_export_peft_to_nnef"] = (
            [sys.executable, "-m", "torch_to_nnef_llm.peft.cli", *flags],
            dict(os.environ, PYTHONPATH=str(args.reference))
        )
    startup = measure([sys.executable, "-c", "import torch"], env)[:2]
    results: dict[str, list[tuple[float, float, str]]] = {name: [] for name in commands}
    outputs = {name: args.dir / f"{name}.peft.nnef.tgz" for name in commands}
    for _ in range(args.repeat):
        for name, (cmd, cmd_env) in commands.items():
            outputs[name].unlink(missing_ok=True)
            results[name].append(measure([*cmd, "-o", str(outputs[name])], cmd_env))
    if len(outputs) == 2:
        same_archives(outputs["fastnnef-peft"], outputs["t2n_export_peft_to_nnef"])
    copy_start = time.perf_counter()
    shutil.copyfile(adapter, args.dir / "copy.safetensors")
    copy_s = time.perf_counter() - copy_start
    print(f"adapter: {adapter.name}, {mb:.1f} MB; `import torch` alone: {startup[0]:.2f} s, {startup[1]:.0f} MiB; "
          f"cp: {copy_s:.2f} s; load average {os.getloadavg()[0]:.1f}")
    print(f"| command | wall s (median of {args.repeat}) | min s | export s (its report) | peak RSS MiB | archive MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        walls = [w for w, _, _ in runs]
        # fastnnef-peft's summary ends "in X s": the export itself, imports excluded.
        inner = [float(m.group(1)) for _, _, out in runs if (m := re.search(r" in ([0-9.]+) s$", out.strip()))]
        print(f"| {name} | {statistics.median(walls):.2f} | {min(walls):.2f} | "
              f"{statistics.median(inner) if inner else float('nan'):.2f} | {max(r for _, r, _ in runs):.0f} | "
              f"{outputs[name].stat().st_size / 1e6:.1f} |")
    if len(outputs) == 2:
        print("archives hold equal mapping tables and tensors")
    (args.dir / "copy.safetensors").unlink()
    if args.cleanup:
        shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
