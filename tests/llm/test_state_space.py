"""State-space layers (Mamba, Mamba2, LFM2's short convolutions, the hybrids): the selective
scan and the convolution against transformers' own functions, the scan as one
``tract_core_scan`` run by tract at several S from one artefact, the LLM artefacts' state IO
(no P axis for a model without attention), and half-precision and Q4_0 exports. (The
families' 16 greedy tokens: test_architectures.py.)"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers.models.mamba import modeling_mamba as hf_mamba
from transformers.models.mamba2 import modeling_mamba2 as hf_mamba2

from fastnnef.check import TractArtefact
from fastnnef.inference_target import TractNNEF
from fastnnef.llm import dump_llm
from fastnnef.llm.state_space import causal_conv
from fastnnef.op.custom_extractors.ssm import SelectiveScanReified
from tests.helpers import export_and_check, run_carrying_states


def _graph_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        return tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]


@pytest.mark.parametrize("new", [1, 7])
def test_scan_is_transformers_mamba_scan(new: int) -> None:
    """Mamba's layout (a state per channel and state dim): transformers' sequential scan."""
    torch.manual_seed(0)
    channels, size = 6, 4
    x, dt = torch.randn(1, channels, new), torch.rand(1, channels, new)
    A, B, C = -torch.rand(channels, size), torch.randn(1, size, new), torch.randn(1, size, new)
    expected, expected_state = hf_mamba.mamba_selective_scan(x, dt, A, B, C, return_last_state=True)
    y, state = SelectiveScanReified()(dt.transpose(1, 2)[..., None], x.transpose(1, 2)[..., None],
                                      B.transpose(1, 2)[:, :, None], C.transpose(1, 2)[:, :, None], A[None, None],
                                      torch.zeros(1, 1, channels, size))
    torch.testing.assert_close(y.transpose(1, 2), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state[:, 0], expected_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("new", [1, 7])
def test_scan_is_transformers_mamba2_chunked_scan(new: int) -> None:
    """Mamba2's layout (heads in groups sharing B and C), from a non-zero state: the chunked
    (SSD) form transformers runs prompts with."""
    torch.manual_seed(0)
    groups, per_group, head_dim, size = 2, 2, 3, 4
    heads = groups * per_group
    x, dt = torch.randn(1, new, heads, head_dim), torch.rand(1, new, heads)
    A, B, C = -torch.rand(heads), torch.randn(1, new, groups, size), torch.randn(1, new, groups, size)
    initial = torch.randn(1, heads, head_dim, size)
    expected, expected_state = hf_mamba2.mamba2_chunk_scan(x, dt, A, B, C, chunk_size=4, initial_states=initial,
                                                           return_final_states=True)
    y, state = SelectiveScanReified()(
        dt.reshape(1, new, groups, per_group, 1, 1), x.reshape(1, new, groups, per_group, head_dim, 1),
        B.reshape(1, new, groups, 1, 1, size), C.reshape(1, new, groups, 1, 1, size),
        A.reshape(1, 1, groups, per_group, 1, 1), initial.reshape(1, 1, groups, per_group, head_dim, size),
    )
    torch.testing.assert_close(y.reshape(1, new, heads, head_dim), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state.reshape(1, heads, head_dim, size), expected_state, atol=1e-5, rtol=1e-5)


def test_convolution_from_zero_state_is_transformers_prompt_path() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3)
    x = torch.randn(1, 6, 5)
    out, state = causal_conv(x, torch.zeros(1, 6, 4), conv)
    expected = hf_mamba.causal_conv1d_fn(x, conv.weight.squeeze(1), conv.bias)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(state, torch.cat([torch.zeros(1, 6, 0), x[..., 1:]], dim=-1))


class ConvThenScan(torch.nn.Module):
    """A toy Mamba core: the convolution feeds x, dt, B and C of a scan of 2 heads."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(14, 14, 4, groups=14)
        self.scan = SelectiveScanReified()
        self.A_log = torch.nn.Parameter(torch.randn(2))

    def forward(self, x: torch.Tensor, conv_state: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, conv_state = causal_conv(x.transpose(1, 2), conv_state, self.conv)
        y = torch.nn.functional.silu(y).transpose(1, 2)
        batch, new = x.shape[:2]
        xs, dt, B, C = torch.split(y, [8, 2, 2, 2], dim=-1)
        dt = torch.nn.functional.softplus(dt).reshape(batch, new, 2, 1, 1)
        out, state = self.scan(dt, xs.reshape(batch, new, 2, 4, 1), B.reshape(batch, new, 1, 1, 2),
                               C.reshape(batch, new, 1, 1, 2), -self.A_log.exp().reshape(1, 1, 2, 1, 1), state)
        return out.reshape(batch, new, 8), conv_state, state


@pytest.mark.parametrize("front_end", ["export", "jit"])
def test_scan_in_tract_at_any_length(tmp_path: Path, front_end: str) -> None:
    """One artefact traced at S = 5 runs S = 9 and then S = 1 twice (the states carried over)
    as PyTorch does: one tract_core_scan, its step a fragment.
    Under torch.export the module is one op whose fake kernel (the extractor's fake_forward)
    keeps S dynamic."""
    torch.manual_seed(0)
    model = ConvThenScan().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_and_check(model, (torch.randn(1, 5, 14), torch.randn(1, 14, 4), torch.randn(1, 1, 2, 4, 2)),
                            tmp_path, target=target, front_end=front_end, input_names=["x", "conv", "state"],
                            output_names=["y", "conv_out", "state_out"], no_redraw="the runs below draw S = 1 and 9")
    text = _graph_text(path)
    assert text.count("tract_core_scan(") == 1 and "fragment fastnnef_ssm_step_" in text
    artefact = TractArtefact.load(path)
    run_carrying_states(artefact, model, [torch.zeros(1, 14, 4), torch.zeros(1, 1, 2, 4, 2)], width=14)


def test_mamba_artefact_states_without_past(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """mamba (2 layers, no attention): per layer a convolution and a recurrent state of
    fixed shapes, one tract_core_scan each; no P anywhere, S bounded by nothing but >= 1."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("mamba"))
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    text = _graph_text(report.model_path)
    assert text.count("tract_core_scan(") == 2
    assert "graph network(input_ids, in_cache_conv_0, in_cache_recurrent_0, in_cache_conv_1, in_cache_recurrent_1)" \
        in text
    declared = {line.split("=")[0].strip(): line for line in text.splitlines() if "tract_core_external(" in line}
    assert "[1, 64, 4]" in declared["in_cache_conv_0"] and "[1, 64, 8]" in declared["in_cache_recurrent_1"]
    assert "P" not in text.split("graph network")[0] + "".join(declared.values())
    assert "tract_assert S >= 1" in text


def test_lfm2_artefact_conv_states(checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """lfm2 (layers: conv, attention, conv): a convolution state per conv layer (no recurrent
    state, no scan), P only on the attention layer's keys and values."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint("lfm2"))
    assert report.generation is not None and report.generation.tract_tokens == report.generation.torch_tokens
    text = _graph_text(report.model_path)
    assert "tract_core_scan(" not in text
    assert "graph network(input_ids, in_cache_conv_0, in_cache_key_1, in_cache_value_1, in_cache_conv_2)" in text
    declared = {line.split("=")[0].strip(): line for line in text.splitlines() if "tract_core_external(" in line}
    assert "[1, 32, 3]" in declared["in_cache_conv_0"] and "P" in declared["in_cache_key_1"]


@pytest.mark.parametrize("name", ["mamba2", "mamba", "lfm2", "falcon_h1", "jamba"])
def test_forced_f16(name: str, checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """In f16 every bundle passes tract's check; the scan runs in f32 inside."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint(name), force_module_dtype="f16",
                      tract_check_io_tolerance="super")
    assert report.cache_dtype == "f16" and all(c.ok for c in report.bundle_checks)


@pytest.mark.parametrize(("name", "weight", "rows"), [
    ("mamba2", "model.backbone.layers.0.mixer.in_proj.weight", 64 + 96 + 4),
    ("mamba", "model.backbone.layers.0.mixer.in_proj.weight", 2 * 64),
    ("lfm2", "model.model.layers.0.conv.in_proj.weight", 3 * 32),
    ("bamba", "model.model.layers.0.mamba.in_proj.weight", 64 + 96 + 4),
    ("jamba", "model.model.layers.0.mamba.in_proj.weight", 2 * 64),
])
def test_q4_0_linear_layers(name: str, weight: str, rows: int, checkpoint: Callable[..., Path],
                            tmp_path: Path) -> None:
    """Q4_0 of the linear layers (the mixers' projections included): every bundle passes,
    tract running the blocks and PyTorch the dequantized values."""
    report = dump_llm(tmp_path / "out", local_dir=checkpoint(name), compression_method="min_max_q4_0",
                      tract_check_io_tolerance="very")
    with tarfile.open(report.model_path) as tar:
        assert tar.getmember(f"{weight}.dat").size == 128 + rows * 32 // 32 * 18  # 18 bytes per block of 32
    assert all(c.ok for c in report.bundle_checks), report.summary()
