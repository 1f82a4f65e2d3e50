"""Tiny Hugging Face causal LMs (random weights, built from configs: no network) exported the
way LLM users do, ``forward(input_ids) -> logits``, checked in tract against torch: static
and with a dynamic sequence length run at other lengths, eager and SDPA attention, bf16 and
Q4_0-compressed weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from fastnnef.check import TractArtefact
from fastnnef.compress import quantize_weights_min_max_Q4_0
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check

VOCAB = 100
EXPORT_LEN = 5
RUN_LENS = (1, 3, 11)

# transformers deprecates its own helpers (is_gradient_checkpointing) on the traced path.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning:transformers")


class Logits(nn.Module):
    """``forward(input_ids) -> logits``: no cache, plain tuple outputs."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids, use_cache=False, return_dict=False)[0]


def gpt2(attn: str) -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64, attn_implementation=attn,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def _decoder(config_cls: Any, model_cls: Any, attn: str) -> nn.Module:
    config = config_cls(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, attn_implementation=attn,
    )
    return model_cls(config)


def llama(attn: str) -> nn.Module:
    return _decoder(transformers.LlamaConfig, transformers.LlamaForCausalLM, attn)


def qwen2(attn: str) -> nn.Module:
    return _decoder(transformers.Qwen2Config, transformers.Qwen2ForCausalLM, attn)


def mistral(attn: str) -> nn.Module:
    return _decoder(transformers.MistralConfig, transformers.MistralForCausalLM, attn)


def build(make: Callable[[str], nn.Module], attn: str) -> nn.Module:
    torch.manual_seed(0)
    return Logits(make(attn).eval()).eval()


def ids(length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, length), generator=g)


MODELS = [
    pytest.param(make, attn, id=f"{make.__name__}-{attn}")
    for make in (gpt2, llama, qwen2, mistral)
    for attn in ("eager", "sdpa")
]


@pytest.mark.parametrize("make, attn", MODELS)
def test_static(make: Callable[[str], nn.Module], attn: str, tmp_path: Path) -> None:
    model = build(make, attn)
    path = export_and_check(
        model, ids(EXPORT_LEN), tmp_path, input_names=["input_ids"], output_names=["logits"], compression_level=None,
    )
    text = (path / "graph.nnef").read_text()
    assert f"input_ids = tract_core_external(shape = [1, {EXPORT_LEN}], datum_type = 'i64');" in text


@pytest.mark.parametrize("make, attn", MODELS)
def test_dynamic_length(make: Callable[[str], nn.Module], attn: str, tmp_path: Path) -> None:
    model = build(make, attn)
    target = TractNNEF.latest().with_dynamic_axes({"input_ids": {1: "S"}})
    path = export_and_check(
        model, ids(EXPORT_LEN), tmp_path, target=target, input_names=["input_ids"], output_names=["logits"],
        custom_extensions=["tract_assert S >= 1"],
    )
    artefact = TractArtefact.load(path)
    for length in RUN_LENS:
        x = ids(length, seed=length)
        with torch.no_grad():
            expected = model(x).numpy()
        got = artefact.run([x])[0]
        assert got.shape == (1, length, VOCAB)
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4, err_msg=f"S={length}")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_bf16(attn: str, tmp_path: Path) -> None:
    """bf16 has no tract type: weights and computation go f32, torch's bf16 logits are
    compared loosely (bf16 keeps ~3 digits and rounds at every op)."""
    model = build(llama, attn).to(torch.bfloat16)
    target = TractNNEF.latest().with_check_io_tolerance("very")
    path = export_and_check(
        model, ids(EXPORT_LEN), tmp_path, target=target, input_names=["input_ids"], output_names=["logits"],
        compression_level=None, atol=5e-2, rtol=5e-2,
    )
    assert (path / "lm.lm_head.weight.dat").stat().st_size == 128 + 4 * VOCAB * 32  # f32 .dat


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_q4_0(attn: str, tmp_path: Path) -> None:
    """Q4_0 weights (the Linear layers): torch runs the dequantized weights, tract the Q4_0
    blocks, so both compute with the same values."""
    model = quantize_weights_min_max_Q4_0(build(llama, attn))
    target = TractNNEF.latest().with_dynamic_axes({"input_ids": {1: "S"}})
    path = export_and_check(
        model, ids(EXPORT_LEN), tmp_path, target=target, input_names=["input_ids"], output_names=["logits"],
        custom_extensions=["tract_assert S >= 1"], compression_level=None, atol=1e-3, rtol=1e-3,
        run_inputs=[ids(3, seed=3)],
    )
    q_proj = path / "lm.model.layers.0.self_attn.q_proj.weight.dat"
    assert q_proj.stat().st_size == 128 + 32 * 32 // 32 * 18  # Q4_0: 18 bytes per 32 weights
