"""MoE blocks as ``tract_moe_ffn`` (tract >= 0.23.9): one op per block runs only the routed
experts. Every family is exported through ``dump_llm`` from a saved tiny checkpoint and
verified by 16 greedy tokens in tract equal to Hugging Face's ``generate``; DeepSeek's
routings (whose MLA attention the LLM exporter does not handle yet) are checked on the
MoE block alone. Older targets, and routings the op cannot express, keep the dense form."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.llm import dump_llm
from fastnnef.llm.load import load_checkpoint, resolve_source
from fastnnef.llm.moe import moe_export_forms
from fastnnef.op.custom_extractors.moe import expert_weights, moe_ffn_plan
from fastnnef.tensor.offload import ComposedOffloadedTensor, OffloadedTensor
from fastnnef.tensor.offload_slice import OffloadedSlice
from fastnnef.utils import SemanticVersion
from tests.helpers import export_and_check
from tests.llm.tiny import INIT, _decoder

# The last tract without tract_moe_ffn.
BEFORE_MOE_FFN = "0.23.5"
assert VERSION_GATES["moe_ffn"].first.to_str() == "0.23.9"

MOE = dict(num_experts_per_tok=2)
FAMILIES: dict[str, Callable[[], Any]] = {
    "mixtral": lambda: _decoder(transformers.MixtralConfig, num_local_experts=4, **MOE),
    "qwen2_moe": lambda: _decoder(  # a gated shared expert beside the routed ones; softmax_all
        transformers.Qwen2MoeConfig, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        decoder_sparse_step=1, **MOE,
    ),
    "qwen3_moe": lambda: _decoder(
        transformers.Qwen3MoeConfig, head_dim=16, num_experts=4, moe_intermediate_size=32, decoder_sparse_step=1,
        norm_topk_prob=True, **MOE,
    ),
    "olmoe": lambda: _decoder(transformers.OlmoeConfig, num_experts=4, **MOE),
    "granitemoe": lambda: _decoder(transformers.GraniteMoeConfig, num_local_experts=4, **MOE),
    "granitemoeshared": lambda: _decoder(  # a shared MLP beside the routed experts
        transformers.GraniteMoeSharedConfig, num_local_experts=4, shared_intermediate_size=48, **MOE,
    ),
    "gpt_oss": lambda: _decoder(  # router and expert biases, interleaved gate/up, clamped SwiGLU
        transformers.GptOssConfig, num_local_experts=4, head_dim=8, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], **MOE,
    ),
}
# The gate mode each family's router maps to.
GATES = {"mixtral": "softmax_topk", "qwen2_moe": "softmax_all", "qwen3_moe": "softmax_topk", "olmoe": "softmax_all",
         "granitemoe": "softmax_topk", "granitemoeshared": "softmax_topk", "gpt_oss": "softmax_topk"}


def _model(config: Any) -> Any:
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def moe_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            made[name] = tmp_path_factory.mktemp(f"moe-{name}")
            _model(FAMILIES[name]()).save_pretrained(made[name])
        return made[name]

    return make


def _graph_text(model_path: Path) -> str:
    with tarfile.open(model_path) as tar:
        member = tar.extractfile("graph.nnef")
        assert member is not None
        return member.read().decode()


def _export(checkpoint: Path, out: Path) -> Any:
    report = dump_llm(out, local_dir=checkpoint)
    assert report.verified and all(c.ok for c in report.bundle_checks), report.summary()
    generation = report.generation
    assert generation is not None and generation.exact_required and len(generation.torch_tokens) == 16
    assert generation.tract_tokens == generation.torch_tokens, generation.summary()
    return report


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_generation_with_moe_ffn(
    name: str, moe_checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    report = _export(moe_checkpoint(name), tmp_path / "out")
    text = _graph_text(report.model_path)
    calls = [line for line in text.splitlines() if "tract_moe_ffn(" in line]
    assert len(calls) == 2  # one per layer
    assert all(f"gate = '{GATES[name]}'" in line for line in calls)
    assert "extension tract_registry tract_transformers;" in text
    # Routing happens inside the op: the traced router's top-k is gone.
    assert "tract_core_topk" not in text
    if name == "gpt_oss":
        assert all("wg_bias = " in line and "w2_bias = " in line and "act_limit = 7.0" in line for line in calls)


def test_dense_form_for_a_target_without_moe_ffn(
    moe_checkpoint: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """dump_llm targets the newest tract; aimed at 0.23.5 it writes the dense form."""
    monkeypatch.setattr(TractNNEF, "latest_version", classmethod(lambda cls: SemanticVersion.from_str(BEFORE_MOE_FFN)))
    report = _export(moe_checkpoint("mixtral"), tmp_path / "out")
    text = _graph_text(report.model_path)
    assert "tract_moe_ffn" not in text and "tract_core_topk" in text


def test_streamed_experts_split_without_reading(moe_checkpoint: Callable[[str], Path]) -> None:
    """Mixtral's checkpoint holds one tensor per expert and projection; transformers fuses
    gate and up: the op's w1 and w3 are those checkpoint tensors again, unread."""
    checkpoint = load_checkpoint(resolve_source(None, moe_checkpoint("mixtral")), None, "eager", False)
    block = checkpoint.model.model.layers[0].mlp
    weights = expert_weights(block.experts)
    assert weights.layout == "linear"
    for tensor, projection in ((weights.w1, "w1"), (weights.w3, "w3")):
        assert isinstance(tensor, ComposedOffloadedTensor)
        assert [p.key for g in tensor.groups for p in g] == [
            f"model.layers.0.block_sparse_moe.experts.{e}.{projection}.weight" for e in range(4)
        ]
        assert tuple(tensor.shape) == (4, 64, 32)
    assert isinstance(weights.w2, OffloadedTensor) and weights.w2 is block.experts.down_proj
    torch.testing.assert_close(weights.w1.to_base_tensor(), block.experts.gate_up_proj.to_base_tensor()[:, :64])


