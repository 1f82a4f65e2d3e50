"""Where torch_to_nnef_llm is wrong (llm-export.md §6), checked against Hugging Face's own
generation, not against our wrapper: sliding windows beyond the window, positions from
the real past length, no process-wide patch left behind, modes.json listing exactly the
bundles written and run in tract."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import transformers
from torch.nn import functional as F
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from fastnnef.llm import dump_llm
from fastnnef.llm.moe import dense_experts
from fastnnef.llm.verify import torch_generate
from fastnnef.nnef.serialize import TENSOR_PROGRESS
from tests.llm.tiny import build


@pytest.mark.parametrize("name, window", [("gemma2", 4), ("mistral-window", 4)])
def test_sliding_window_is_honoured_beyond_the_window(
    name: str, window: int, checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    """Prompt (6) + generated tokens (16) go far past the window (4), and the window
    matters for these weights: without it, Hugging Face generates other tokens."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint(name))
    generation = report.generation
    assert generation is not None and generation.tract_tokens == generation.torch_tokens
    assert len(generation.prompt) + len(generation.torch_tokens) > 4 * window
    unwindowed = build(name)
    unwindowed.config.sliding_window = 10_000
    if name == "gemma2":
        unwindowed.config.layer_types = ["full_attention"] * unwindowed.config.num_hidden_layers
    prompt = torch.tensor([generation.prompt])
    assert torch_generate(unwindowed, prompt, 16) != generation.torch_tokens


def test_long_rope_switches_to_the_long_factors(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """Prompt (6) + 16 tokens pass original_max_position_embeddings (16): transformers
    switches to the long factors and re-processes the sequence; tract's tokens follow, and
    the long factors matter for these weights (short factors only give other tokens)."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("phi3-longrope"))
    generation = report.generation
    assert generation is not None and generation.tract_tokens == generation.torch_tokens
    short_only = build("phi3-longrope")
    rope = short_only.config.rope_parameters
    assert len(generation.prompt) + len(generation.torch_tokens) > rope["original_max_position_embeddings"]
    rope["long_factor"] = rope["short_factor"]
    short_only.model.rotary_emb.long_inv_freq = short_only.model.rotary_emb.original_inv_freq
    assert torch_generate(short_only, torch.tensor([generation.prompt]), 16) != generation.torch_tokens


def test_positions_come_from_the_past_length(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """phi computes positions from its cache's length (the reference pins it to 0): the
    continuation bundles and 16 generated tokens match Hugging Face."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("phi"))
    assert all(c.ok for c in report.bundle_checks)
    generation = report.generation
    assert generation is not None and generation.tract_tokens == generation.torch_tokens


def _global_state() -> dict[str, object]:
    return {
        "DynamicLayer.update": DynamicLayer.update,
        "DynamicLayer.lazy_initialization": DynamicLayer.lazy_initialization,
        "DynamicSlidingWindowLayer.update": DynamicSlidingWindowLayer.update,
        "DynamicCache.__init__": DynamicCache.__init__,
        "MixtralExperts.forward": transformers.models.mixtral.modeling_mixtral.MixtralExperts.forward,
        "F.layer_norm": F.layer_norm,
        "transformers verbosity": transformers.utils.logging.get_verbosity(),
        "fastnnef log level": logging.getLogger("fastnnef").level,
        "tensor progress": TENSOR_PROGRESS.get(),
    }


def test_no_global_state_outlives_an_export(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    before = _global_state()
    dump_llm(tmp_path / "out", local_dir=checkpoint("mixtral"))
    assert _global_state() == before


def test_dense_experts_is_scoped_to_the_instance() -> None:
    """The dense form replaces forward on the model's own expert modules, and only while
    the block runs; it computes what Hugging Face's experts compute."""
    model = build("mixtral")
    other = build("mixtral")
    experts = [m for m in model.modules() if type(m).__name__ == "MixtralExperts"]
    ids = torch.tensor([[5, 9, 17, 33, 2]])
    with torch.no_grad():
        expected = model(ids).logits
        with dense_experts(model) as switched:
            assert switched == len(experts) == 2
            assert all("forward" in vars(m) for m in experts)
            dense = model(ids).logits
            assert not any("forward" in vars(m) for m in other.modules())
    assert not any("forward" in vars(m) for m in experts)
    torch.testing.assert_close(dense, expected, atol=1e-5, rtol=1e-5)


def test_modes_json_lists_the_bundles_run_in_tract(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("qwen3"), sample_generation_total_size=2)
    assert report.modes == ["prompt", "prompt_with_past", "text_generation"]
    for mode in report.modes:
        assert (report.export_dir / f"tests/{mode}_inputs.npz").is_file()
        assert (report.export_dir / f"tests/{mode}_outputs.npz").is_file()
    assert [c.name for c in report.bundle_checks] == ["export", *report.modes]
    assert all(c.ok for c in report.bundle_checks)
