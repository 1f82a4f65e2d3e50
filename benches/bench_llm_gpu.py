"""LLM artefacts on tract's CUDA runtime and on the CPU, ours beside the reference's: one
command for a machine with an NVIDIA GPU.

The checkpoints and the two exporters are bench_llm_artefact_speed.py's (random weights,
llama ~100 M parameters, mixtral 8 experts top-2; each export a fresh process, ``-nv``);
the rows are llama f16 and Q4_0 and mixtral f32, f16 and Q4_0 (``--rows``). Each artefact
is then run by the ``tract`` Python package (PyPI, the version fastnnef links, which
bundles tract's CUDA runtime and loads the driver lazily): ``runtime_for_name("cuda")``
and the default CPU runtime, interleaved with the other side's artefact, best of
``--repeats``: load (parse, optimize, plan), prefill tokens/s (one ``--prompt``-token
prompt, empty cache) and decode tokens/s (``--decode`` one-token steps feeding the cache
back), in wall time (a GPU's work is not this process's CPU time). One JSON line per run
(artefact x runtime), then one per pair with ours / the reference's speed (> 1: ours
faster). Where no CUDA driver is, the CUDA rows are JSON lines with ``"skipped"`` and the
reason, and the CPU rows still run.

    PYTHONPATH=python python benches/bench_llm_gpu.py [--reference /tmp/t2n-bench] [--reference-python PY]

The reference is found as in bench_llm_artefact_speed.py (skipped with a note when it is
not installed). ``--smoke`` runs a 1-layer mixtral as Q4_0, a short
prompt, once, in a temporary directory removed afterwards (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tract
from bench_llm_artefact_speed import ARTEFACT, FAMILIES, SMOKE_DIMS, Exporter, build_checkpoints
from bench_llm_vs_torch_to_nnef import FASTNNEF_PYTHON, reference_missing, stub_tract

from fastnnef._native import TRACT_VERSION

T = TypeVar("T")
ROWS = ["llama:f16", "llama:q4_0", "mixtral:f32", "mixtral:f16", "mixtral:q4_0"]
SMOKE_ROWS = ["mixtral:q4_0"]  # one export: the smoke run stays within its time limit on a loaded machine
RUNTIMES = ["cuda", "cpu"]
# tract's names for the runtimes of a row.
TRACT_RUNTIME = {"cuda": "cuda", "cpu": "default"}
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def wall(call: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def runtime_missing(name: str) -> str:
    """Why tract cannot give the runtime ``name`` here ('' when it can)."""
    try:
        tract.runtime_for_name(TRACT_RUNTIME[name])
    except tract.TractError as error:
        return str(error).split("\n\nStack backtrace")[0].replace("\n", " ")
    return ""


def gpu_name() -> str:
    """What nvidia-smi calls the first GPU ('' without one)."""
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return query.stdout.strip().splitlines()[0] if query.stdout.strip() else ""


def shape_and_dtype(fact: Any) -> tuple[list[int], type]:
    """The empty (prefill) value of an input from its fact's text, e.g. ``1,4,P,16,f32``:
    a symbolic dimension is the past length, 0 at prefill."""
    *dims, dtype = str(fact).split(",")
    return [int(d) if d.isdigit() else 0 for d in dims], NUMPY_DTYPES[dtype.upper()]


class Session:
    """One artefact prepared on one runtime: inputs are the token ids then the caches,
    outputs the logits then the caches."""

    def __init__(self, path: Path, runtime: str) -> None:
        def load() -> Any:
            model = tract.nnef().with_tract_extra().with_tract_transformers().load(str(path))
            if runtime == "cpu":
                return model.into_runnable()
            return tract.runtime_for_name(TRACT_RUNTIME[runtime]).prepare(model)

        self.load_s, self.runnable = wall(load)
        facts = [self.runnable.input_fact(i) for i in range(self.runnable.input_count())]
        self.empty = [np.zeros(shape, dtype) for shape, dtype in map(shape_and_dtype, facts[1:])]

    def step(self, ids: np.ndarray, cache: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        logits, *cache = (t.to_numpy() for t in self.runnable.run([ids.astype(np.int64), *cache]))
        return int(logits.reshape(-1, logits.shape[-1])[-1].argmax()), cache

    def generate(self, prompt: np.ndarray, steps: int) -> tuple[float, float, list[int]]:
        """Prefill and decode seconds, and the greedy tokens."""
        prefill_s, (token, cache) = wall(lambda: self.step(prompt, self.empty))
        tokens = [token]
        start = time.perf_counter()
        for _ in range(steps):
            token, cache = self.step(np.array([[token]]), cache)
            tokens.append(token)
        return prefill_s, time.perf_counter() - start, tokens


def measure(paths: dict[str, Path], runtime: str, prompt: np.ndarray, steps: int, repeats: int) -> list[dict[str, Any]]:
    """Per side, the best load, prefill and decode over ``repeats`` rounds, the sides
    interleaved (ABBA) so that both see the same machine."""
    best: dict[str, dict[str, Any]] = {side: {"load_s": np.inf, "prefill_s": np.inf, "decode_s": np.inf}
                                       for side in paths}
    for round_ in range(repeats):
        for side, path in list(paths.items())[:: 1 if round_ % 2 == 0 else -1]:
            session = Session(path, runtime)
            session.generate(prompt[:, :8], 1)  # warm-up (kernels, allocations)
            prefill_s, decode_s, tokens = session.generate(prompt, steps)
            row = best[side]
            row.update(tokens=tokens, load_s=min(row["load_s"], session.load_s),
                       prefill_s=min(row["prefill_s"], prefill_s), decode_s=min(row["decode_s"], decode_s))
            del session  # one artefact on the device at a time
    return [{"side": side, **{k: round(v, 4) for k, v in row.items() if k != "tokens"},
             "prefill_tok_s": round(prompt.shape[1] / row["prefill_s"], 1),
             "decode_tok_s": round(steps / row["decode_s"], 1), "tokens": row["tokens"]}
            for side, row in best.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path,
                        help="where torch_to_nnef_llm is installed (default: this environment)")
    parser.add_argument("--reference-python", default=sys.executable, help="the interpreter that runs the reference")
    parser.add_argument("--skip-reference", action="store_true", help="time our artefacts only")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-llm-gpu"))
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS, help="family:form")
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=RUNTIMES)
    parser.add_argument("--prompt", type=int, default=128, help="prefill length")
    parser.add_argument("--decode", type=int, default=64, help="decode steps")
    parser.add_argument("--repeats", type=int, default=3, help="best of, interleaved")
    parser.add_argument("--smoke", action="store_true", help="a tiny mixtral as Q4_0, in a temp dir")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.prompt, args.decode, args.repeats = SMOKE_ROWS, 8, 4, 1
    reference: Exporter | None = None
    if not args.skip_reference:
        if args.reference is None and args.reference_python == sys.executable and (missing := reference_missing()):
            print(json.dumps({"reference": "skipped", "reason": f"no --reference, and torch_to_nnef_llm cannot be "
                              f"imported here: {missing}"}))
        else:
            reference = Exporter("reference", args.reference_python, str(args.reference or ""))
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="fastnnef-llm-gpu-") as tmp:
            compare(args, Path(tmp), reference)
    else:
        compare(args, args.workdir, reference)


def compare(args: argparse.Namespace, workdir: Path, reference: Exporter | None) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    families = sorted({row.split(":")[0] for row in args.rows})
    build_checkpoints(workdir / "checkpoints", families, args.smoke)
    stub = stub_tract(workdir, TRACT_VERSION)  # the linked tract's version, which the tract package must match
    exporters = [Exporter("fastnnef", sys.executable, str(FASTNNEF_PYTHON)), *([reference] if reference else [])]
    missing = {runtime: runtime_missing(runtime) for runtime in args.runtimes}
    print(json.dumps({"tract_package": version("tract"), "linked_tract": TRACT_VERSION, "gpu": gpu_name(),
                      "prompt": args.prompt, "decode": args.decode, "repeats": args.repeats}), flush=True)
    for family_form in args.rows:
        family, form = family_form.split(":")
        vocab = SMOKE_DIMS["vocab_size"] if args.smoke else FAMILIES[family][2]["vocab_size"]
        prompt = np.random.default_rng(0).integers(3, vocab, (1, args.prompt))
        key = {"family": family, "form": form}
        paths = {}
        for exporter in exporters:
            out = workdir / "artefacts" / f"{family}-{form}-{exporter.name}"
            try:
                export_s = exporter.export(workdir / "checkpoints" / family, out, form, stub)
                paths[exporter.name] = out / ARTEFACT
                print(json.dumps({**key, "side": exporter.name, "export_s": round(export_s, 2)}), flush=True)
            except SystemExit as failure:  # the reference cannot export every family
                print(json.dumps({**key, "side": exporter.name, "export": "failed", "reason": str(failure)[-600:]}))
        for runtime in args.runtimes:
            if missing[runtime]:
                print(json.dumps({**key, "runtime": runtime, "skipped": missing[runtime]}), flush=True)
                continue
            rows = measure(paths, runtime, prompt, args.decode, args.repeats)
            for row in rows:
                print(json.dumps({**key, "runtime": runtime, **row}), flush=True)
            if len(rows) == 2:
                ours, ref = rows
                print(json.dumps({**key, "runtime": runtime, "side": "ratio",
                                  "prefill": round(ref["prefill_s"] / ours["prefill_s"], 3),
                                  "decode": round(ref["decode_s"] / ours["decode_s"], 3),
                                  "tokens_equal": float(np.mean(np.equal(ours["tokens"], ref["tokens"])))}),
                      flush=True)


if __name__ == "__main__":
    main()