@pytest.mark.parametrize(("name", "layout"), [("granitemoe", "linear"), ("gpt_oss", "canonical")])
def test_fused_experts_are_sliced_without_reading(
    name: str, layout: str, moe_checkpoint: Callable[[str], Path]
) -> None:
    """Granite-MoE and gpt-oss checkpoints store gate and up fused (gpt-oss interleaved,
    transposed): the halves are slices of that checkpoint tensor, read when written."""
    checkpoint = load_checkpoint(resolve_source(None, moe_checkpoint(name)), None, "eager", False)
    experts = next(m for m in checkpoint.model.modules() if hasattr(m, "gate_up_proj"))
    fused = experts.gate_up_proj
    assert isinstance(fused, OffloadedTensor) and not isinstance(fused, ComposedOffloadedTensor)
    weights = expert_weights(experts)
    assert weights.layout == layout
    values = fused.to_base_tensor()
    halves = (values[..., 0::2], values[..., 1::2]) if name == "gpt_oss" else values.chunk(2, dim=1)
    for tensor, expected in zip((weights.w1, weights.w3), halves):
        assert isinstance(tensor, OffloadedSlice) and tensor.source is fused
        torch.testing.assert_close(tensor.written_values(), expected, rtol=0, atol=0)
        torch.testing.assert_close(tensor + 0, expected, rtol=0, atol=0)  # torch ops see the same values


# --- DeepSeek and Granite-MoE-hybrid, on the MoE block alone (every routing variant; the whole --
# --- models, Granite's Mamba2 layers included, are exported in test_architectures.py) -----------
def _deepseek_v3(**routing: Any) -> Any:
    return _decoder(
        transformers.DeepseekV3Config, n_routed_experts=8, moe_intermediate_size=32, first_k_dense_replace=0,
        kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        routed_scaling_factor=2.5, **{"num_experts_per_tok": 2, **routing},
    )


def _deepseek_v2(**routing: Any) -> Any:
    return _decoder(
        transformers.DeepseekV2Config, n_routed_experts=8, moe_intermediate_size=32, first_k_dense_replace=0,
        kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        routed_scaling_factor=1.5, **{"num_experts_per_tok": 2, **routing},
    )


def _granite_hybrid() -> Any:
    return transformers.GraniteMoeHybridConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48,
        layer_types=["attention", "attention"], mamba_n_heads=8, mamba_d_head=8, initializer_range=INIT,
    )


def _block(config: Any) -> Any:
    """The first module that holds a router and experts."""
    return next(m for m in _model(config).modules() if hasattr(m, "experts") and not hasattr(m, "layers"))


