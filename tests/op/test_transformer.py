"""Transformer fast paths (op/aten/transformer.py): nn.TransformerEncoderLayer and
nn.TransformerEncoder in eval mode (aten::_transformer_encoder_layer_fwd, nested tensors
from a src_key_padding_mask) and nn.MultiheadAttention with need_weights
(aten::_native_multi_head_attention), run in tract and compared with torch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check

VERSION = TractNNEF.latest().version
# nn.TransformerEncoder with a padding mask builds nested tensors, which warns once.
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
E, HEADS, FF = 16, 2, 24


def padding_mask(lengths: list[int], total: int) -> torch.Tensor:
    """[B, S] key padding mask, True on padding (sequences left-aligned, as torch expects)."""
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


class Layer(nn.Module):
    """One encoder layer, called with an optional key padding mask / attention mask."""

    def __init__(self, batch_first: bool = True, norm_first: bool = False, activation: str = "relu",
                 causal: bool = False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(E, HEADS, FF, dropout=0.0, batch_first=batch_first,
                                                norm_first=norm_first, activation=activation)
        self.causal = causal

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        mask = None
        if self.causal:
            n = x.shape[1] if self.layer.self_attn.batch_first else x.shape[0]
            mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        return self.layer(x, src_mask=mask, src_key_padding_mask=padding)


class Encoder(nn.Module):
    """A two-layer encoder with a final norm; with a padding mask, torch runs it on nested
    tensors and pads the result with zeros."""

    def __init__(self, batch_first: bool = True, norm: bool = True):
        super().__init__()
        layer = nn.TransformerEncoderLayer(E, HEADS, FF, dropout=0.0, batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E) if norm else None,
                                             enable_nested_tensor=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=padding)


def inputs(batch_first: bool, length: int = 5, padded: bool = False, dtype: torch.dtype = torch.float32) -> tuple:
    x = torch.randn(3, length, E, dtype=dtype)
    if not batch_first:
        x = x.transpose(0, 1).contiguous()
    return (x, padding_mask([length, length - 2, 1], length)) if padded else (x,)


# A padding mask pads the end of each row and leaves a position: a fresh bool draw may mask
# whole rows (NaN in torch) or leave holes (refused by torch's nested tensors), so it stays as
# traced; test_dynamic_sequence_length runs other masks.
MASK_KEPT = {1: "a padding mask must pad row ends and keep a position: a fresh draw is invalid"}

# Every pair of (batch_first, norm_first, activation, padding mask) values appears once.
LAYER_CASES = [
    pytest.param(bf, nf, act, padded, id=f"{'bf' if bf else 'sf'}-{'pre' if nf else 'post'}-{act}"
                 f"{'-padding-mask' if padded else ''}")
    for bf, nf, act, padded in [
        (True, False, "relu", False), (True, True, "gelu", True), (True, False, "gelu", True),
        (True, True, "relu", False), (False, False, "relu", True), (False, True, "gelu", False),
    ]
]


@pytest.mark.parametrize("batch_first, norm_first, activation, padded", LAYER_CASES)
def test_encoder_layer(batch_first: bool, norm_first: bool, activation: str, padded: bool, tmp_path: Any) -> None:
    """batch_first layers take the fused fast path, seq-first ones torch's composite ops."""
    torch.manual_seed(0)
    model = Layer(batch_first, norm_first, activation).eval()
    export_and_check(model, inputs(batch_first, padded=padded), tmp_path, atol=1e-5, kept_on_redraw=MASK_KEPT)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
def test_encoder_layer_causal_mask(reify: bool, tmp_path: Any) -> None:
    """A [L, L] src_mask and a padding mask reach the fused op merged to [B, H, L, L]
    (mask_type 2)."""
    torch.manual_seed(0)
    target = TractNNEF(VERSION, reify_sdpa_operator=reify)
    export_and_check(Layer(causal=True).eval(), inputs(True, padded=True), tmp_path, target=target, atol=1e-5,
                     kept_on_redraw=MASK_KEPT)


def test_encoder_layer_is_fused(tmp_path: Any) -> None:
    """The fast path is what is traced (so the handler is what this file tests)."""
    torch.manual_seed(0)
    model, args = Layer().eval(), inputs(True, padded=True)
    with torch.no_grad():
        graph = torch.jit.trace(model, args, check_trace=False).inlined_graph
    assert "aten::_transformer_encoder_layer_fwd" in str(graph)
    path = export_model_to_nnef(model, args, tmp_path / "m.nnef", TractNNEF.latest(), compression_level=None)
    assert "tract_transformers_sdpa(" in (path / "graph.nnef").read_text()


