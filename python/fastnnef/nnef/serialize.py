"""Stream an ``NNEFGraph`` into an artefact through the Rust sink, in canonical order.

Members: ``graph.nnef``, ``graph.quant`` (if any), then every variable's ``<label>.dat``
in byte order of the label, so two exports of one model give identical bytes.
"""

from __future__ import annotations

from pathlib import Path

from fastnnef.artefact import ArtefactWriter, torch_tensor_to_native
from fastnnef.nnef.graph import NNEFGraph
from fastnnef.nnef.writer import graph_text, quant_text


def write_artefact(path: Path, fmt: str, compression_level: int, graph: NNEFGraph) -> Path:
    """Write ``graph`` to ``path`` as ``dir``/``tar``/``tgz``; return the final path."""
    text = graph_text(graph).encode()
    quant = quant_text(graph).encode()
    with ArtefactWriter(path, fmt, compression_level) as writer:
        writer.add_file("graph.nnef", text)
        if quant:
            writer.add_file("graph.quant", quant)
        for label in sorted(graph.variables, key=lambda s: s.encode()):
            var = graph.variables[label]
            array, encoding, bf16 = torch_tensor_to_native(var.data)
            if var.encoding.startswith("q4_0") or (bf16 and var.encoding in ("f32", "f16")):
                encoding = var.encoding
            writer.add_tensor(label, array, encoding, bf16=bf16)
    return writer.final_path
