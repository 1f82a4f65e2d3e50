"""Time the whole ``export_model_to_nnef`` call with ``front_end="export"`` and ``"jit"``.

Both front ends export the same models in one process, interleaved (jit, export, jit,
export...) for ``--rounds`` rounds after one warm-up export each, so that the machine's load
falls on both alike. Every export is the user's call: capture, IR, handlers, the ``.nnef.tgz``
written (level 0) and checked in tract (``check_io``). Models:

- ``attn64``: 64 attention blocks (q/k/v/o ``Linear(64, 64)`` + SDPA + residual), [1, 16, 64],
  the model of ``bench_graph_build.py --kind attn``;
- ``attn64-dyn``: the same with a dynamic sequence axis (``S``), where torch's symbolic
  shapes do work;
- ``mobilenet_v2``: torchvision's MobileNetV2, random weights, [1, 3, 96, 96] (a mid-size
  conv net: 52 convolutions with batch norms), its ReLU6s out of place (as first measured);
- ``resnet18``: torchvision's ResNet-18 as it is built, random weights, [1, 3, 96, 96]: its
  ``ReLU(inplace=True)`` and ``out += identity`` write in place, into memory nothing else
  shares (fx_graph/fresh_writes.py makes them functional without a second trace).

``--cold`` times instead the first export of a fresh process (what a script that exports
one model pays: torch.export's first call imports and sets up much of torch._dynamo), one
process per front end and round, interleaved; imports of torch and fastnnef excluded.

Prints per model and front end the median and best wall of the whole call, its median CPU
time (the process's, every thread: less sensitive to other processes' load than wall), the
per-phase medians (``ExportResult.timings``: capture = ``trace``, lower = ``build_ir``,
convert, write, check = ``post_export``; for jit, capture is ``torch.jit.trace`` and lower
the IR build), and the ratios export / jit of the medians. ``--profile MODEL`` prints a
cProfile of one ``"export"`` call instead.
``--smoke`` exports ``attn2`` (2 blocks) once per front end (CI, tests/test_benches.py).

    PYTHONPATH=python python benches/bench_front_ends.py [--rounds 5] [--models attn64 mobilenet_v2]
        [--cold [--baseline-python /path/to/before/python]]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision  # type: ignore[import-untyped]
from torch import nn

from fastnnef.export import export_model_with_result
from fastnnef.inference_target import TractNNEF

FRONT_ENDS = ("jit", "export")
PHASES = (("capture", "trace"), ("lower", "build_ir"), ("convert", "convert"), ("write", "write"),
          ("check", "post_export"))


class Attention(nn.Module):
    """A small single-head attention block: q/k/v projections, SDPA, output projection."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x))) + x


def attention(blocks: int, dynamic: bool) -> tuple[nn.Module, torch.Tensor, TractNNEF]:
    model = nn.Sequential(*(Attention(64) for _ in range(blocks))).eval()
    target = TractNNEF.latest()
    if dynamic:
        target = target.with_dynamic_axes({"x": {1: "S"}})
    return model, torch.randn(1, 16, 64), target


def mobilenet_v2() -> tuple[nn.Module, torch.Tensor, TractNNEF]:
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    for module in model.modules():  # out of place, as the figures in benches/README were measured
        if isinstance(module, nn.ReLU6):
            module.inplace = False
    return model, torch.randn(1, 3, 96, 96), TractNNEF.latest()


def resnet18() -> tuple[nn.Module, torch.Tensor, TractNNEF]:
    return torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 96, 96), TractNNEF.latest()


MODELS: dict[str, Callable[[], tuple[nn.Module, torch.Tensor, TractNNEF]]] = {
    "attn2": lambda: attention(2, False),
    "attn64": lambda: attention(64, False),
    "attn64-dyn": lambda: attention(64, True),
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
}


def export_once(
    model: nn.Module, x: torch.Tensor, target: TractNNEF, front_end: str, out: Path,
) -> tuple[float, float, dict[str, float]]:
    """Wall and CPU seconds (this process, all threads) of one whole export call, and its
    per-stage wall timings."""
    path = out / f"{front_end}.nnef.tgz"
    start, start_cpu = time.perf_counter(), time.process_time()
    result = export_model_with_result(model, (x,), path, target, input_names=["x"], output_names=["y"],
                                      front_end=front_end)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    path.unlink()
    assert result.check_result is not None, "every export is checked in tract"
    return wall, cpu, result.timings