@pytest.mark.parametrize(("config", "gate", "scaled"), [
    (lambda: _deepseek_v3(n_group=1, topk_group=1, norm_topk_prob=False), "sigmoid", True),
    (lambda: _deepseek_v3(n_group=4, topk_group=4, norm_topk_prob=False), "sigmoid", True),  # every group kept
    (lambda: _deepseek_v2(topk_method="greedy"), "softmax_all", True),
    (_granite_hybrid, "softmax_topk", False),
], ids=["deepseek-v3-sigmoid", "deepseek-v3-all-groups", "deepseek-v2-greedy", "granitemoehybrid"])
def test_block_as_moe_ffn(config: Callable[[], Any], gate: str, scaled: bool, tmp_path: Path) -> None:
    block = _block(config())
    x = torch.randn(1, 7, 32) * INIT * 10
    with moe_export_forms(block, TractNNEF.latest().capabilities()) as forms:
        assert forms.moe_ffn == [""] and not forms.dense
        path = export_and_check(block, (x,), tmp_path, target=TractNNEF.latest(), atol=1e-4, rtol=1e-4)
    text = Path(path, "graph.nnef").read_text() if path.is_dir() else _graph_text(path)
    assert f"gate = '{gate}'" in text and "tract_moe_ffn(" in text
    # routed_scaling_factor, applied to the routed sum
    assert bool(re.search(r"= mul\(\w+_routed, [0-9.]+\);", text)) == scaled


@pytest.mark.parametrize(("config", "reason"), [
    (lambda: _deepseek_v3(n_group=1, topk_group=1, norm_topk_prob=True), "norm_topk_prob"),
    (lambda: _deepseek_v3(n_group=4, topk_group=2, norm_topk_prob=False), "best 2 of 4 expert groups"),
    (lambda: _deepseek_v2(topk_method="group_limited_greedy", n_group=4, topk_group=2), "selects within groups"),
], ids=["v3-renormalized", "v3-grouped", "v2-grouped"])
def test_routing_the_op_cannot_express_stays_dense(config: Callable[[], Any], reason: str, tmp_path: Path) -> None:
    block = _block(config())
    plan = moe_ffn_plan(block)
    assert isinstance(plan, str) and reason in plan
    x = torch.randn(1, 7, 32) * INIT * 10
    with moe_export_forms(block, TractNNEF.latest().capabilities()) as forms:
        assert not forms.moe_ffn and reason in forms.dense[""]
        path = export_and_check(block, (x,), tmp_path, target=TractNNEF.latest(), atol=1e-4, rtol=1e-4)
    text = Path(path, "graph.nnef").read_text() if path.is_dir() else _graph_text(path)
    assert "tract_moe_ffn" not in text


def test_score_correction_bias_stays_dense() -> None:
    block = _block(_deepseek_v3(n_group=1, topk_group=1, norm_topk_prob=False))
    block.gate.e_score_correction_bias[3] = 0.5
    plan = moe_ffn_plan(block)
    assert isinstance(plan, str) and "e_score_correction_bias" in plan


def test_experts_outside_a_plan_are_traced_as_before(tmp_path: Path) -> None:
    """The extractors registered for transformers' experts classes take only planned
    instances: a Mixtral block exported without a plan (dense form) has no tract_moe_ffn."""
    block = _block(FAMILIES["mixtral"]())
    x = torch.randn(1, 5, 32) * INIT * 10
    with moe_export_forms(block, TractNNEF(BEFORE_MOE_FFN).capabilities()) as forms:
        assert not forms.moe_ffn and "0.23.9" in forms.dense[""]
        path = export_and_check(block, (x,), tmp_path, target=TractNNEF(BEFORE_MOE_FFN, check_io=False))
    text = Path(path, "graph.nnef").read_text() if path.is_dir() else _graph_text(path)
    assert "tract_moe_ffn" not in text


def test_q4_0_experts(moe_checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    """The routed experts written as Q4_0 (tract's packed Q4_0 path of tract_moe_ffn):
    torch computes with the same Q4_0 values, so every bundle and the generation match."""
    report = dump_llm(tmp_path / "out", local_dir=moe_checkpoint("mixtral"),
                      compression_method="min_max_q4_0_with_experts",
                      compression_registry="fastnnef.llm.moe.MOE_COMPRESSION")
    assert all(c.ok for c in report.bundle_checks), report.summary()
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    with tarfile.open(report.model_path) as tar:
        sizes = {m.name: m.size for m in tar.getmembers()}
    # [4 experts, 64, 32] as Q4_0: 18 bytes per 32 values, after the 128-byte .dat header.
    for projection in ("w1", "w3", "down_proj"):
        assert sizes[f"model.model.layers.0.mlp.experts.{projection}.dat"] == 128 + 4 * 64 * 32 // 32 * 18
    # A down-projection bias of zeros: tract's per-expert plans instead of its one-token-at-
    # a-time direct Q4_0 plan (the bundles above show the values unchanged).
    calls = [line for line in _graph_text(report.model_path).splitlines() if "tract_moe_ffn(" in line]
    assert calls and all("w2_bias = " in line for line in calls)
