"""Write 1 GB of f32 weights through the export path to a directory, a .tar and a .tgz.

Prints MB/s per format (of f32 input), the CPU time of the process's threads and its
peak RSS. Figures and the machine they were taken on are in benches/README.md.

    PYTHONPATH=python python benches/bench_tensors.py [--mb 1024] [--out /tmp/bench] [--level 1] [--smoke]

``--smoke`` writes 1 MB to a temp dir, removed afterwards (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import torch

from fastnnef.artefact import Artefact
from fastnnef.tensor_export import export_tensors_to_nnef


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB of f32 weights (default 1024)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--level", type=int, default=1, help="gzip level for .tgz (default 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (1 MB, temp dir) to check the bench works")
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.out = 1, None
    if args.out is None:
        with tempfile.TemporaryDirectory(prefix="fastnnef-bench-") as tmp:
            write_all(args.mb, Path(tmp), args.level)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        write_all(args.mb, args.out, args.level)


def write_all(mb: int, out: Path, level: int) -> None:
    """Time each way of writing ``mb`` MB of f32 tensors under ``out``."""
    # 64 tensors like the linears of a small LLM; randn so gzip has real work to do.
    n_tensors = 64
    per = mb * 1_000_000 // 4 // n_tensors
    torch.manual_seed(0)
    tensors = {f"layers.{i}.weight": torch.randn(per // 1024, 1024) for i in range(n_tensors)}
    total = sum(t.numel() * 4 for t in tensors.values())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{total / 1e6:.0f} MB of f32 in {n_tensors} tensors; peak RSS after allocation {rss_before / 1024:.0f} MiB")

    def timed(name: str, fn) -> None:
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        seconds = time.perf_counter() - start
        # CPU time of all threads: on a shared machine it moves less than the wall time.
        cpu = time.process_time() - cpu_start
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"{name:28s} {seconds:7.3f} s  {total / seconds / 1e6:8.0f} MB/s  cpu {cpu:6.2f} s"
            f"  peak RSS {rss / 1024:.0f} MiB"
        )

    def archive(fmt: str, level: int):
        def run() -> None:
            with Artefact(out / f"m.{fmt}", fmt, level) as art:
                art.add_file("graph.nnef", "version 1.0;\n")
                for name, t in tensors.items():
                    art.add_tensor(name, t)
        return run

    tensor_dir = out / "tensors"
    tensor_dir.mkdir(exist_ok=True)
    timed("export_tensors_to_nnef", lambda: export_tensors_to_nnef(tensors, tensor_dir))
    timed("artefact dir", archive("dir", 0))
    timed("artefact tar", archive("tar", 0))
    timed(f"artefact tgz level {level}", archive("tgz", level))


if __name__ == "__main__":
    main()
