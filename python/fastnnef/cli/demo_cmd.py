"""``fastnnef demo``: export the bundled example model to ``.nnef.tgz`` and check it."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fastnnef.cli.inspect_cmd import describe_artefact


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("demo", help="export the bundled example model and check it in tract")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="where to write the artefact (default: a temporary directory)")
    p.add_argument("--compression-level", type=int, default=6, help="gzip level 1..9 (default 6)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from fastnnef.examples import tiny_kws
    from fastnnef.export import export_model_to_nnef
    from fastnnef.inference_target import TractNNEF

    model, inputs = tiny_kws.build()
    target = TractNNEF.latest().with_dynamic_axes({"mels": {2: "T"}})
    with tempfile.TemporaryDirectory() as tmp:
        out = args.output or Path(tmp) / "tiny_kws.nnef.tgz"
        start = time.perf_counter()
        path = export_model_to_nnef(
            model, inputs, out, target, input_names=["mels"], output_names=["log_probs"],
            compression_level=args.compression_level,
            custom_extensions=["tract_assert T >= 1"],
        )
        elapsed = time.perf_counter() - start
        n_params = sum(p.numel() for p in model.parameters())
        print(f"exported TinyKWS ({n_params:,} parameters) to {path} in {elapsed:.2f} s, "
              "checked in-process by tract at tolerance 'approximate'")
        print(describe_artefact(path))
        # The time axis is dynamic: run the same artefact at another length.
        from fastnnef.check import TractArtefact

        longer = torch.randn(1, tiny_kws.N_MELS, 123)
        (got,) = TractArtefact.load(path).run([longer])
        with torch.no_grad():
            expected = model(longer).numpy()
        err = float(abs(got - expected).max())
        print(f"dynamic axis T: ran the artefact at T=123 (exported at T=50), max abs error {err:.2e}")
        if args.output is None:
            print("(pass -o PATH to keep the artefact)")
        return 0 if err < 1e-3 else 1
