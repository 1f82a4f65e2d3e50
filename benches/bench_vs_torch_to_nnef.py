"""Side by side: fastnnef vs torch_to_nnef exporting the same models (export only, no check).

Before timing, both artefacts of each model are loaded by the linked tract and run on the
same input: the outputs must agree, so the two exporters are compared on equal work.

torch_to_nnef is not a dependency; install it apart, e.g.
    pip install --target /tmp/t2n --no-deps torch_to_nnef==0.24.12 nnef nnef-tools mako pyyaml
    PYTHONPATH=python:/tmp/t2n .venv/bin/python benches/bench_vs_torch_to_nnef.py
Its TractNNEF downloads a tract CLI at construction unless given a binary: this bench
hands it a stub that only answers ``--version`` (no check is run). Without torch_to_nnef
(not installed: a note says so; or ``--no-reference``) only fastnnef runs, its outputs
checked against PyTorch's. ``--smoke`` exports 1-layer, 16-wide models (and the
weight-heavy one 32 wide) in a temp dir, removed afterwards (CI runs it,
tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import fastnnef
from fastnnef.check import TractArtefact

TRACT = "0.23.9"


def mlp(layers: int, width: int) -> nn.Module:
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks).eval()


class Block(nn.Module):
    """A residual block: several ops per submodule, the shape the reference re-realises."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def blocks(layers: int, width: int) -> nn.Module:
    return nn.Sequential(*(Block(width) for _ in range(layers))).eval()


def stub_tract(folder: Path) -> Path:
    path = folder / "tract"
    path.write_text(f"#!/bin/sh\necho 'tract {TRACT}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def reference_missing() -> str:
    """Why torch_to_nnef cannot be imported here ('' when it can)."""
    try:
        import torch_to_nnef.inference_target  # noqa: F401
    except ImportError as err:
        return str(err)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--big", type=int, default=2048, help="width of the 8-layer weight-heavy model")
    parser.add_argument("--no-reference", action="store_true", help="time fastnnef only")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny run (--layers 1 --width 16 --big 32) to check the bench works")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.width, args.big = [1], 16, 32
    if not args.no_reference and (missing := reference_missing()):
        print(f"(reference skipped: torch_to_nnef cannot be imported here: {missing})")
        args.no_reference = True
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")  # torch.jit.trace deprecation notices, once per export
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench_t2n_", dir=os.environ.get("BENCH_DIR")) as tmp:
        compare(args, Path(tmp))


def compare(args: argparse.Namespace, work: Path) -> None:
    """Export every model with both libraries (fastnnef alone with --no-reference), print the table."""
    reference: Any = None
    if not args.no_reference:
        import torch_to_nnef
        from torch_to_nnef.inference_target import TractNNEF as RefTract

        reference = torch_to_nnef
        ref_target = RefTract(TRACT, check_io=False, specific_tract_binary_path=stub_tract(work))
    ours_target = fastnnef.TractNNEF(TRACT, check_io=False)
    cases = [(f"mlp {n}x{args.width}", mlp(n, args.width), torch.randn(4, args.width), 0, ".tar")
             for n in args.layers]
    cases += [(f"blocks {n}x{args.width}", blocks(n, args.width), torch.randn(4, args.width), 0, ".tar")
              for n in args.layers]
    big = mlp(8, args.big)
    mb = sum(p.numel() for p in big.parameters()) * 4 / 1e6
    cases += [(f"mlp 8x{args.big} ({mb:.0f} MB)", big, torch.randn(4, args.big), level, sfx)
              for level, sfx in ((0, ".tar"), (1, ".tgz"))]
    versions = "torch_to_nnef not run" if reference is None else f"torch_to_nnef {reference.__version__}"
    print(f"{versions} vs fastnnef {fastnnef.__version__}, torch {torch.__version__}")
    print(f"{'model':28s} {'format':6s} {'torch_to_nnef s':>16s} {'fastnnef s':>11s} {'speed-up':>9s}")
    for name, model, x, level, sfx in cases:
        t_ref = None
        if reference is not None:
            ref_path = work / f"ref_{name.split()[1]}{sfx}"
            t_ref = timed(lambda model=model, x=x, level=level: reference.export_model_to_nnef(
                model, x, work / "ref.nnef", ref_target, input_names=["x"], output_names=["y"],
                compression_level=level))
            (work / f"ref.nnef{sfx}").rename(ref_path)
        ours_path = work / f"ours_{name.split()[1]}{sfx}"
        t_ours = timed(lambda model=model, x=x, level=level: fastnnef.export_model_to_nnef(
            model, x, work / "ours.nnef", ours_target, input_names=["x"], output_names=["y"],
            compression_level=level))
        (work / f"ours.nnef{sfx}").rename(ours_path)
        (y_ours,) = TractArtefact.load(ours_path).run([x])
        ours_path.unlink()
        if t_ref is None:
            with torch.no_grad():
                np.testing.assert_allclose(y_ours, model(x).numpy(), rtol=1e-4, atol=1e-5)
            print(f"{name:28s} {sfx[1:]:6s} {'-':>16s} {t_ours:11.2f} {'-':>9s}")
        else:
            (y_ref,) = TractArtefact.load(ref_path).run([x])
            ref_path.unlink()
            np.testing.assert_allclose(y_ours, y_ref, rtol=1e-5, atol=1e-6)
            print(f"{name:28s} {sfx[1:]:6s} {t_ref:16.2f} {t_ours:11.2f} {t_ref / t_ours:8.1f}x")


if __name__ == "__main__":
    main()
