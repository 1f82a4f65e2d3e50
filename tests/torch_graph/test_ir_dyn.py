"""Dynamic-dim marks through ops whose output rank or last dims differ from their first
input's (embedding, arange, matmul, SDPA, index_select): the generic rule would call the
dims "unknown" and later size-dependent ops (x[..., : x.size(-1) // 2], arange(x.size(1)))
would be refused. Each case is then exported and run at another length in tract."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.dim import DimExpr
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.ir import TensorValue, build_ir
from fastnnef.torch_graph.trace import trace_model
from tests.helpers import export_and_check


class Embed(nn.Module):
    """Token embeddings plus position embeddings of arange(S) (GPT-2's first lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(11, 8)
        self.pos = nn.Embedding(16, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        return h + self.pos(torch.arange(h.shape[1]).unsqueeze(0))


class Attend(nn.Module):
    """Attention by matmul (the contracted dim is S) and by SDPA with an [S, S] mask, each
    followed by a split of the head dim computed from its size (Llama's rotate_half)."""

    def __init__(self, sdpa: bool) -> None:
        super().__init__()
        self.sdpa = sdpa

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        n = q.shape[-2]
        mask = torch.ones(1, 1, n, n, dtype=torch.bool).tril()
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        else:
            scores = (q @ q.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
            out = scores.softmax(-1) @ q
        half = out.shape[-1] // 2
        return torch.cat((-out[..., half:], out[..., :half]), dim=-1)


class Select(nn.Module):
    """Rows 0..S-1 of a table (position embeddings by index_select), then a slice to the end."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.table.index_select(0, torch.arange(x.size(1)))
        return (x.unsqueeze(-1) * rows)[:, 1:]


def _marks(texts: tuple[Any, ...]) -> tuple[Any, ...]:
    """Expected marks written in tract's text, as the IR's sizes."""
    return tuple(None if t is None else DimExpr(t) for t in texts)


CASES = [
    pytest.param(Embed, lambda n: torch.randint(0, 11, (1, n)), 1, {"aten::embedding": (None, "S", None),
                                                                    "aten::arange": ("S",)}, id="embedding"),
    pytest.param(lambda: Attend(False), lambda n: torch.randn(1, 2, n, 4), 2,
                 {"aten::matmul": (None, None, "S", None)}, id="matmul"),
    pytest.param(lambda: Attend(True), lambda n: torch.randn(1, 2, n, 4), 2,
                 {"aten::scaled_dot_product_attention": (None, None, "S", None)}, id="sdpa"),
    pytest.param(Select, lambda n: torch.randn(3, n), 1, {"aten::index_select": ("S", None)}, id="index_select"),
]


@pytest.mark.parametrize("make, data, axis, marks", CASES)
def test_dyn_marks(make: Callable[[], nn.Module], data: Callable[[int], torch.Tensor], axis: int,
                   marks: dict[str, Any], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = make().eval()
    x = data(5)
    ir = build_ir(trace_model(model, (x,), ["x"], None), {0: {axis: "S"}})
    for kind, dyn in marks.items():
        out = [op.outputs[0] for op in ir.ops if op.kind == kind][-1]  # the last one (attention output)
        assert isinstance(out, TensorValue) and out.dyn == _marks(dyn), (kind, out)
    target = TractNNEF.latest().with_dynamic_axes({"x": {axis: "S"}})
    export_and_check(model, (x,), tmp_path, target=target, input_names=["x"], run_inputs=[data(9)])


def test_numel_folds_static_and_stays_symbolic_on_dynamic_axes(tmp_path):
    """x.numel() is a constant for static shapes and S*4 for a dynamic S."""
    from tests.op._table import check

    check(lambda x: x * x.numel(), (torch.randn(3, 4),), tmp_path)
    check(lambda x: x.reshape(x.numel()) * 2, (torch.randn(3, 4),), tmp_path, dyn={0: {0: "S"}})


@pytest.mark.parametrize("fn", [
    lambda x: torch.tensor(x.numel()),         # int64 10
    lambda x: (x * 2, torch.tensor(x.shape[-1] / 4)),  # float32 1.25, beside a computed output
    lambda x: torch.tensor(x.dim() == 3),      # bool
], ids=["numel", "ratio", "flag"])
# Under tracing x.numel() is a 0-d tensor, which torch.tensor() copies with a warning.
@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
def test_outputs_the_trace_computed_as_numbers(fn: Callable[..., Any], tmp_path: Path) -> None:
    """An output that is a number at export (the shape is static) is a 0-d tensor of the
    dtype torch.tensor gives it (the reference exports these too)."""
    from tests.op._table import check

    check(fn, (torch.randn(1, 2, 5),), tmp_path)


@pytest.mark.parametrize("fn, inputs, dyn", [
    pytest.param(lambda x: x + x.shape[1], (torch.randn(2, 5),), {0: {1: "S"}}, id="tensor-plus-size"),
    pytest.param(lambda x: x * torch.arange(x.shape[1])[None, :], (torch.randn(2, 5),), {0: {1: "S"}},
                 id="arange-row"),
    pytest.param(lambda x: torch.tril(x, diagonal=x.shape[1] - x.shape[0]), (torch.randn(3, 5),), {0: {1: "S"}},
                 id="tril-dynamic-diagonal"),
    pytest.param(lambda x, y: torch.triu(x, diagonal=y.shape[1] - 2), (torch.randn(4, 6), torch.randn(1, 5)),
                 {1: {1: "P"}}, id="triu-diagonal-of-another-input"),
    pytest.param(lambda q, k: (torch.arange(k.shape[1])[None, :]
                               <= torch.arange(q.shape[1])[:, None] + (k.shape[1] - q.shape[1])).float(),
                 (torch.randn(1, 3), torch.randn(1, 7)), {0: {1: "S"}, 1: {1: "T"}}, id="kv-cache-causal-mask"),
])
def test_size_arithmetic_stays_symbolic(fn, inputs, dyn, tmp_path):
    """Sizes of dynamic axes used as numbers stay symbolic (checked again at grown sizes)."""
    from tests.op._table import check

    check(fn, inputs, tmp_path, dyn=dyn)


_HANN = torch.hann_window(8)

# (id, fn, inputs, dynamic axes, op kind, the marks of its (last) output)
RULES = [
    ("select", lambda x: x[1].reshape(-1, 5), (torch.randn(2, 4, 5),), {0: {1: "S"}}, "aten::select", ("S", None)),
    ("select_dynamic_axis_first", lambda x: x[:, 2] * 2, (torch.randn(4, 3),), {0: {0: "B"}}, "aten::select", ("B",)),
    ("movedim", lambda x: torch.movedim(x, (0, 1), (2, 0)).reshape(5, -1), (torch.randn(2, 4, 5),), {0: {1: "S"}},
     "aten::movedim", ("S", None, None)),
    ("mT", lambda x: x.mT.reshape(-1, 5), (torch.randn(2, 4, 5),), {0: {1: "S"}}, "aten::mT", (None, None, "S")),
    ("rot90", lambda x: torch.rot90(x, -1, (2, 1)) + 1, (torch.randn(2, 4, 5),), {0: {1: "S"}}, "aten::rot90",
     (None, None, "S")),
    ("unfold_step", lambda x: x.unfold(1, 4, 2).flatten(1), (torch.randn(2, 11),), {0: {1: "S"}}, "aten::unfold",
     (None, "(S-4)/2+1", None)),
    ("unfold_step1", lambda x: x.unfold(-1, 3, 1).sum(-1), (torch.randn(2, 7),), {0: {1: "S"}}, "aten::unfold",
     (None, "S-2", None)),
    ("diagonal_batch", lambda x: torch.diagonal(x, 1, 2, 1).reshape(-1), (torch.randn(3, 4, 4),), {0: {0: "B"}},
     "aten::diagonal", ("B", None)),
    ("slice_to_size_expression", lambda x: x[:, 1 : x.size(1) - 1] * 2, (torch.randn(2, 6),), {0: {1: "S"}},
     "aten::slice", (None, "S-2")),
    ("slice_last_n", lambda x: x[:, x.size(1) - 3 :].reshape(-1), (torch.randn(2, 6),), {0: {1: "S"}},
     "aten::slice", (None, None)),
    ("slice_negative_start", lambda x: x[:, -4:-1] + x[:, :3], (torch.randn(2, 6),), {0: {1: "S"}},
     "aten::slice", (None, None)),
    ("slice_step", lambda x: x[:, 1::2].reshape(-1), (torch.randn(2, 7),), {0: {1: "S"}},
     "aten::slice", (None, "(S)/2")),
    ("slice_of_other_input_size", lambda x, y: x[:, : y.size(1)] * y, (torch.randn(2, 9), torch.randn(2, 4)),
     {1: {1: "T"}}, "aten::slice", (None, "T")),
    ("narrow_to_size", lambda x, y: x.narrow(1, 2, y.size(1)) * y, (torch.randn(2, 9), torch.randn(2, 4)),
     {1: {1: "T"}}, "aten::narrow", (None, "T")),
    ("zeros_of_size", lambda x: torch.zeros(x.size(1), 3) + x[0, :, :3], (torch.randn(2, 4, 5),), {0: {1: "S"}},
     "aten::zeros", ("S", None)),
    ("full_of_size_expression", lambda x: torch.full((2, x.size(1) * 2), 1.5).reshape(2, -1, 2) * x[..., :2],
     (torch.randn(2, 4, 5),), {0: {1: "S"}}, "aten::full", (None, "2*S")),
    ("ones_int_of_size", lambda x: torch.ones(x.size(0), x.size(1) + 1, dtype=torch.int64).sum(1) * 2,
     (torch.randn(3, 4),), {0: {0: "B", 1: "S"}}, "aten::ones", ("B", "S+1")),
    ("new_zeros_of_size", lambda x: x.new_zeros(x.size(0), 4) + x[:, :4], (torch.randn(3, 5),), {0: {0: "B"}},
     "aten::new_zeros", ("B", None)),
    ("expand_to_size", lambda x, y: x[:, :1].expand(-1, y.size(1)) * y, (torch.randn(3, 5), torch.randn(3, 4)),
     {0: {0: "B"}, 1: {0: "B", 1: "T"}}, "aten::expand", ("B", "T")),
    ("pad", lambda x: F.pad(x, (1, 2, 0, 1)).reshape(-1), (torch.randn(2, 6),), {0: {1: "S"}},
     "aten::pad", (None, "S+3")),
    ("constant_pad_then_size", lambda x: torch.arange(torch.constant_pad_nd(x, (2, 2), 1.0).size(1)) * 1.0 + x.sum(),
     (torch.randn(2, 6),), {0: {1: "S"}}, "aten::constant_pad_nd", (None, "S+4")),
    ("stft", lambda x: torch.stft(x, 8, 2, window=_HANN, return_complex=True).abs().reshape(2, -1),
     (torch.randn(2, 24),), {0: {1: "S"}}, "aten::stft", (None, None, "(S)/2+1")),
    # By position, not by traced sizes: a dynamic axis traced at 1 stays dynamic.
    ("flatten_traced_at_one", lambda x: x.flatten(0, 1) * 2, (torch.randn(1, 4, 8),), {0: {0: "T"}},
     "aten::flatten", ("4*T", None)),
    ("flatten_middle_traced_at_one", lambda x: x.flatten(1, 2) * 2, (torch.randn(2, 1, 8),), {0: {1: "T"}},
     "aten::flatten", (None, "8*T")),
    ("unflatten_exact", lambda x: x.flatten(0, 1).unflatten(0, (-1, 4)) * 2, (torch.randn(2, 4, 3),), {0: {0: "T"}},
     "aten::unflatten", ("T", None, None)),
    ("squeeze_other_dim_traced_at_one", lambda x: x.squeeze(0) * 2, (torch.randn(1, 1, 8),), {0: {1: "T"}},
     "aten::squeeze", ("T", None)),
    ("sum_keepdim_over_axis_traced_at_one", lambda x: x.sum(0, keepdim=True) * x, (torch.randn(1, 8),),
     {0: {0: "T"}}, "aten::sum", (None, None)),
    ("mean_keepdim_keeps_axis_traced_at_one", lambda x: x.mean(-1, keepdim=True) * 2, (torch.randn(1, 8),),
     {0: {0: "T"}}, "aten::mean", ("T", None)),
    ("view_as_traced_at_one", lambda x: x.view_as(x.flatten(0, 1)) * 2, (torch.randn(1, 4, 8),), {0: {0: "T"}},
     "aten::view_as", ("4*T", None)),
    ("amax_over_axis", lambda x: x.amax(1) * 2, (torch.randn(2, 5, 3),), {0: {1: "S"}}, "aten::amax", (None, None)),
    ("stft_default_hop_not_centred", lambda x: torch.stft(x, 8, window=_HANN, center=False, return_complex=True).abs(),
     (torch.randn(26),), {0: {0: "S"}}, "aten::stft", (None, "(S-8)/2+1")),
]


@pytest.mark.parametrize("fn, inputs, dyn, kind, marks", [pytest.param(*c[1:], id=c[0]) for c in RULES])
def test_rule_marks(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], dyn: dict[int, dict[int, str]],
                    kind: str, marks: tuple[Any, ...], tmp_path: Path) -> None:
    """Each rule's marks on the op's output, then the export checked at grown sizes."""
    from tests.helpers import Fn
    from tests.op._table import check

    ir = build_ir(trace_model(Fn(fn), inputs, [f"in{k}" for k in range(len(inputs))], None), dyn)
    out = [op.outputs[0] for op in ir.ops if op.kind == kind][-1]
    assert isinstance(out, TensorValue) and out.dyn == _marks(marks), out
    check(fn, inputs, tmp_path, dyn=dyn, atol=1e-3, rtol=1e-3)
