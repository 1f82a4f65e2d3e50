"""Real models, exported and run in tract, static and with a dynamic length: a Llama block
written by hand the usual way (RMSNorm, RoPE built with torch.outer, GQA attention with a
causal mask, SwiGLU MLP) and the torch.outer it relies on; a tiny wav2vec2 (weight norm)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check

VERSION = TractNNEF.latest().version


# --- torch.outer --------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    pytest.param(lambda: (torch.randn(5), torch.randn(3)), id="f32"),
    pytest.param(lambda: (torch.arange(5), torch.randn(3)), id="int-float"),  # promoted to f32
    pytest.param(lambda: (torch.arange(4), torch.arange(3) - 1), id="int"),
    pytest.param(lambda: (torch.randn(6).half(), torch.randn(2).half()), id="f16"),
])
def test_outer(make: Callable[[], tuple], tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Fn(torch.outer), make(), tmp_path, atol=1e-3)


def test_outer_dynamic(tmp_path: Any) -> None:
    target = TractNNEF.latest().with_dynamic_axes({"a": {0: "N"}})
    export_and_check(Fn(torch.ger), (torch.randn(5), torch.randn(3)), tmp_path, target=target,
                     input_names=["a", "b"], run_inputs=(torch.randn(9), torch.randn(3)))


# --- a hand-written Llama block -------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """cos/sin tables of the positions 0..S-1, built in forward with torch.outer."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.shape[1], dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, sdpa_gqa: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.sdpa_gqa = sdpa_gqa
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        b, h, s, d = x.shape
        groups = self.heads // self.kv_heads
        return x[:, :, None, :, :].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[None, None], sin[None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.sdpa_gqa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(q, self.repeat_kv(k), self.repeat_kv(v), is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, hidden: int = 48, sdpa_gqa: bool = False):
        super().__init__()
        self.rotary = Rotary(dim // heads)
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads, kv_heads, sdpa_gqa)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(x)
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
@pytest.mark.parametrize("sdpa_gqa", [False, True], ids=["repeat-kv", "enable-gqa"])
def test_llama_block(sdpa_gqa: bool, reify: bool, tmp_path: Any) -> None:
    torch.manual_seed(0)
    target = TractNNEF(VERSION, reify_sdpa_operator=reify)
    export_and_check(LlamaBlock(sdpa_gqa=sdpa_gqa).eval(), (torch.randn(2, 7, 32),), tmp_path, target=target,
                     atol=1e-4)


@pytest.mark.parametrize("reify", [True, False], ids=["reified", "decomposed"])
@pytest.mark.parametrize("sdpa_gqa", [False, True], ids=["repeat-kv", "enable-gqa"])
def test_llama_block_dynamic_length(sdpa_gqa: bool, reify: bool, tmp_path: Any) -> None:
    """Exported at length 7, run at 12 and 3: the RoPE tables and the mask follow the length."""
    torch.manual_seed(0)
    target = TractNNEF(VERSION, reify_sdpa_operator=reify).with_dynamic_axes({"x": {1: "S"}})
    model = LlamaBlock(sdpa_gqa=sdpa_gqa).eval()
    path = export_and_check(model, (torch.randn(2, 7, 32),), tmp_path, target=target, input_names=["x"],
                            run_inputs=(torch.randn(2, 12, 32),), atol=1e-4)
    short = torch.randn(2, 3, 32)
    with torch.no_grad():
        expected = model(short).numpy()
    np.testing.assert_allclose(TractArtefact.load(path).run([short])[0], expected, atol=1e-4, rtol=1e-4)


# --- wav2vec2 (weight-norm positional convolution) -----------------------------------------
class Wav2Vec2Hidden(nn.Module):
    """A tiny random wav2vec2 (transformers, built from a config): waveform -> hidden states."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        config = Wav2Vec2Config(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
            conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
            num_conv_pos_embedding_groups=2, feat_extract_norm="group",
        )
        self.model = Wav2Vec2Model(config)
        g = self.model.encoder.pos_conv_embed.conv.parametrizations.weight.original0
        with torch.no_grad():  # g = ||v|| at creation: make the weight norm matter
            g.mul_(torch.rand_like(g) + 0.5)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return self.model(waveform).last_hidden_state


@pytest.mark.filterwarnings("ignore::FutureWarning:transformers")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-length"])
def test_wav2vec2(dynamic: bool, tmp_path: Any) -> None:
    """The positional conv is weight-normed over dim 2 (aten::_weight_norm); with a dynamic
    waveform length, the conv stack's output length is a symbolic expression."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"waveform": {1: "T"}} if dynamic else None)
    run = (torch.randn(1, 560),) if dynamic else None
    export_and_check(Wav2Vec2Hidden().eval(), (torch.randn(1, 400),), tmp_path, target=target,
                     input_names=["waveform"], run_inputs=run, atol=1e-4)
