"""Time graph building (trace + IR + convert + graph text), without weights or checking.

Runs the same internal stages as ``fastnnef.export.export_model_to_nnef`` up to the text of
``graph.nnef``, for models of 8/16/32/64 sibling layers, and prints a table (best of
``--repeat`` runs per size). ``--profile N`` prints a cProfile of the N-layer build instead.
``--smoke`` builds 2 layers once (CI runs it, tests/test_benches.py).

    PYTHONPATH=python python benches/bench_graph_build.py [--kind mlp|attn] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.export import convert_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.nnef.writer import graph_text
from fastnnef.op.families import load_handlers
from fastnnef.torch_graph.ir import build_ir
from fastnnef.torch_graph.trace import trace_model

WIDTH = 256


class Attention(nn.Module):
    """A small single-head attention block: q/k/v projections, SDPA, output projection."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x))) + x


def make_model(kind: str, layers: int) -> tuple[nn.Module, torch.Tensor]:
    if kind == "mlp":
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
        return nn.Sequential(*blocks).eval(), torch.randn(1, WIDTH)
    width = 64
    return nn.Sequential(*(Attention(width) for _ in range(layers))).eval(), torch.randn(1, 16, width)


def build_graph(model: nn.Module, x: torch.Tensor, stages: dict[str, float]) -> str:
    """export_model_to_nnef's steps up to graph.nnef text (no archive, no check)."""
    target = TractNNEF.latest()
    t0 = time.perf_counter()
    traced = trace_model(model, (x,), None, None)
    t1 = time.perf_counter()
    ir = build_ir(traced, {})
    t2 = time.perf_counter()
    graph = convert_to_nnef(traced, ir, target, "natural_verbose", [], model)
    t3 = time.perf_counter()
    text = graph_text(graph)
    t4 = time.perf_counter()
    for name, dt in (("trace", t1 - t0), ("ir", t2 - t1), ("convert", t3 - t2), ("text", t4 - t3)):
        stages[name] = stages.get(name, 0.0) + dt
    return text


def best_of(repeat: int, fn: Callable[[dict[str, float]], str]) -> tuple[float, dict[str, float], str]:
    best = (float("inf"), {}, "")
    for _ in range(repeat):
        stages: dict[str, float] = {}
        start = time.perf_counter()
        text = fn(stages)
        total = time.perf_counter() - start
        if total < best[0]:
            best = (total, stages, text)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=["mlp", "attn"], default="mlp")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--profile", type=int, default=0, help="cProfile the build of N layers")
    parser.add_argument("--smoke", action="store_true", help="tiny run (2 layers, once) to check the bench works")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.repeat = [2], 1
    torch.manual_seed(0)
    load_handlers()
    warm_model, warm_x = make_model(args.kind, 2)
    build_graph(warm_model, warm_x, {})  # imports, first-trace costs

    if args.profile:
        model, x = make_model(args.kind, args.profile)
        profiler = cProfile.Profile()
        profiler.enable()
        build_graph(model, x, {})
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return

    print(f"kind={args.kind} width={WIDTH if args.kind == 'mlp' else 64} best of {args.repeat}")
    print(f"{'layers':>6} {'ops':>6} {'total s':>8} {'trace':>7} {'ir':>7} {'convert':>8} {'text':>7} {'ms/layer':>9}")
    for n in args.sizes:
        model, x = make_model(args.kind, n)
        total, stages, text = best_of(args.repeat, lambda st, model=model, x=x: build_graph(model, x, st))
        ops = sum(1 for line in text.splitlines() if " = " in line and "(" in line)
        print(
            f"{n:>6} {ops:>6} {total:>8.3f} {stages['trace']:>7.3f} {stages['ir']:>7.3f} "
            f"{stages['convert']:>8.3f} {stages['text']:>7.3f} {1000 * total / n:>9.2f}"
        )


if __name__ == "__main__":
    main()
