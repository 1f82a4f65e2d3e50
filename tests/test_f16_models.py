"""Half-precision models: f16 exported and checked as f16; bf16 (no tract type) exported as
f32 weights and inputs, compared with torch's bf16 outputs widened to f32."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

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
