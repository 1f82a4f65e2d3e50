"""``tract_moe_ffn`` alone in the linked tract: the same experts in its ``linear`` layout
(w1/w3 ``[E, H, D]``, w2 ``[E, D, H]``: what transformers stores, what fastnnef writes)
against its ``canonical`` one (their transposes), and against the linear layout with a
down-projection bias of zeros (``linear+0``: the same values, but tract then prepares
per-expert plans instead of its direct Q4_0 plan), per weight encoding (issue 28 item 3).

One NNEF graph per layout and encoding holds only the op (router ``[E, D]``, SwiGLU,
softmax over the top-k), its weights random, written in a temporary directory (removed
afterwards). The three artefacts of an encoding are loaded by the linked tract, then timed
interleaved (ABBA, three rounds, best of five per round) on the same tokens, from the CPU
time of this process (tract runs on the calling thread; CPU time is steadier than wall
time on a shared machine). In f32 and f16 the two layouts hold the same values and must
give the same output; in Q4_0 they do not (blocks of 32 run along the last axis, so the
canonical layout quantizes other groups of values), and tract runs a canonical Q4_0 op in
its reference evaluator, not a prepared plan: the row shows what that costs.

    PYTHONPATH=python .venv/bin/python benches/bench_moe_ffn_layout.py [--tokens 1 64 256]

``--smoke``: tiny dimensions, one token count, one round (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastnnef import _native
from fastnnef.check import TractArtefact

VARIANTS = ("linear", "canonical", "linear+0")
ENCODINGS = ("f32", "f16", "q4_0")


def write_artefact(path: Path, variant: str, encoding: str, weights: dict[str, np.ndarray], top_k: int) -> None:
    """A directory artefact of one ``tract_moe_ffn`` over ``x [n, D]`` with ``weights`` (in
    the linear layout) written as ``variant`` says, as ``encoding`` (router and bias f32)."""
    layout = "canonical" if variant == "canonical" else "linear"
    experts = {name: weights[name] if layout == "linear" else np.ascontiguousarray(weights[name].transpose(0, 2, 1))
               for name in ("w1", "w2", "w3")}
    count, model = weights["wg"].shape
    zero_bias = variant == "linear+0"
    lines = ["version 1.0;", "extension tract_registry tract_transformers;", "", "graph moe(x) -> (y)", "{",
             f"  x = external<scalar>(shape = [n, {model}]);",
             f"  wg = variable<scalar>(label = 'wg', shape = {list(weights['wg'].shape)});"]
    lines += [f"  {name} = variable<scalar>(label = '{name}', shape = {list(value.shape)});"
              for name, value in experts.items()]
    if zero_bias:
        lines.append(f"  b2 = variable<scalar>(label = 'b2', shape = [{count}, {model}]);")
    bias = "w2_bias = b2, " if zero_bias else ""
    lines += [f"  y = tract_moe_ffn(x, wg, w1, w2, w3, k = {top_k}, activation = 'swiglu', gate = 'softmax_topk', "
              f"{bias}expert_layout = '{layout}');", "}", ""]
    writer = _native.ArtefactWriter(str(path), "dir")
    writer.add_file("graph.nnef", "\n".join(lines).encode())
    if zero_bias:
        writer.add_tensor("b2", np.zeros((count, model), np.float32), "f32")
    writer.add_tensor("w1", experts["w1"], encoding)
    writer.add_tensor("w2", experts["w2"], encoding)
    writer.add_tensor("w3", experts["w3"], encoding)
    writer.add_tensor("wg", weights["wg"], "f32")
    writer.finish()


def best_cpu_s(run: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--model", type=int, default=512, help="D, the hidden size (bench_llm_artefact_speed's MoE)")
    parser.add_argument("--hidden", type=int, default=1024, help="H, one expert's width")
    parser.add_argument("--tokens", type=int, nargs="*", default=[1, 64, 256])
    parser.add_argument("--smoke", action="store_true", help="tiny dimensions, one token count, one round")
    args = parser.parse_args()
    if args.smoke:
        args.model, args.hidden, args.tokens = 64, 64, [4]
    rounds, repeats = (1, 1) if args.smoke else (3, 5)
    rng = np.random.default_rng(0)
    e, d, h = args.experts, args.model, args.hidden
    weights = {"wg": rng.standard_normal((e, d)) * 0.1, "w1": rng.standard_normal((e, h, d)) * 0.05,
               "w3": rng.standard_normal((e, h, d)) * 0.05, "w2": rng.standard_normal((e, d, h)) * 0.05}
    weights = {name: value.astype(np.float32) for name, value in weights.items()}
    print(f"tract_moe_ffn: {e} experts, top-{args.top_k}, D {d}, H {h}; best CPU ms of the op, "
          f"{rounds} interleaved rounds of {repeats}")
    print(f"{'encoding':8} {'tokens':>6} {'linear':>8} {'canonical':>9} {'linear+0':>8}   max |output - linear's|")
    with tempfile.TemporaryDirectory(prefix="bench-moe-layout-") as tmp:
        for encoding in ENCODINGS:
            artefacts = {}
            for variant in VARIANTS:
                path = Path(tmp) / f"{variant}-{encoding}"
                write_artefact(path, variant, encoding, weights, args.top_k)
                artefacts[variant] = TractArtefact.load(path)
            for n in args.tokens:
                x = rng.standard_normal((n, d)).astype(np.float32)
                outputs = {variant: artefacts[variant].run([x])[0] for variant in VARIANTS}
                diffs = [float(np.abs(outputs[v] - outputs["linear"]).max()) for v in VARIANTS[1:]]
                times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
                for r in range(rounds):
                    for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                        artefact = artefacts[variant]
                        times[variant].append(best_cpu_s(lambda a=artefact, x=x: a.run([x]), repeats))
                lin, can, zero = (min(times[variant]) * 1e3 for variant in VARIANTS)
                print(f"{encoding:8} {n:>6} {lin:>8.2f} {can:>9.2f} {zero:>8.2f}   "
                      f"canonical {diffs[0]:.2g}, linear+0 {diffs[1]:.2g}", flush=True)


if __name__ == "__main__":
    main()
