"""Multi-GB exports side by side: torch_to_nnef vs fastnnef, each export in a fresh process.

Models: llama-like f32 (embedding, RMSNorm, single-head attention, SwiGLU MLP, lm head),
~1 GB (2 layers) and ~4 GB (17 layers), written to a directory, a ``.tar`` and a ``.tgz``
at level 1 by both libraries from the same weights (a locally generated ``.safetensors``
checkpoint, loaded into memory first: export cost only, no check_io). Then fastnnef
exports the ~4 GB model *streamed from the checkpoint* (``init_empty_weights`` +
``load_offloaded_checkpoint``: the weights never sit in memory), and ``cp`` copies the
checkpoint as the yardstick of its throughput.

The floor of a directory export (the VM's first-write effects, apart from fastnnef): after
each fastnnef export to a directory, a fresh Python process writes the same files (same
names, same sizes, bytes from one reused buffer, no fsync, as the exporters) into a new
directory: ``floor`` is its wall time, ``ours / floor`` how far the export's writing is
from plain ``write`` calls of the same bytes on this machine at that moment (fastnnef writes
a directory's parameter files while the model is captured: the export's writing then counts
only what is left after the capture, the whole call everything).

Per run: wall time of the export call, peak RSS (``VmHWM`` of the worker) and its
baseline (Python + torch + the library imported, model structure built, weights not yet
loaded), and the artefact's size. Both artefacts of each model are run by the linked tract
on the same input and must agree before a row is printed.

torch_to_nnef is an optional dependency of this bench only:

    pip install --target /tmp/t2n --no-deps torch_to_nnef==0.24.12 nnef nnef-tools mako pyyaml six
    PYTHONPATH=python:/tmp/t2n .venv/bin/python benches/bench_vs_reference.py --sizes 1 4

Without it (``--no-reference``, or when torch_to_nnef is not installed: a note says so)
only fastnnef runs. Needs ~3x the largest model of free disk under ``--dir`` (default: the
system temp dir); everything is removed at the end. ``--smoke`` runs the same steps on a
1-layer model of a few hundred KB (size 0), to a directory only unless ``--formats`` says
otherwise (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

TRACT = "0.23.9"
# Per size (GB): layers, model width, MLP width, vocabulary. 1 and 4: ~0.94 GB and ~4.0 GB of
# f32 weights; 0: ~0.2 MB, for --smoke.
SIZES = {0: (1, 64, 128, 256), 1: (2, 2048, 5632, 32000), 4: (17, 2048, 5632, 32000)}


def build_model(size: int) -> Any:
    import torch
    from torch import nn

    layers, dim, ffn, vocab = SIZES[size]

    class RMSNorm(nn.Module):
        def __init__(self, dim: int):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
            self.down = nn.Linear(ffn, dim, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.attn_norm(x)
            att = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) * dim**-0.5, dim=-1) @ self.v(h)
            x = x + self.o(att)
            h = self.mlp_norm(x)
            return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))

    class LlamaLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = RMSNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    return LlamaLike().eval()


def status_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process. ``ru_maxrss`` is not used: Linux
    carries it across fork + exec, so a worker would report its parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(lib: str, mode: str, fmt: str, ckpt: str, out: str, size: int, stub: str) -> None:
    """One export in this (fresh) process; prints a JSON line."""
    import logging
    import warnings

    import torch

    warnings.simplefilter("ignore")
    write_seconds: list[float] = []

    class WriteTime(logging.Handler):
        # fastnnef logs "wrote <path> (<n> tensors, <MiB> MiB) in <s> s" after the last byte.
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("wrote "):
                write_seconds.append(float(record.args[-1]))  # type: ignore[index]

    logging.getLogger("fastnnef").addHandler(WriteTime())
    logging.getLogger("fastnnef").propagate = False
    logging.getLogger("torch_to_nnef").setLevel(logging.ERROR)
    if lib == "ref":
        import torch_to_nnef as t2n
        from torch_to_nnef.inference_target import TractNNEF

        target = TractNNEF(TRACT, check_io=False, specific_tract_binary_path=Path(stub))
        export = t2n.export_model_to_nnef
    else:
        import fastnnef as t2n  # type: ignore[no-redef]
        from fastnnef.tensor.offload_load import load_offloaded_checkpoint

        target = t2n.TractNNEF(TRACT, check_io=False)
        export = t2n.export_model_to_nnef
    from fastnnef.utils import init_empty_weights as empty

    with empty():
        model = build_model(size)
    baseline = status_bytes("VmRSS")
    if mode == "stream":
        load_offloaded_checkpoint(model, ckpt)
    else:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(ckpt), assign=True)
    level = {"dir": None, "tar": 0, "tgz": 1}[fmt]
    ids = torch.arange(8).reshape(1, 8)
    start = time.perf_counter()
    path = export(model, ids, Path(out), target, input_names=["ids"], output_names=["logits"],
                  compression_level=level)
    wall = time.perf_counter() - start
    peak = status_bytes("VmHWM")
    write = write_seconds[-1] if write_seconds else None
    print(json.dumps({"wall": wall, "write": write, "peak": peak, "baseline": baseline, "path": str(path)}))


def write_floor(source: str, out: str) -> None:
    """Write ``source``'s files again under ``out`` with plain ``write`` calls from one
    64 MiB buffer (this process is fresh, as an export's); prints the wall time."""
    files = [(p.relative_to(source), p.stat().st_size) for p in sorted(Path(source).rglob("*")) if p.is_file()]
    buffer = memoryview(os.urandom(64 << 20))
    start = time.perf_counter()
    for name, size in files:
        target = Path(out) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            for offset in range(0, size, len(buffer)):
                f.write(buffer[: min(len(buffer), size - offset)])
    print(json.dumps({"wall": time.perf_counter() - start, "files": len(files)}))


def size_of(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def run_worker(args: list[str]) -> dict[str, Any]:
    # Start each export with no dirty pages of the previous one still being written back:
    # otherwise whichever runs right after a large write pays for it (throttled writes).
    os.sync()
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_floor(result: dict[str, Any], folder: Path, nbytes: int) -> None:
    """Time plain writes of the files of the directory artefact ``result`` names (a fresh
    process, after a sync, like the export) and print them beside the export's writing."""
    floor = run_worker(["--floor", result["path"], str(folder)])
    shutil.rmtree(folder)
    write = result["write"] or result["wall"]
    print(f"{'':8s} {'dir':6s} {'floor':14s} {floor['wall']:8.2f}  plain writes of the same {floor['files']} files "
          f"({nbytes / floor['wall'] / 1e6:.0f} MB/s); the export's writing after the capture {write:.2f} s = "
          f"{write / floor['wall']:.2f}x the floor (the files written during the capture not included), "
          f"its whole call {result['wall'] / floor['wall']:.2f}x", flush=True)


def make_checkpoint(path: Path, size: int) -> None:
    """Random-normal weights (std 0.02, like a real LLM's), written one tensor at a time."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    state = {}
    with torch.no_grad():
        for name, t in build_model(size).state_dict().items():
            state[name] = t.normal_(0, 0.02) if not name.endswith("norm.weight") else t
    save_file(state, path)


def outputs_agree(a: Path, b: Path) -> None:
    import numpy as np
    import torch

    from fastnnef.check import TractArtefact

    ids = torch.arange(8).reshape(1, 8)
    (ya,) = TractArtefact.load(a).run([ids])
    (yb,) = TractArtefact.load(b).run([ids])
    np.testing.assert_allclose(ya, yb, rtol=1e-4, atol=1e-4)


def stub_tract(folder: Path) -> Path:
    path = folder / "tract"
    path.write_text(f"#!/bin/sh\necho 'tract {TRACT}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def reference_missing() -> str:
    """Why torch_to_nnef cannot be imported here ('' when it can). Imported only when
    present (it imports torch, which this parent process does not need otherwise)."""
    if find_spec("torch_to_nnef") is None:
        return "not installed"
    try:
        import torch_to_nnef.inference_target  # noqa: F401
    except ImportError as err:
        return str(err)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4], choices=sorted(SIZES))
    parser.add_argument("--formats", nargs="+", default=None, help="dir, tar, tgz (default: all three)")
    parser.add_argument("--no-reference", action="store_true", help="run fastnnef only")
    parser.add_argument("--reference-sizes", type=int, nargs="*", default=None,
                        help="sizes on which torch_to_nnef runs too (default: all of --sizes)")
    parser.add_argument("--dir", default=None, help="working directory (default: system temp)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny run (--sizes 0, --formats dir unless given) to check the bench works")
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--make-checkpoint", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_checkpoint:
        make_checkpoint(Path(args.make_checkpoint[0]), int(args.make_checkpoint[1]))
        return
    if args.floor:
        write_floor(*args.floor)
        return
    if args.worker:
        lib, mode, fmt, ckpt, out, size, stub = args.worker
        worker(lib, mode, fmt, ckpt, out, int(size), stub)
        return
    if args.smoke:
        args.sizes, args.reference_sizes = [0], None
        args.formats = args.formats or ["dir"]
    args.formats = args.formats or ["dir", "tar", "tgz"]
    if not args.no_reference and (missing := reference_missing()):
        print(f"(reference skipped: torch_to_nnef cannot be imported here: {missing})")
        args.no_reference = True
    work = Path(tempfile.mkdtemp(prefix="bench_ref_", dir=args.dir))
    stub = stub_tract(work)
    ref_sizes = args.sizes if args.reference_sizes is None else args.reference_sizes
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; work dir {work}")
    print(f"{'model':8s} {'fmt':6s} {'lib':14s} {'wall s':>8s} {'peak RSS MB':>12s} {'above base MB':>14s} "
          f"{'size MB':>9s} {'ratio':>7s}")
    try:
        for size in args.sizes:
            ckpt = work / f"llama{size}.safetensors"
            subprocess.run([sys.executable, __file__, "--make-checkpoint", str(ckpt), str(size)], check=True)
            nbytes = ckpt.stat().st_size
            libs = ["ref", "ours"] if size in ref_sizes and not args.no_reference else ["ours"]
            for fmt in args.formats:
                results: dict[str, tuple[dict[str, Any], int]] = {}
                for lib in libs:
                    out = work / f"{lib}{size}.nnef"
                    r = run_worker(["--worker", lib, "memory", fmt, str(ckpt), str(out), str(size), str(stub)])
                    results[lib] = (r, size_of(Path(r["path"])))
                    name = "torch_to_nnef" if lib == "ref" else "fastnnef"
                    print(f"{nbytes / 1e9:5.2f}GB {fmt:6s} {name:14s} {r['wall']:8.2f} {r['peak'] / 1e6:12.0f} "
                          f"{(r['peak'] - r['baseline']) / 1e6:14.0f} {results[lib][1] / 1e6:9.1f} "
                          f"{results[lib][1] / nbytes:7.3f}", flush=True)
                    if fmt == "dir" and lib == "ours":
                        print_floor(r, work / "floor", nbytes)
                if len(results) == 2:
                    outputs_agree(Path(results["ref"][0]["path"]), Path(results["ours"][0]["path"]))
                    speed = results["ref"][0]["wall"] / results["ours"][0]["wall"]
                    print(f"{'':8s} {fmt:6s} {'speed-up':14s} {speed:7.1f}x  (outputs agree in tract)", flush=True)
                for r, _ in results.values():
                    p = Path(r["path"])
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
            # Streamed from the checkpoint: weights never in memory.
            for fmt in args.formats:
                out = work / f"stream{size}.nnef"
                r = run_worker(["--worker", "ours", "stream", fmt, str(ckpt), str(out), str(size), str(stub)])
                got = size_of(Path(r["path"]))
                print(f"{nbytes / 1e9:5.2f}GB {fmt:6s} {'fastnnef stream':14s} {r['wall']:8.2f} "
                      f"{r['peak'] / 1e6:12.0f} {(r['peak'] - r['baseline']) / 1e6:14.0f} {got / 1e6:9.1f} "
                      f"{got / nbytes:7.3f}", flush=True)
                if fmt == "dir":
                    start = time.perf_counter()
                    subprocess.run(["cp", str(ckpt), str(work / "copy.safetensors")], check=True)
                    cp = time.perf_counter() - start
                    (work / "copy.safetensors").unlink()
                    # The files written during the capture are not in r['write']: the whole
                    # call's throughput is the one to compare.
                    print(f"{'':8s} {'dir':6s} {'vs cp':14s} cp {nbytes / cp / 1e6:.0f} MB/s ({cp:.2f} s); whole "
                          f"export call {nbytes / r['wall'] / 1e6:.0f} MB/s ({cp / r['wall'] * 100:.0f}% of cp); "
                          f"writing left after the capture {r['write']:.2f} s", flush=True)
                p = Path(r["path"])
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            ckpt.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
