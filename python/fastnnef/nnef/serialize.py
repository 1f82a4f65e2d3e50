"""Stream an ``NNEFGraph`` into an artefact through the Rust sink, in canonical order.

Members: ``graph.nnef``, ``graph.quant`` (if any), then every variable's ``<label>.dat``
in byte order of the label, so two exports of one model give identical bytes. Weights go
to Rust as views of the torch storage, one at a time (no copy, GIL released).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from fastnnef.artefact import Artefact
from fastnnef.nnef.graph import NNEFGraph
from fastnnef.nnef.writer import graph_text, quant_text
from fastnnef.tensor.quant import QTensorTractScaleOnly

log = logging.getLogger("fastnnef")


def write_artefact(path: Path, fmt: str, compression_level: int, graph: NNEFGraph) -> Path:
    """Write ``graph`` to ``path`` as ``dir``/``tar``/``tgz``; return the final path."""
    labels = sorted(graph.variables, key=lambda s: s.encode())
    total = sum(v.data.numel() * v.data.element_size() for v in graph.variables.values())
    start = time.perf_counter()
    done, next_report = 0, total / 10
    with Artefact(path, fmt, compression_level) as artefact:
        artefact.add_file("graph.nnef", graph_text(graph))
        quant = quant_text(graph)
        if quant:
            artefact.add_file("graph.quant", quant)
        for label in labels:
            var = graph.variables[label]
            if isinstance(var.data, QTensorTractScaleOnly):
                # Already-packed Q4_0 blocks go out as they are: torch ran on exactly these.
                artefact.add_q4_0_blocks(label, var.data, var.encoding)
            else:
                # Plain tensors take their dtype's encoding; Q4_0 (and bf16->f16) are asked for.
                encoding = var.encoding if var.encoding.startswith("q4_0") else None
                artefact.add_tensor(label, var.data, encoding=encoding,
                                    bf16_as=var.encoding if var.bf16 else "f32")
            done += var.data.numel() * var.data.element_size()
            if total > 64 << 20 and done >= next_report:  # progress on long writes only
                log.info("writing %s: %d%% of %.1f MiB", path.name, 100 * done // total, total / 2**20)
                next_report += total / 10
    log.info("wrote %s (%d tensors, %.1f MiB) in %.2f s", artefact.path, len(labels),
             total / 2**20, time.perf_counter() - start)
    return Path(artefact.path or path)