def test_encoder_layer_f16(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = Layer(activation="gelu").eval().half()
    export_and_check(model, inputs(True, padded=True, dtype=torch.float16), tmp_path, atol=1e-2, rtol=1e-2,
                     kept_on_redraw=MASK_KEPT)


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padding-mask"])
@pytest.mark.parametrize("make", [lambda: Layer(), lambda: Layer(norm_first=True, activation="gelu"),
                                  lambda: Encoder()], ids=["layer", "layer-pre-gelu", "encoder"])
def test_dynamic_sequence_length(make: Any, padded: bool, tmp_path: Any) -> None:
    """Exported at length 5, run at 8 (and its padding mask with it)."""
    torch.manual_seed(0)
    names = ["x", "padding"][: 1 + padded]
    target = TractNNEF.latest().with_dynamic_axes({n: {1: "S"} for n in names})
    model = make().eval()
    export_and_check(model, inputs(True, padded=padded), tmp_path, target=target, input_names=names,
                     run_inputs=inputs(True, length=8, padded=padded), atol=1e-5)


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "nested"])
@pytest.mark.parametrize("norm", [True, False], ids=["norm", "no-norm"])
def test_encoder(padded: bool, norm: bool, tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Encoder(norm=norm).eval(), inputs(True, padded=padded), tmp_path, atol=1e-5,
                     kept_on_redraw=MASK_KEPT)


@pytest.mark.parametrize("make", [lambda: Layer(), lambda: Layer(causal=True), lambda: Encoder()],
                         ids=["layer", "layer-causal", "encoder"])
def test_padding_mask_follows_the_input(make: Any, tmp_path: Any) -> None:
    """Exported with one padding mask, run with another of the same shape (the mask is
    an input, not a constant)."""
    torch.manual_seed(0)
    x, _ = inputs(True, padded=True)
    export_and_check(make().eval(), inputs(True, padded=True), tmp_path, atol=1e-5,
                     run_inputs=(x, padding_mask([2, 5, 4], 5)))


def test_encoder_nested_pads_with_zeros(tmp_path: Any) -> None:
    """With a padding mask torch returns exact zeros at the padding (before the final
    norm): so does the artefact, at another length too."""
    torch.manual_seed(0)
    model = Encoder(norm=False).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}, "padding": {1: "S"}})
    x, padding = inputs(True, length=7, padded=True)
    with torch.no_grad():
        assert model(x, padding)[padding].abs().max() == 0
    export_and_check(model, inputs(True, padded=True), tmp_path, target=target, input_names=["x", "padding"],
                     run_inputs=(x, padding), atol=1e-5)


class Attention(nn.Module):
    def __init__(self, average: bool = True, kind: str = "none"):
        super().__init__()
        self.mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
        self.average, self.kind = average, kind

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[1]
        padding = attn = None
        if self.kind == "padding":
            padding = padding_mask([n, n - 2], n)[: x.shape[0]]
        elif self.kind == "attn":
            attn = torch.ones(n, n, dtype=torch.bool).triu(1)
        return self.mha(x, x, x, need_weights=True, average_attn_weights=self.average,
                        key_padding_mask=padding, attn_mask=attn)


@pytest.mark.parametrize("kind", ["none", "padding", "attn"])
@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per-head"])
def test_multihead_attention_weights(average: bool, kind: str, tmp_path: Any) -> None:
    """need_weights=True: the output and the weights, averaged [B, L, S] or per head [B, H, L, S]."""
    torch.manual_seed(0)
    model = Attention(average, kind).eval()
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        out, weights = model(x)
    assert weights.shape == ((2, 5, 5) if average else (2, HEADS, 5, 5))
    with torch.no_grad():
        graph = str(torch.jit.trace(model, (x,), check_trace=False).inlined_graph)
    assert "aten::_native_multi_head_attention" in graph
    export_and_check(model, (x,), tmp_path, atol=1e-5)


def test_multihead_attention_weights_dynamic(tmp_path: Any) -> None:
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    export_and_check(Attention(False).eval(), (torch.randn(2, 5, E),), tmp_path, target=target, input_names=["x"],
                     run_inputs=(torch.randn(2, 9, E),), atol=1e-5)
