"""aten::scaled_dot_product_attention, reified (tract_transformers_sdpa) and decomposed,
compared with torch through tract; plus nn.MultiheadAttention."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check, needs_handler

VERSION = TractNNEF.latest().version


class Sdpa(nn.Module):
    def __init__(self, **kwargs: Any):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kwargs)


def qkv(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(*s).to(dtype) for s in shapes)


def bool_mask(*shape: int) -> torch.Tensor:
    torch.manual_seed(1)
    m = torch.rand(*shape) > 0.4
    m[..., 0] = True  # every query sees a key: fully masked rows are NaN in torch
    return m


Q4, K4 = (2, 3, 4, 8), (2, 3, 5, 8)
CASES: list[Any] = [
    pytest.param(lambda: Sdpa(), lambda: qkv(Q4, K4, K4), id="4d"),
    pytest.param(lambda: Sdpa(), lambda: qkv((2, 4, 8), (2, 5, 8), (2, 5, 6)), id="3d-dv"),
    pytest.param(lambda: Sdpa(scale=0.3), lambda: qkv(Q4, K4, K4), id="scale"),
    pytest.param(lambda: Sdpa(), lambda: qkv(Q4, K4, K4) + (bool_mask(4, 5),), id="bool-mask-2d"),
    pytest.param(lambda: Sdpa(), lambda: qkv(Q4, K4, K4) + (bool_mask(2, 1, 4, 5),), id="bool-mask-4d"),
    pytest.param(lambda: Sdpa(), lambda: qkv(Q4, K4, K4, (2, 3, 4, 5)), id="float-mask"),
    pytest.param(lambda: Sdpa(), lambda: qkv((2, 4, 8), (2, 5, 8), (2, 5, 8), (4, 5)), id="float-mask-3d"),
    pytest.param(lambda: Sdpa(is_causal=True), lambda: qkv((2, 3, 5, 8), K4, K4), id="causal-square"),
    pytest.param(lambda: Sdpa(is_causal=True), lambda: qkv(Q4, K4, K4), id="causal-rect"),
    pytest.param(lambda: Sdpa(is_causal=True, scale=0.5), lambda: qkv((2, 5, 8), (2, 5, 8), (2, 5, 8)), id="causal-3d"),
    pytest.param(lambda: Sdpa(enable_gqa=True), lambda: qkv((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 8)), id="gqa"),
    pytest.param(lambda: Sdpa(enable_gqa=True, is_causal=True), lambda: qkv((1, 6, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4)),
                 id="gqa-causal"),
    pytest.param(lambda: Sdpa(), lambda: qkv((2, 2, 3, 4, 8), (2, 2, 3, 5, 8), (2, 2, 3, 5, 8)), id="5d"),
]


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
@pytest.mark.parametrize("make_model, make_args", CASES)
def test_sdpa(make_model: Callable[[], nn.Module], make_args: Callable[[], tuple], reify: bool, tmp_path: Any) -> None:
    target = TractNNEF(VERSION, reify_sdpa_operator=reify)
    export_and_check(make_model(), make_args(), tmp_path, target=target, atol=1e-5, rtol=1e-4)


def _graph_text(model: nn.Module, args: tuple, tmp_path: Any, target: TractNNEF, atol: float = 1e-5) -> str:
    """Export (checked against torch) as a directory; return graph.nnef."""
    path = export_and_check(model, args, tmp_path, target=target, compression_level=None, atol=atol, rtol=atol)
    return (path / "graph.nnef").read_text()


@pytest.mark.parametrize("reify", [True, False])
def test_sdpa_path_is_chosen_by_target(reify: bool, tmp_path: Any) -> None:
    text = _graph_text(Sdpa(), qkv(Q4, K4, K4), tmp_path, TractNNEF(VERSION, reify_sdpa_operator=reify))
    assert ("tract_transformers_sdpa(" in text) is reify
    assert ("extension tract_registry tract_transformers;" in text) is reify
    assert ("softmax(" in text) is not reify


def test_sdpa_default_follows_version(tmp_path: Any) -> None:
    old = TractNNEF("0.22.0")
    assert not old.reify_sdpa and TractNNEF.latest().reify_sdpa
    text = _graph_text(Sdpa(), qkv(Q4, K4, K4), tmp_path, TractNNEF.latest())
    assert "tract_transformers_sdpa(" in text


@pytest.mark.parametrize(
    "reify, upcast", [(True, True), (True, False), (False, True)],
    ids=["reified-upcast", "reified-f16-io", "decomposed"],
)
def test_sdpa_f16_inner_f32(reify: bool, upcast: bool, tmp_path: Any) -> None:
    target = TractNNEF(
        VERSION, reify_sdpa_operator=reify, force_attention_inner_in_f32=True,
        upcast_reified_sdpa_inputs_to_f32=upcast,
    )
    args = qkv(Q4, K4, K4, dtype=torch.float16)
    text = _graph_text(Sdpa(is_causal=True), args, tmp_path, target, atol=2e-3)
    assert "datum_type = 'f16'" in text  # the inputs stay f16
    if reify:
        io = "f32" if upcast else "f16"
        assert f", datum_type = '{io}', acc_datum_type = 'f32'" in text
    else:
        assert 'softmax(' in text
    assert ("to = 'f16'" in text) is (upcast or not reify)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
def test_sdpa_f16(reify: bool, tmp_path: Any) -> None:
    target = TractNNEF(VERSION, reify_sdpa_operator=reify)
    export_and_check(Sdpa(), qkv(Q4, K4, K4, dtype=torch.float16), tmp_path, target=target, atol=1e-2, rtol=1e-2)


def _expanded_bool_mask(x: torch.Tensor) -> torch.Tensor:
    """Self-attention of x [1, S, 8] (2 heads) under an all-true bool mask built over S and
    expanded to [1, 1, S, S], as transformers builds a bidirectional one under torch.export."""
    n = x.shape[1]
    q = x.view(1, n, 2, 4).transpose(1, 2)
    mask = (torch.arange(n)[None, None, :, None] >= 0).expand(1, 1, n, n)
    return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
def test_sdpa_expanded_bool_mask_dynamic(reify: bool, tmp_path: Any) -> None:
    """tract's optimized FlashSDPA refused such a mask once it was turned into a bias (the
    ops after its broadcast) at run time: the artefact built at length 6 runs at 9."""
    target = TractNNEF(VERSION, reify_sdpa_operator=reify).with_dynamic_axes({"x": {1: "S"}})
    export_and_check(Fn(_expanded_bool_mask), (torch.randn(1, 6, 8),), tmp_path, target=target,
                     input_names=["x"], run_inputs=(torch.randn(1, 9, 8),), atol=1e-5)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
def test_sdpa_dynamic_causal(reify: bool, tmp_path: Any) -> None:
    """A causal mask over a dynamic sequence axis: the artefact built at length 5 runs at 3 and 7."""
    target = TractNNEF(VERSION, reify_sdpa_operator=reify).with_dynamic_axes(
        {name: {2: "S"} for name in ("q", "k", "v")}
    )
    model = Sdpa(is_causal=True)
    for n in (3, 7):
        export_and_check(
            model, qkv((1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)), tmp_path, name=f"m{n}.nnef", target=target,
            input_names=["q", "k", "v"], run_inputs=qkv((1, 2, n, 8), (1, 2, n, 8), (1, 2, n, 8)), atol=1e-5,
        )


def test_sdpa_dropout_is_refused(tmp_path: Any) -> None:
    with pytest.raises(T2NErrorNotImplemented, match="dropout_p"):
        export_and_check(Sdpa(dropout_p=0.5), qkv(Q4, K4, K4), tmp_path)
    assert list(tmp_path.iterdir()) == []


class SelfAttention(nn.Module):
    """Non-self (query != key) attention takes torch's composite path (linear, view,
    transpose, sdpa); self-attention in eval uses the fused _native_multi_head_attention."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return self.mha(x, memory, memory, need_weights=False)[0]


