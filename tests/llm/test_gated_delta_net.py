"""Gated delta net (Qwen3-Next, Qwen3.5) as ``tract_transformers_causal_conv1d_update`` and
``tract_transformers_gdn_recurrent``: the two modules against transformers' own functions,
the two ops in tract at several S from one artefact, the LLM artefact's state IO, and the
refusal of a target without the ops. (The families' 16 greedy tokens: test_architectures.py.)"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers.models.qwen3_next import modeling_qwen3_next as hf

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target import TractNNEF
from fastnnef.llm import dump_llm
from fastnnef.op.custom_extractors.gdn import CausalConvUpdateReified, GatedDeltaNetRecurrentReified
from fastnnef.utils import SemanticVersion
from tests.helpers import export_and_check, run_carrying_states

BEFORE_GDN = "0.23.4"  # the last tract without tract_transformers_gdn_recurrent


def _rule_inputs(new: int, k_heads: int = 2, v_heads: int = 4, width: int = 8) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, new, k_heads, width), torch.randn(1, new, k_heads, width),
            torch.randn(1, new, v_heads, width), -torch.rand(1, new, v_heads), torch.rand(1, new, v_heads),
            torch.randn(1, v_heads, width, width))


@pytest.mark.parametrize("new", [1, 6])
def test_rule_matches_transformers(new: int) -> None:
    torch.manual_seed(0)
    q, k, v, g, beta, state = _rule_inputs(new)
    out, final = GatedDeltaNetRecurrentReified()(q, k, v, g, beta, state)
    for rule in (hf.torch_recurrent_gated_delta_rule, hf.torch_chunk_gated_delta_rule):
        expected, expected_final = rule(q, k, v, g=g, beta=beta, initial_state=state.clone(), output_final_state=True,
                                        use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(final, expected_final, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("new", [1, 6])
def test_conv_matches_transformers(new: int) -> None:
    torch.manual_seed(0)
    x, state, weight = torch.randn(1, 12, new), torch.randn(1, 12, 4), torch.randn(12, 4)
    out, final = CausalConvUpdateReified()(x, state, weight)
    hf_state = state.clone()  # transformers' update writes the new state into it
    torch.testing.assert_close(out, hf.causal_conv1d_update(x, hf_state, weight, None, "silu"), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(final, hf_state)


def test_prompt_from_zero_states_is_transformers_prompt_path() -> None:
    """An empty past as zero states: transformers' prompt path (zero-padded convolution,
    no initial state) computes the same."""
    torch.manual_seed(0)
    x, weight = torch.randn(1, 12, 6), torch.randn(12, 4)
    out, final = CausalConvUpdateReified()(x, torch.zeros(1, 12, 4), weight)
    torch.testing.assert_close(out, hf.causal_conv1d_fn(x, weight, None, activation="silu"), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(final, x[..., -4:])
    q, k, v, g, beta, _ = _rule_inputs(6)
    core, state = GatedDeltaNetRecurrentReified()(q, k, v, g, beta, torch.zeros(1, 4, 8, 8))
    expected, expected_state = hf.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None,
                                                               output_final_state=True, use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(core, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, expected_state, atol=1e-5, rtol=1e-5)


class ConvThenRule(torch.nn.Module):
    """A toy linear-attention core: the convolution feeds q, k, v, the gates and beta."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = CausalConvUpdateReified()
        self.rule = GatedDeltaNetRecurrentReified()
        self.weight = torch.nn.Parameter(torch.randn(40, 4))

    def forward(self, x: torch.Tensor, conv_state: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, conv_state = self.conv(x.transpose(1, 2), conv_state, self.weight)
        y = y.transpose(1, 2)
        new = x.shape[1]
        q, k, v = y[..., :8].reshape(1, new, 1, 8), y[..., 8:16].reshape(1, new, 1, 8), y[..., 16:32].reshape(1, new, 2,
                                                                                                              8)
        g = -torch.nn.functional.softplus(y[..., 32:34])
        out, state = self.rule(q, k, v, g, y[..., 34:36].sigmoid(), state)
        return out, conv_state, state


@pytest.mark.parametrize("front_end", ["export", "jit"])
def test_ops_in_tract_at_any_length(tmp_path: Path, front_end: str) -> None:
    """One artefact traced at S = 5 runs S = 1 and S = 9 (the states carried over) as PyTorch does.
    Under torch.export the module is one op whose fake kernel (the extractor's fake_forward)
    keeps S dynamic."""
    torch.manual_seed(0)
    model = ConvThenRule().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_and_check(model, (torch.randn(1, 5, 40), torch.randn(1, 40, 4), torch.randn(1, 2, 8, 8)), tmp_path,
                            target=target, front_end=front_end, input_names=["x", "conv", "state"],
                            output_names=["y", "conv_out", "state_out"],
                            no_redraw="the runs below draw S = 1 and S = 9")
    with tarfile.open(path) as tar:
        text = tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]
    assert text.count("tract_transformers_causal_conv1d_update(") == 1
    assert text.count("tract_transformers_gdn_recurrent(") == 1
    artefact = TractArtefact.load(path)
    run_carrying_states(artefact, model, [torch.zeros(1, 40, 4), torch.zeros(1, 2, 8, 8)], width=40)


def test_llm_artefact_states(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """qwen3_next in the published layer order (linear, linear, linear, full): each linear
    layer's two ops, its states as cache IO of fixed shapes, and P only on the
    full-attention layer's keys and values; every MoE block as tract_moe_ffn."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("qwen3_next"))
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    with tarfile.open(report.model_path) as tar:
        text = tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]
    assert text.count("tract_transformers_causal_conv1d_update(") == 3
    assert text.count("tract_transformers_gdn_recurrent(") == 3
    assert text.count("tract_moe_ffn(") == 4  # Qwen3-Next's router is one of the op's gate modes
    states = ", ".join([*(f"in_cache_conv_{i}, in_cache_recurrent_{i}" for i in range(3)),
                        "in_cache_key_3, in_cache_value_3"])
    assert f"graph network(input_ids, {states})" in text
    declared = {line.split("=")[0].strip(): line for line in text.splitlines() if "tract_core_external(" in line}
    assert "[1, 64, 4]" in declared["in_cache_conv_0"] and "[1, 4, 8, 8]" in declared["in_cache_recurrent_2"]
    assert "P" in declared["in_cache_key_3"] and "P" not in declared["in_cache_conv_0"]


def test_a_target_without_the_ops_is_refused(
    checkpoint: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(TractNNEF, "latest_version", classmethod(lambda cls: SemanticVersion.from_str(BEFORE_GDN)))
    out = tmp_path / "out"
    with pytest.raises(T2NErrorNotImplemented, match=r"linear-attention layers \[0, 1, 2\] \(gated delta net\) "
                       r"export as tract_transformers_gdn_recurrent and tract_transformers_causal_conv1d_update, "
                       r"which tract "
                       r"0\.23\.4 lacks: target tract 0\.23\.5 or newer"):
        dump_llm(out, local_dir=checkpoint("qwen3_next"))
    assert not out.exists()


def test_forced_f16(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """In f16 the ops take tract's mixed form (f16 q/k/v, beta and states, f32 log decay)."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("qwen3_next"), force_module_dtype="f16",
                      tract_check_io_tolerance="super")
    assert report.cache_dtype == "f16" and all(c.ok for c in report.bundle_checks), report.summary()
    artefact = TractArtefact.load(report.model_path)
    assert [dtype for dtype, _ in artefact.input_facts] == ["i64"] + ["f16"] * 8
    assert report.generation is not None and report.generation.ok
