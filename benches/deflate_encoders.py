"""Single-core deflate throughput and size on random-normal f32 weights, 1 MiB chunks
(as the .tgz sink cuts them): Python's zlib (what torch_to_nnef's tarfile uses) and the C
encoders that have no crates.io build without extra tools (ISA-L, zlib-ng), through their
PyPI wheels. The Rust encoders are measured by `cargo bench --bench codec -- deflate`.

    pip install --target /tmp/h9-pydeflate isal==1.9.1 zlib-ng==1.1.0
    PYTHONPATH=/tmp/h9-pydeflate .venv/bin/python benches/deflate_encoders.py [--smoke]

An encoder whose wheel is not installed is skipped with a note. ``--smoke`` compresses
1 MiB once (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import importlib
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run (1 MiB, once) to check the bench works")
    args = parser.parse_args()
    floats, repeat = (1 << 18, 1) if args.smoke else (16 << 20, 3)
    data = (np.random.default_rng(0).standard_normal(floats).astype(np.float32) * 0.02).tobytes()
    chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]

    def run(name: str, fn: Callable[[bytes], bytes]) -> None:
        best, size = 1e9, 0
        for _ in range(repeat):
            start = time.perf_counter()
            size = sum(len(fn(c)) for c in chunks)
            best = min(best, time.perf_counter() - start)
        print(f"{name:34s} {len(data) / best / 1e6:8.1f} MB/s  size/input {size / len(data):.4f}")

    def python_zlib(level: int) -> Callable[[bytes], bytes]:
        def compress(chunk: bytes) -> bytes:
            c = zlib.compressobj(level, zlib.DEFLATED, -15)
            return c.compress(chunk) + c.flush()
        return compress

    for level in (1, 6):
        run(f"python zlib level{level}", python_zlib(level))
    isal_zlib = optional("isal.isal_zlib", "isal")
    if isal_zlib is not None:
        for level in (1, 2):
            run(f"isal (ISA-L igzip) level{level}", lambda c, lv=level: isal_zlib.compress(c, lv, -15))
    zlib_ng = optional("zlib_ng.zlib_ng", "zlib-ng")
    if zlib_ng is not None:
        for level in (1, 2, 6):
            run(f"zlib-ng level{level}", lambda c, lv=level: zlib_ng.compress(c, lv, -15))


def optional(module: str, wheel: str) -> Any:
    """``module`` if its wheel is installed, else None after printing a note."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        print(f"(skipped: the {wheel} wheel is not installed: {err})")
        return None


if __name__ == "__main__":
    main()