@needs_handler("aten::select")
def test_multihead_attention(tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(SelfAttention().eval(), (torch.randn(2, 5, 8), torch.randn(2, 6, 8)), tmp_path, atol=1e-5)


class CrossAttention(nn.Module):
    """Cross-attention with a key padding mask: torch builds a [B, 1, 1, S_kv] mask, which
    tract's sdpa needs broadcast to [B, 1, S_q, S_kv]."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.mha(x, memory, memory, key_padding_mask=padding, need_weights=False)[0]


def _padding(batch: int, length: int, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[1, length // 2:] = True  # the second sequence is padded
    return mask if dtype == torch.bool else torch.zeros(batch, length).masked_fill(mask, float("-inf"))


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "seq-first"])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32], ids=["bool", "float"])
def test_cross_attention_key_padding_mask(reify: bool, batch_first: bool, mask_dtype: torch.dtype,
                                          tmp_path: Any) -> None:
    torch.manual_seed(0)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    if not batch_first:
        x, memory = x.transpose(0, 1), memory.transpose(0, 1)
    target = TractNNEF(VERSION, reify_sdpa_operator=reify)
    export_and_check(CrossAttention(batch_first).eval(), (x, memory, _padding(2, 7, mask_dtype)), tmp_path,
                     target=target, atol=1e-5)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
@pytest.mark.parametrize("memory_dynamic", [False, True], ids=["query-dynamic", "memory-dynamic"])
def test_cross_attention_key_padding_mask_dynamic(reify: bool, memory_dynamic: bool, tmp_path: Any) -> None:
    """A dynamic query length (and memory length): the mask is broadcast to symbolic sizes."""
    torch.manual_seed(0)
    axes = {"x": {1: "S"}, **({"memory": {1: "M"}, "padding": {1: "M"}} if memory_dynamic else {})}
    target = TractNNEF(VERSION, reify_sdpa_operator=reify).with_dynamic_axes(axes)
    model = CrossAttention(True).eval()
    args = (torch.randn(2, 5, 8), torch.randn(2, 7, 8), _padding(2, 7, torch.bool))
    m = 10 if memory_dynamic else 7
    export_and_check(model, args, tmp_path, target=target, input_names=["x", "memory", "padding"],
                     run_inputs=(torch.randn(2, 3, 8), torch.randn(2, m, 8), _padding(2, m, torch.bool)),
                     atol=1e-5)


class MaskedSoftmaxes(nn.Module):
    """Two attention-score softmaxes in f32 sharing one causal f16 mask (as an LLM's layers
    do), then an f16 sum that is also an output (so it must stay f16)."""

    def __init__(self) -> None:
        super().__init__()
        mask = torch.full((1, 1, 8, 8), torch.finfo(torch.float16).min).triu(1).half()
        self.register_buffer("mask", mask)

    def forward(self, scores: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        first = F.softmax(scores * 0.125 + self.mask, -1, dtype=torch.float32).to(scores.dtype)
        second = F.softmax(first * 4.0 + self.mask, -1, dtype=torch.float32)
        summed = scores + bias
        return second, F.softmax(summed, -1, dtype=torch.float32), summed


def test_f16_scores_plus_mask_added_in_f32(tmp_path: Any) -> None:
    """The mask is added to f16 scores in f32, on casts of both (the mask cast once), when
    the sum only feeds an f32 softmax (nnef/passes.py: tract's f16 adds are slow); a sum
    read elsewhere stays f16."""
    scores, bias = qkv((1, 2, 8, 8), (1, 2, 8, 8), dtype=torch.float16)
    path = export_and_check(MaskedSoftmaxes().eval(), (scores * 8, bias), tmp_path, compression_level=None,
                            atol=5e-3, rtol=5e-3, input_names=["scores", "bias"],
                            output_names=["second", "third", "summed"])
    text = (path / "graph.nnef").read_text()
    lines = dict(re.findall(r"^\s*(\w+) = (.*);$", text, re.M))
    softmax_inputs = re.findall(r"= softmax\((\w+),", text)
    assert len(softmax_inputs) == 3, text
    mask_casts = set()
    for name in softmax_inputs[:2]:
        added = re.fullmatch(r"add\((\w+), (\w+)\)", lines[name])
        assert added, (name, text)
        for operand in added.groups():
            assert re.fullmatch(r"tract_core_cast\(\w+, to = 'f32'\)", lines[operand]), (operand, text)
        mask_casts.add(lines[added.group(2)])
    assert mask_casts == {"tract_core_cast(mask, to = 'f32')"}, text  # one cast, read twice
    assert lines["summed"] == "add(scores, bias)", text
    assert lines[softmax_inputs[2]] == "tract_core_cast(summed, to = 'f32')", text
