"""check_io wall time on the bench MLP (same artefact as benches/tract_check.rs).

Builds an L-layer MLP (width W, batch B, f32 weights in ``.dat`` files) as an NNEF
``.tar`` with numpy alone, then prints the median and minimum of ``--repeat`` calls of
``check_io`` and of ``TractArtefact.load(...).run``. ``--smoke`` runs a 2-layer, 64-wide
MLP twice in a temp dir, removed afterwards (CI runs it, tests/test_benches.py).

    PYTHONPATH=python python benches/check_io.py [--repeat 20] [--smoke]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastnnef.check import TractArtefact, check_io

# The artefact of benches/tract_check.rs: width, batch, layers.
FULL = (512, 64, 8)
SMOKE = (64, 4, 2)


def dat(a: np.ndarray) -> bytes:
    """An NNEF ``.dat`` file of ``a`` as f32 (128-byte header, then the data)."""
    header = bytearray(128)
    header[0:4] = b"\x4e\xef\x01\x00"
    header[4:8] = a.nbytes.to_bytes(4, "little")
    header[8:12] = a.ndim.to_bytes(4, "little")
    for i, d in enumerate(a.shape):
        header[12 + 4 * i : 16 + 4 * i] = d.to_bytes(4, "little")
    header[0x2C:0x30] = (32).to_bytes(4, "little")  # bits per item
    return bytes(header) + a.astype("<f4").tobytes()


def write_mlp(path: Path, width: int, batch: int, layers: int) -> None:
    """The MLP ``x -> relu(x @ w + b)`` × layers, deterministic weights, as a ``.tar``."""
    graph = [
        "version 1.0;", "extension tract_registry tract_core;", "graph network(x) -> (y) {",
        f"  x = tract_core_external(shape = [{batch}, {width}], datum_type = 'f32');",
    ]
    members = {}
    prev = "x"
    i = np.arange(width * width)
    for layer in range(layers):
        weights = (((i * 7919 + layer * 31) % 1000) - 500.0) * 1e-5
        members[f"w{layer}.dat"] = dat(weights.astype(np.float32).reshape(width, width))
        members[f"b{layer}.dat"] = dat(((np.arange(width) % 17) * 1e-3).astype(np.float32).reshape(1, width))
        out = "y" if layer == layers - 1 else f"h{layer}"
        graph += [
            f"  w{layer} = variable<scalar>(label = 'w{layer}', shape = [{width}, {width}]);",
            f"  b{layer} = variable<scalar>(label = 'b{layer}', shape = [1, {width}]);",
            f"  m{layer} = matmul({prev}, w{layer});", f"  a{layer} = add(m{layer}, b{layer});",
            f"  {out} = relu(a{layer});",
        ]
        prev = out
    graph.append("}")
    with tarfile.open(path, "w") as tar:
        for name, data in [("graph.nnef", ("\n".join(graph) + "\n").encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def median_and_min(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds)), min(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="calls timed per line (default 20)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (2 layers × 64, twice) to check the bench works")
    args = parser.parse_args()
    width, batch, layers = SMOKE if args.smoke else FULL
    repeat = 2 if args.smoke else args.repeat
    with tempfile.TemporaryDirectory(prefix="fastnnef-bench-") as tmp:
        path = Path(tmp) / "mlp.nnef.tar"
        write_mlp(path, width, batch, layers)
        x = ((np.arange(batch * width) % 101 - 50.0) * 1e-2).astype(np.float32).reshape(batch, width)
        (y,) = TractArtefact.load(path).run([x])
        print(f"mlp {layers}x{width}, batch {batch}, {repeat} calls each")
        med, low = median_and_min(lambda: check_io(path, [x], [y], ["x"], ["y"]), repeat)
        print(f"check_io median/min s: {med:.4f} {low:.4f}")
        med, low = median_and_min(lambda: TractArtefact.load(path).run([x]), repeat)
        print(f"TractArtefact.load+run median/min s: {med:.4f} {low:.4f}")


if __name__ == "__main__":
    main()
