"""Half-precision models: f16 exported and checked as f16; bf16 (no tract type) exported as
f32 weights and inputs, compared with torch's bf16 outputs widened to f32. Norms of f16
inputs: computed in f16 unless ``force_norm_in_f32`` upcasts them, as the reference does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check, needs_handler

DAT_HEADER = 128  # nnef-format.md §1.1


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def conv() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv1d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv1d(8, 2, 1))


MODELS = [
    pytest.param(mlp, (2, 8), id="mlp"),
    pytest.param(conv, (1, 3, 10), id="conv1d", marks=needs_handler("aten::_convolution")),
]


@pytest.mark.parametrize("make_model, shape", MODELS)
def test_f16(make_model: Callable[[], nn.Module], shape: tuple[int, ...], tmp_path: Path) -> None:
    model = make_model().half().eval()
    torch.manual_seed(1)
    x = torch.randn(*shape).half()
    path = export_and_check(model, x, tmp_path, compression_level=None, input_names=["x"], atol=1e-2, rtol=1e-2)
    text = (path / "graph.nnef").read_text()
    assert f"x = tract_core_external(shape = {list(shape)}, datum_type = 'f16');" in text
    for name, p in model.state_dict().items():
        assert (path / f"{name}.dat").stat().st_size == DAT_HEADER + 2 * p.numel(), name


@pytest.mark.parametrize("make_model, shape", MODELS)
def test_bf16(make_model: Callable[[], nn.Module], shape: tuple[int, ...], tmp_path: Path) -> None:
    model = make_model().to(torch.bfloat16).eval()
    torch.manual_seed(1)
    x = torch.randn(*shape).to(torch.bfloat16)
    target = TractNNEF.latest().with_check_io_tolerance("very")  # bf16 keeps ~3 digits
    path = export_and_check(
        model, x, tmp_path, target=target, compression_level=None, input_names=["x"],
        run_inputs=[x], atol=5e-2, rtol=2e-2,
    )
    text = (path / "graph.nnef").read_text()
    assert f"x = tract_core_external(shape = {list(shape)}, datum_type = 'f32');" in text
    for name, p in model.state_dict().items():
        assert (path / f"{name}.dat").stat().st_size == DAT_HEADER + 4 * p.numel(), name


class VectorNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.norm(x, p=2, dim=1, keepdim=True)


def batch_norm_f32_params() -> nn.Module:
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(3)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 2)
    bn.bias.data.uniform_(-1, 1)
    return bn


def group_norm_f32_params() -> nn.Module:
    torch.manual_seed(0)
    gn = nn.GroupNorm(3, 6)
    gn.weight.data.uniform_(0.5, 2)
    gn.bias.data.uniform_(-1, 1)
    return gn


# Norm modules left in f32 (not .half()) applied to an f16 input: torch gives f16.
F32_PARAM_NORMS = [
    pytest.param(batch_norm_f32_params, (2, 3, 5), id="batch_norm"),
    pytest.param(group_norm_f32_params, (2, 6, 4), id="group_norm"),
]


def _target(force_norm: bool) -> TractNNEF:
    target = TractNNEF.latest()
    target.force_norm_in_f32 = force_norm
    return target


@pytest.mark.parametrize("make_model, shape", F32_PARAM_NORMS)
def test_f16_norm_with_f32_params_stores_f16_params(
    make_model: Callable[[], nn.Module], shape: tuple[int, ...], tmp_path: Path,
) -> None:
    """Not forced: the f32 parameters are converted at export and stored as f16 (the
    reference writes no cast to f32 or f16 in the graph); tract agrees with torch."""
    model = make_model().eval()
    torch.manual_seed(1)
    x = torch.randn(*shape).half()
    path = export_and_check(model, x, tmp_path, target=_target(False), compression_level=None,
                            input_names=["x"], atol=1e-2, rtol=1e-2)
    text = (path / "graph.nnef").read_text()
    assert "tract_core_cast" not in text, text
    dats = list(path.glob("*.dat"))
    assert dats, "the norm's parameters are stored"
    params = {n: p.numel() for n, p in model.state_dict().items() if p.is_floating_point()}
    for dat in dats:
        numel = next(n for name, n in params.items() if dat.stem.startswith(name))
        assert dat.stat().st_size == DAT_HEADER + 2 * numel, dat.name


@pytest.mark.parametrize("make_model, shape", F32_PARAM_NORMS)
def test_f16_norm_forced_in_f32(make_model: Callable[[], nn.Module], shape: tuple[int, ...], tmp_path: Path) -> None:
    """Forced: the input is cast to f32, the norm computed with the f32 parameters as
    they are, and the output cast back to f16."""
    model = make_model().eval()
    torch.manual_seed(1)
    x = torch.randn(*shape).half()
    path = export_and_check(model, x, tmp_path, target=_target(True), compression_level=None,
                            input_names=["x"], output_names=["y"], atol=1e-2, rtol=1e-2)
    text = (path / "graph.nnef").read_text()
    assert "tract_core_cast(x, to = 'f32')" in text, text
    assert 'y = tract_core_cast(' in text and "to = 'f16')" in text, text


def test_f16_vector_norm_forced_in_f32_does_not_overflow(tmp_path: Path) -> None:
    """torch.norm of f16 values whose squares pass f16's maximum (65504): torch accumulates
    in f32 and returns a finite f16; under force_norm_in_f32 the artefact squares and sums
    in f32 too and matches it (in f16 the sum would be inf)."""
    torch.manual_seed(1)
    x = (torch.rand(2, 4, 3) * 200 + 300).half()  # squares 90000..250000
    path = export_and_check(VectorNorm(), x, tmp_path, target=_target(True), compression_level=None,
                            input_names=["x"], atol=1e-1, rtol=1e-2)
    text = (path / "graph.nnef").read_text()
    assert "to = 'f32'" in text and "to = 'f16'" in text, text


def test_f16_vector_norm_not_forced_stays_f16(tmp_path: Path) -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 4, 3).half()
    path = export_and_check(VectorNorm(), x, tmp_path, target=_target(False), compression_level=None,
                            input_names=["x"], atol=1e-2, rtol=1e-2)
    assert "tract_core_cast" not in (path / "graph.nnef").read_text()


def test_f32_norm_params_keep_their_variables(tmp_path: Path) -> None:
    """An f32 model is untouched: its norm parameters are stored under their own names."""
    model = batch_norm_f32_params().eval()
    torch.manual_seed(1)
    path = export_and_check(model, torch.randn(2, 3, 5), tmp_path, target=_target(True), compression_level=None)
    assert sorted(p.stem for p in path.glob("*.dat")) == sorted(
        n for n, p in model.state_dict().items() if p.is_floating_point()
    )
    assert "tract_core_cast" not in (path / "graph.nnef").read_text()
