"""Graph passes (nnef/passes.py): dead ops are not written, live ones and the weights they
read all are, and the artefact still runs in tract and matches."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorTract
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.nnef import passes
from fastnnef.nnef.graph import NNEFGraph, NTensor
from fastnnef.nnef.passes import eliminate_dead_ops, widen_f16_softmax_adds
from fastnnef.nnef.payload import PlainPayload
from fastnnef.nnef.serialize import write_artefact
from fastnnef.tensor.quant import fp_to_tract_q4_0_with_min_max_calibration
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


def test_only_an_f16_add_read_by_a_softmax_cast_alone_is_widened(tmp_path: Path) -> None:
    """Of three f16 sums x + y each cast to f32, only the one whose cast only a softmax reads
    (and nothing else reads) is added in f32, on one cast of x and one of y; the artefact
    runs in tract and computes it in f32."""
    g = NNEFGraph()
    g.use_registry("tract_core")
    x, y = g.add_input("x", "f16", (2, 3)), g.add_input("y", "f16", (2, 3))
    outs = []
    for base, reader in (("a", "softmax"), ("b", "exp"), ("c", "softmax")):
        added = g.op("add", [x, y], name=base, dtype="f16", shape=(2, 3))
        wide = g.op("tract_core_cast", [added], {"to": "f32"}, name=f"{base}_cast", dtype="f32", shape=(2, 3))
        attrs = {"axes": [1]} if reader == "softmax" else {}
        outs.append(g.op(reader, [wide], attrs, name=f"{base}_out", dtype="f32", shape=(2, 3)))
    outs.append(g.op("neg", [added], name="c_neg", dtype="f16", shape=(2, 3)))  # c is read twice
    g.outputs = outs
    assert widen_f16_softmax_adds(g) == 1
    kinds = [(s.kind, tuple(getattr(a, "name", a) for a in s.args)) for s in g.body if hasattr(s, "kind")]
    assert kinds[:3] == [("tract_core_cast", ("x",)), ("tract_core_cast", ("y",)), ("add", ("x_f32", "y_f32"))]
    assert kinds.count(("add", ("x", "y"))) == 2  # b and c stay f16, and their casts stay
    assert {("tract_core_cast", ("b",)), ("tract_core_cast", ("c",))} <= set(kinds)
    path = write_artefact(tmp_path / "g.nnef", "dir", 0, g)
    xv, yv = (np.random.default_rng(k).normal(0, 4, (2, 3)).astype(np.float16) for k in (0, 1))
    wide_sum = xv.astype(np.float32) + yv.astype(np.float32)
    a_out, b_out, _, _ = TractArtefact.load(path).run([xv, yv])
    np.testing.assert_allclose(a_out, np.exp(wide_sum) / np.exp(wide_sum).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(b_out, np.exp((xv + yv).astype(np.float32)), rtol=1e-5)


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


class StackedQ4_0(nn.Module):
    """A rank-3 weight (stacked experts) read by matmul, select or reshape, beside a Conv1d
    whose rank-3 filter tract runs as Q4_0."""

    def __init__(self, use: str):
        super().__init__()
        self.use = use
        self.w = nn.Parameter(torch.randn(4, 12, 64), requires_grad=False)
        self.conv = nn.Conv1d(8, 6, 4)  # filter 6x8x4: 32 values per output channel

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.use == "matmul":
            y = torch.matmul(x, self.w.transpose(1, 2)).sum(0)
        elif self.use == "select":
            y = x[0] @ self.w[1].t()
        else:
            y = x[0] @ self.w.reshape(48, 64)[:12].t()
        return y, self.conv(s)


@pytest.mark.parametrize("use", ["matmul", "select", "reshape"])
def test_rank3_q4_0_outside_convolutions_is_written_dequantized(use: str, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """tract fails to load or optimize such a graph with the blocks packed (the pass off, it
    did); written as floats, it runs and matches torch, and the Conv1d filter stays Q4_0."""
    model = StackedQ4_0(use).eval()
    model.w = nn.Parameter(fp_to_tract_q4_0_with_min_max_calibration(model.w.data), requires_grad=False)
    model.conv.weight = nn.Parameter(fp_to_tract_q4_0_with_min_max_calibration(model.conv.weight.data),
                                     requires_grad=False)
    args = (torch.randn(4, 5, 64), torch.randn(1, 8, 10))
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        path = export_and_check(model, args, tmp_path, compression_level=None, log_level=logging.WARNING)
    assert "'w' (Q4_0, rank 3) is read by" in caplog.text
    assert _native.dat_decode((path / "w.dat").read_bytes()).encoding == "f32"
    assert _native.dat_decode((path / "conv.weight.dat").read_bytes()).encoding.startswith("q4_0")


def test_a_tract_panic_is_a_fastnnef_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the pass, tract panics loading the select case (instead of returning an
    error); the panic must come back as T2NErrorTract, not escape as PanicException."""
    monkeypatch.setattr(passes, "PASSES", tuple(p for p in passes.PASSES if p[0] != "unpack_packed"))
    model = StackedQ4_0("select").eval()
    model.w = nn.Parameter(fp_to_tract_q4_0_with_min_max_calibration(model.w.data), requires_grad=False)
    args = (torch.randn(4, 5, 64), torch.randn(1, 8, 10))
    with pytest.raises(T2NErrorTract, match="tract panicked while trying to load"):
        export_model_to_nnef(model, args, tmp_path / "m.nnef", TractNNEF.latest(), compression_level=None)
