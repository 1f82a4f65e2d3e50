"""fastnnef-llm against torch_to_nnef_llm's t2n_export_llm_to_tract on the same local
Llama checkpoint (random weights, built here): wall time and peak RSS of each command.

Both run as separate processes with ``-nv`` (no verification: export cost only). The
reference gets a stub ``--tract-specific-path`` (it otherwise downloads tract at
construction). Before printing, both artefacts are loaded by the linked tract and run on
the same inputs: the outputs must agree, so the two commands did equal work.

torch_to_nnef_llm is not a dependency; install it apart, e.g.
    pip install --target /tmp/t2n --no-deps torch_to_nnef==0.24.12 torch_to_nnef_llm==0.24.12 \\
        nnef nnef-tools mako pyyaml six
    PYTHONPATH=python .venv/bin/python benches/bench_llm_vs_torch_to_nnef.py --reference /tmp/t2n
fastnnef-llm alone, on a ~4 GB checkpoint (deleted afterwards):
    PYTHONPATH=python .venv/bin/python benches/bench_llm_vs_torch_to_nnef.py --skip-reference --scale 4.5 --cleanup
Without ``--reference``, the reference runs from the current environment if it has
torch_to_nnef_llm, and is skipped with a note otherwise. ``--smoke`` runs a 1-layer Llama
of hidden size 64 in a temporary directory, removed afterwards (CI runs it,
tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np

FASTNNEF_PYTHON = Path(__file__).resolve().parents[1] / "python"
TRACT_VERSION = "0.23.8"

# ~1.1 GB of f32 weights: 293 M parameters.
LLAMA = dict(
    num_hidden_layers=8, hidden_size=1536, intermediate_size=4096, num_attention_heads=12, num_key_value_heads=4,
    vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False,
)
# --smoke: ~0.2 MB (the vocabulary holds the test tokenizer's words).
SMOKE_LLAMA = dict(LLAMA, num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=128)


def build_checkpoint(directory: Path, scale: float, smoke: bool) -> Path:
    """A Llama checkpoint with a word-level tokenizer, saved once (reused when present),
    by a separate process: a child forked from a process holding the model would
    inherit its peak RSS (ru_maxrss survives exec). The reference wants ``-d`` to hold
    one subdirectory with config.json."""
    if not (directory / "llama" / "config.json").is_file():
        smoke_flag = ["--smoke"] if smoke else []
        subprocess.run([sys.executable, __file__, "--build", str(directory), "--scale", str(scale), *smoke_flag],
                       check=True)
    return directory


def _build(directory: Path, scale: float, smoke: bool) -> None:
    checkpoint = directory / "llama"
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.llm.conftest import save_tokenizer

    dims = SMOKE_LLAMA if smoke else {**LLAMA, "num_hidden_layers": max(1, round(LLAMA["num_hidden_layers"] * scale))}
    config = transformers.LlamaConfig(**dims)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(checkpoint)
    save_tokenizer(checkpoint)


def stub_tract(folder: Path, version: str = TRACT_VERSION) -> Path:
    """A script answering ``--version`` as tract ``version``: what the reference checks."""
    path = folder / "tract"
    path.write_text(f"#!/bin/sh\necho 'tract {version}'\n")
    path.chmod(0o755)
    return path


def run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``command``, a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return wall, usage.ru_maxrss / 1024


def same_outputs(ours: Path, reference: Path, inputs: Path) -> float:
    """Largest difference between the two artefacts' outputs on the same inputs."""
    from fastnnef.check import TractArtefact

    a, b = TractArtefact.load(ours), TractArtefact.load(reference)
    assert a.input_names == b.input_names and a.output_names == b.output_names
    with np.load(inputs) as npz:
        feed = [npz[n] for n in a.input_names]
    worst = 0.0
    for x, y in zip(a.run(feed), b.run(feed)):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, atol=1e-3, rtol=1e-3)
        worst = max(worst, float(np.abs(x - y).max()))
    return worst


