"""Dynamic marks for a KV cache: two symbols, S (new tokens) and P (past), combined.

``cat`` of a past of P entries and S new ones has P+S; ``arange(P, P+S)`` has S; a mask
comparing both aranges is [S, P+S]. Each case is exported with both axes dynamic, then run
in tract at other (S, P), P = 0 included (a prompt with an empty cache)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.dim import DimExpr
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.ir import TensorValue, build_ir
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import export_and_check


class CachedAttention(nn.Module):
    """One attention step over a cache: positions P..P+S-1, causal mask over P+S keys,
    new keys appended to the past ones."""

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, p = x.shape[1], past.shape[1]
        keys = torch.cat([past, x], dim=1)                      # [1, P+S, D]
        q_pos = torch.arange(p, p + s)                          # [S]
        k_pos = torch.arange(keys.shape[1])                     # [P+S]
        allowed = k_pos[None, :] <= q_pos[:, None]              # [S, P+S]
        scores = (x @ keys.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
        out = scores.softmax(-1) @ keys + q_pos[None, :, None].float()
        return out, keys


def _inputs(s: int, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(s * 31 + p)
    return torch.randn(1, s, 4, generator=g), torch.randn(1, p, 4, generator=g)


def test_marks() -> None:
    ir = build_ir(trace_model(CachedAttention(), _inputs(3, 5), ["x", "past"], None), {0: {1: "S"}, 1: {1: "P"}})
    by_kind = {}
    for op in ir.ops:
        out = op.outputs[0]
        if isinstance(out, TensorValue):
            by_kind.setdefault(op.kind, []).append(out.dyn)
    assert by_kind["aten::cat"][0] == (None, DimExpr("P+S"), None)
    assert by_kind["aten::arange"] == [(DimExpr("S"),), (DimExpr("P+S"),)]
    assert (DimExpr("S"), DimExpr("P+S")) in by_kind["aten::le"]


def test_runs_at_other_sizes(tmp_path: Path) -> None:
    model = CachedAttention()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}, "past": {1: "P"}})
    path = export_and_check(model, _inputs(3, 5), tmp_path, target=target, input_names=["x", "past"],
                            output_names=["out", "keys"], custom_extensions=["tract_assert S >= 1"])
    artefact = TractArtefact.load(path)
    for s, p in [(4, 0), (1, 7), (6, 2)]:
        x, past = _inputs(s, p)
        expected = [t.numpy() for t in model(x, past)]
        got = artefact.run([x, past])
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, atol=1e-5, err_msg=f"S={s} P={p}")
