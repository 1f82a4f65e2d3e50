"""The LLM exporter's capture against the number of decoder layers: alike layers captured
once (fx_graph/repeats.py) against the same code capturing every layer, and against an
older fastnnef (``--baseline-python``), on tiny Llama checkpoints whose weights are too
small to matter (hidden 256): what is left is the capture, the lowering and the conversion.

    PYTHONPATH=python .venv/bin/python benches/bench_llm_capture.py --layers 4 16 32 \\
        --rounds 3 [--baseline-python /path/to/old/python]

Each export is ``fastnnef-llm -d CHECKPOINT -e OUT -nv`` in a fresh process (``layer by
layer``: the same, ``KVCacheLM.repeat_plan`` returning None); the runs alternate within a
round. Per run: the ``export`` step the command reports (capture, lowering, conversion,
writing the ~1-75 MB artefact), the process's wall and CPU time. ``--smoke``: 2 and 4
layers, one round, in a temporary directory removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MAKE = """
import sys, torch, transformers
config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=int(sys.argv[1]),
                                  num_attention_heads=8, num_key_value_heads=4, vocab_size=1000)
torch.manual_seed(0)
transformers.LlamaForCausalLM(config).save_pretrained(sys.argv[2])
"""
_RUN = """
import sys
from fastnnef.llm import cli, wrapper
if sys.argv[1] == "by-layer":
    wrapper.KVCacheLM.repeat_plan = lambda self: None
cli.main(sys.argv[2:])
"""
_EXPORT = re.compile(r"export (\d+\.\d+) s")


def _run(python_path: Path, mode: str, checkpoint: Path, out: Path) -> tuple[float, float, float]:
    """(export step s, wall s, CPU s) of one export in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _RUN, mode, "-d", str(checkpoint), "-e", str(out), "-nv"],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out, ignore_errors=True)
    found = _EXPORT.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(found.group(1)), wall, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-python", type=Path, help="the python/ folder of an older fastnnef")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.layers, args.rounds = [2, 4], 1
    modes = [("once", ROOT / "python"), ("by-layer", ROOT / "python")]
    if args.baseline_python is not None:
        modes.append(("baseline", args.baseline_python))
    work = Path(tempfile.mkdtemp(prefix="bench-llm-capture-"))
    try:
        print(f"{'layers':>6} {'run':<9} {'export s':>9} {'wall s':>7} {'CPU s':>7}  (median of {args.rounds})")
        for layers in args.layers:
            checkpoint = work / f"llama-{layers}"
            subprocess.run([sys.executable, "-c", _MAKE, str(layers), str(checkpoint)], check=True,
                           capture_output=True)
            runs: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode, _ in modes}
            for _ in range(args.rounds):
                for mode, python_path in modes:
                    runs[mode].append(_run(python_path, "once" if mode == "baseline" else mode, checkpoint,
                                           work / "out"))
            for mode, results in runs.items():
                export, wall, cpu = (statistics.median(r[k] for r in results) for k in range(3))
                print(f"{layers:>6} {mode:<9} {export:>9.2f} {wall:>7.2f} {cpu:>7.2f}", flush=True)
            shutil.rmtree(checkpoint)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