def reference_missing() -> str:
    """Why torch_to_nnef_llm's CLI cannot be imported here ('' when it can). Imported only
    when present (it imports torch and transformers, which this process does not need)."""
    if find_spec("torch_to_nnef_llm") is None:
        return "not installed"
    try:
        import torch_to_nnef_llm.cli  # noqa: F401
    except ImportError as err:
        return str(err)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path,
                        help="where torch_to_nnef_llm is installed (default: the current environment)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-llm-bench"))
    parser.add_argument("--scale", type=float, default=1.0, help="layer count factor (1.0: ~1.1 GB)")
    parser.add_argument("--skip-reference", "--no-reference", action="store_true", help="time fastnnef-llm only")
    parser.add_argument("--cleanup", action="store_true", help="delete the checkpoint and the outputs at the end")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny run (1-layer Llama, temp dir) to check the bench works")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the checkpoint-building child
    args = parser.parse_args()
    if args.build:
        _build(args.build, args.scale, args.smoke)
        return
    if args.reference is None and not args.skip_reference and (missing := reference_missing()):
        print(f"(reference skipped: no --reference, and torch_to_nnef_llm cannot be imported here: {missing})")
        args.skip_reference = True
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="fastnnef-llm-bench-") as tmp:
            compare(args, Path(tmp))
    else:
        compare(args, args.workdir)
        if args.cleanup:
            shutil.rmtree(args.workdir)


def compare(args: argparse.Namespace, workdir: Path) -> None:
    """Build (or reuse) the checkpoint under ``workdir``, time both commands, print the table."""
    workdir.mkdir(parents=True, exist_ok=True)
    source = build_checkpoint(workdir / "checkpoint", args.scale, args.smoke)
    size = sum(p.stat().st_size for p in (source / "llama").glob("*.safetensors"))
    print(f"checkpoint: {source / 'llama'} ({size / 1e6:.1f} MB of safetensors)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    results = {}
    # What both commands pay before any work: starting Python and importing torch and
    # transformers' Llama (several seconds on a loaded 2-core machine).
    results["startup (imports only)"] = run(
        [sys.executable, "-c", "import torch, transformers; from transformers import LlamaForCausalLM, AutoConfig; "
         "AutoConfig.for_model('llama')"], env,
    )
    ours_out = workdir / "fastnnef"
    shutil.rmtree(ours_out, ignore_errors=True)
    results["fastnnef-llm"] = run(
        [sys.executable, "-m", "fastnnef.llm", "-d", str(source / "llama"), "-e", str(ours_out), "-nv"],
        {**env, "PYTHONPATH": str(FASTNNEF_PYTHON)},
    )
    if not args.skip_reference:
        ref_out = workdir / "reference"
        shutil.rmtree(ref_out, ignore_errors=True)
        command = [sys.executable, "-c", "import sys; from torch_to_nnef_llm.cli import main; main()",
                   "-d", str(source), "-e", str(ref_out), "-nv", "--tract-specific-path",
                   str(stub_tract(workdir))]
        ref_env = env if args.reference is None else {**env, "PYTHONPATH": str(args.reference)}
        results["t2n_export_llm_to_tract"] = run(command, ref_env)
        worst = same_outputs(ours_out / "model" / "model.nnef.tgz", ref_out / "model" / "model.nnef.tgz",
                             ours_out / "tests" / "prompt_inputs.npz")
        print(f"both artefacts agree on the prompt bundle (max abs difference {worst:.2e})")
    baseline = results["startup (imports only)"][1]
    for name, (wall, rss) in results.items():
        print(f"{name:>26}: {wall:8.2f} s wall, peak RSS {rss:8.0f} MiB ({rss - baseline:+.0f} MiB over the startup)")
    if "t2n_export_llm_to_tract" in results:
        (ours, ours_rss), (ref, ref_rss) = results["fastnnef-llm"], results["t2n_export_llm_to_tract"]
        startup = results["startup (imports only)"][0]
        print(f"speed-up {ref / ours:.1f}x ({(ref - startup) / (ours - startup):.1f}x beyond the shared startup), "
              f"peak RSS {ours_rss / ref_rss:.2f}x of the reference's")


if __name__ == "__main__":
    main()
