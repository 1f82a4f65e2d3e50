"""Mixture-of-experts blocks of transformers exported with export_model_to_nnef, through
transformers' grouped experts (``aten::histc`` counts the rows of each expert,
``aten::_grouped_mm`` runs them): run by tract on the traced input, on fresh inputs of
the same shape (the routing is not frozen). A dynamic token axis is refused (the rows
are sorted by expert, and tract sorts only a constant number of elements)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NError
from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check

transformers = pytest.importorskip("transformers")


def _mixtral_block() -> nn.Module:
    from transformers import MixtralConfig, MixtralModel

    config = MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, vocab_size=32)
    return MixtralModel(config).layers[0].mlp


def _qwen2_moe_block() -> nn.Module:
    from transformers import Qwen2MoeConfig, Qwen2MoeModel

    config = Qwen2MoeConfig(hidden_size=16, moe_intermediate_size=12, shared_expert_intermediate_size=20,
                            num_experts=6, num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1, vocab_size=32, intermediate_size=24)
    return Qwen2MoeModel(config).layers[0].mlp


class Block(nn.Module):
    """The block alone, with the output that every family returns (its hidden states)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


BLOCKS = {"mixtral": _mixtral_block, "qwen2-moe": _qwen2_moe_block}


def _model(make: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = Block(make()).eval()
    assert model.block.experts.config._experts_implementation == "grouped_mm"
    return model


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_grouped_experts_static(name: str, tmp_path: Path) -> None:
    model = _model(BLOCKS[name])
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16)
    path = export_and_check(model, (x,), tmp_path, atol=1e-5)
    artefact = TractArtefact.load(path)
    for seed in (2, 3):  # other routings than the traced one
        torch.manual_seed(seed)
        other = torch.randn(2, 5, 16)
        with torch.no_grad():
            expected = model(other)
        torch.testing.assert_close(torch.from_numpy(artefact.run([other])[0]), expected, atol=1e-5, rtol=1e-5)


def test_grouped_experts_dynamic_tokens_refused(tmp_path: Path) -> None:
    """The grouped form sorts the routed rows: a sort along a dynamic axis is a top-k of
    its length, which tract's top-k cannot take. Refused, naming the sort."""
    model = _model(BLOCKS["mixtral"])
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    with pytest.raises(T2NError, match=r"aten::sort .*tract's top-k needs a constant k"):
        export_and_check(model, (torch.randn(1, 5, 16),), tmp_path, target=target, input_names=["x"])
    assert not (tmp_path / "model.nnef").exists()


@pytest.mark.parametrize("bins, low, high", [(4, 0, 3), (5, -1.0, 2.0), (3, 0.5, 0.75)])
def test_histc(bins: int, low: float, high: float, tmp_path: Path) -> None:
    """Counts per bin, the max in the last bin, values outside [min, max] left out; run on
    the traced input and on a fresh one."""
    model = Fn(lambda x: torch.histc(x, bins=bins, min=low, max=high))
    torch.manual_seed(0)
    traced = torch.cat([torch.randint(-1, 5, (12,)).float(), torch.rand(7) * 3 - 1, torch.tensor([float(high)])])
    fresh = torch.cat([torch.randint(-1, 5, (12,)).float(), torch.rand(7) * 3 - 1, torch.tensor([float(low)])])
    path = export_and_check(model, (traced,), tmp_path)
    got = TractArtefact.load(path).run([fresh])[0]
    torch.testing.assert_close(torch.from_numpy(got), torch.histc(fresh, bins=bins, min=low, max=high))