def bench(name: str, rounds: int, out: Path) -> None:
    model, x, target = MODELS[name]()
    for front_end in FRONT_ENDS:  # warm-up: first-call costs (handlers, torch.export's imports)
        export_once(model, x, target, front_end, out)
    walls: dict[str, list[float]] = {f: [] for f in FRONT_ENDS}
    cpus: dict[str, list[float]] = {f: [] for f in FRONT_ENDS}
    phases: dict[str, dict[str, list[float]]] = {f: {key: [] for _, key in PHASES} for f in FRONT_ENDS}
    for _ in range(rounds):
        for front_end in FRONT_ENDS:
            wall, cpu, timings = export_once(model, x, target, front_end, out)
            walls[front_end].append(wall)
            cpus[front_end].append(cpu)
            for _, key in PHASES:
                phases[front_end][key].append(timings[key])
    med = {f: statistics.median(walls[f]) for f in FRONT_ENDS}
    med_cpu = {f: statistics.median(cpus[f]) for f in FRONT_ENDS}
    for front_end in FRONT_ENDS:
        split = " ".join(f"{label} {statistics.median(phases[front_end][key]):.3f}" for label, key in PHASES)
        print(f"{name:<11} {front_end:<7} wall median {med[front_end]:7.3f} s best {min(walls[front_end]):7.3f} s"
              f"  CPU median {med_cpu[front_end]:7.3f} s  phases (median wall s): {split}")
    print(f"{name:<11} ratio export/jit: wall {med['export'] / med['jit']:.2f}, CPU "
          f"{med_cpu['export'] / med_cpu['jit']:.2f} (target <= 1.30)")


def cold(name: str, rounds: int, baseline: Path | None) -> None:
    """Each front end's first export call in fresh processes, interleaved; with ``baseline``
    (another checkout's ``python/``), its ``"export"`` too, as ``export@baseline``."""
    runs = [(f, None) for f in FRONT_ENDS] + ([("export", baseline)] if baseline else [])
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for _ in range(rounds):
        for front_end, python_path in runs:
            label = f"{front_end}@baseline" if python_path else front_end
            env = {**os.environ, "PYTHONPATH": str(python_path)} if python_path else None
            run = subprocess.run([sys.executable, __file__, "--first-call", front_end, name],
                                 capture_output=True, text=True, check=True, env=env)
            wall, cpu = (float(v) for v in run.stdout.split()[-2:])
            walls.setdefault(label, []).append(wall)
            cpus.setdefault(label, []).append(cpu)
    med = {f: statistics.median(w) for f, w in walls.items()}
    med_cpu = {f: statistics.median(c) for f, c in cpus.items()}
    for label in walls:
        print(f"{name:<11} {label:<15} first call: wall median {med[label]:7.3f} s "
              f"best {min(walls[label]):7.3f} s  CPU median {med_cpu[label]:7.3f} s")
    for label in [label for label in walls if label != "jit"]:
        print(f"{name:<11} first-call ratio {label}/jit: wall {med[label] / med['jit']:.2f}, CPU "
              f"{med_cpu[label] / med_cpu['jit']:.2f} (target <= 1.30)")


def first_call(front_end: str, name: str, out: Path) -> None:
    """One export, the first of this process: prints its wall and CPU seconds."""
    model, x, target = MODELS[name]()
    wall, cpu, _ = export_once(model, x, target, front_end, out)
    print(f"{wall:.4f} {cpu:.4f}")


def profile(name: str, out: Path) -> None:
    model, x, target = MODELS[name]()
    export_once(model, x, target, "export", out)
    profiler = cProfile.Profile()
    profiler.enable()
    export_once(model, x, target, "export", out)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["attn64", "attn64-dyn", "mobilenet_v2"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", choices=sorted(MODELS), help="cProfile one front_end='export' call")
    parser.add_argument("--cold", action="store_true", help="time the first export of fresh processes")
    parser.add_argument("--baseline-python", type=Path,
                        help="with --cold: also time front_end='export' from this python/ (before a change)")
    parser.add_argument("--first-call", nargs=2, metavar=("FRONT_END", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="attn2, one round, to check the bench works")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.rounds = ["attn2"], 1
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.first_call:
            first_call(*args.first_call, Path(tmp))
        elif args.profile:
            profile(args.profile, Path(tmp))
        else:
            mode = "first call of fresh processes" if args.cold else "after one warm-up each"
            print(f"torch {torch.__version__}, {args.rounds} interleaved rounds, {mode}")
            for name in args.models:
                if args.cold:
                    cold(name, args.rounds, args.baseline_python)
                else:
                    bench(name, args.rounds, Path(tmp))


if __name__ == "__main__":
    main()
