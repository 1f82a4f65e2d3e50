"""Graph passes (nnef/passes.py): dead ops are not written, live ones and the weights they
read all are, and the artefact still runs in tract and matches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.nnef.graph import NNEFGraph, NTensor
from fastnnef.nnef.passes import eliminate_dead_ops
from fastnnef.nnef.payload import PlainPayload
from fastnnef.nnef.serialize import write_artefact
from tests.helpers import export_and_check


def _graph() -> NNEFGraph:
    """x -> a = x * w -> out = a + broadcast(1, shape_of(x)), beside dead branches: exp(a * w)
    (w stays: `a` reads it), x + v (v only feeds the dead op); the split stays for its
    first output, the shape for its use as an attribute, the unused input as an input."""
    g = NNEFGraph()
    g.use_registry("tract_core")
    x = g.add_input("x", "f32", (2, 3))
    unused = g.add_input("unused", "f32", (1,))
    w = g.add_variable("w", "w", PlainPayload(torch.full((2, 3), 2.0)), "f32", (2, 3))
    v = g.add_variable("v", "v", PlainPayload(torch.ones(2, 3)), "f32", (2, 3))
    a = g.op("mul", [x, w], name="a", dtype="f32", shape=(2, 3))
    g.op("exp", [g.op("mul", [a, w], name="aw", dtype="f32", shape=(2, 3))], name="dead_exp", dtype="f32", shape=(2, 3))
    g.op("add", [x, v], name="dead_add", dtype="f32", shape=(2, 3))
    shape = g.op("tract_core_shape_of", [x], name="shape", dtype="tdim", shape=(2,))
    ones = g.op("tract_core_broadcast", [1.0], {"shape": shape}, name="ones", dtype="f32", shape=(2, 3))
    g.reserve_name("out", claim_later=True)
    out = g.op("add", [a, ones], name="out", dtype="f32", shape=(2, 3), exact=True)
    first, _ = g.op_multi("tract_core_topk", [out], {"k": 1, "axis": 1, "largest": True},
                          outputs=[NTensor("first", "f32", (2, 1)), NTensor("first_index", "i64", (2, 1))])
    g.outputs = [out, first]
    assert unused.name == "unused"
    return g


def test_dead_ops_and_their_weights_are_dropped(tmp_path: Path) -> None:
    g = _graph()
    assert eliminate_dead_ops(g) == 4  # aw, dead_exp, dead_add, v
    names = {t.name for stmt in g.body for t in getattr(stmt, "outputs", (getattr(stmt, "tensor", None),))}
    assert names == {"x", "unused", "w", "a", "shape", "ones", "out", "first", "first_index"}
    assert sorted(g.variables) == ["w"]
    path = write_artefact(tmp_path / "g.nnef", "dir", 0, g)
    assert sorted(p.name for p in path.iterdir()) == ["graph.nnef", "w.dat"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out, first = TractArtefact.load(path).run([x, np.zeros(1, np.float32)])
    np.testing.assert_array_equal(out, x * 2 + 1)
    np.testing.assert_array_equal(first, (x * 2 + 1)[:, 2:])
    assert eliminate_dead_ops(g) == 0  # nothing left to drop


class UnusedBranch(nn.Module):
    """A submodule called for nothing: tracing keeps its call, the export does not."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.unused(x)
        return self.used(x) + 1


def test_unused_submodule_is_not_exported(tmp_path: Path) -> None:
    path = export_and_check(UnusedBranch().eval(), (torch.randn(2, 4),), tmp_path, compression_level=None)
    assert sorted(p.name for p in path.iterdir()) == ["graph.nnef", "used.bias.dat", "used.weight.dat"]
    assert "unused" not in (path / "graph.nnef").read_text()
