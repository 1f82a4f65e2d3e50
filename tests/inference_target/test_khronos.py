"""KhronosNNEF: strict graphs with no tract extension, checked in tract; tract-only needs
raise T2NErrorStrictNNEFSpec naming what needs tract, before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorStrictNNEFSpec
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import KhronosNNEF
from tests.helpers import export_and_check, needs_handler


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Sigmoid())


def conv() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))


@pytest.mark.parametrize(
    "make_model, shape",
    [(mlp, (2, 4)), pytest.param(conv, (1, 3, 6, 6), marks=needs_handler("aten::_convolution"))],
    ids=["mlp", "conv"],
)
def test_strict_graph(make_model: Callable[[], nn.Module], shape: tuple[int, ...], tmp_path: Path) -> None:
    torch.manual_seed(1)
    path = export_and_check(
        make_model().eval(), torch.randn(*shape), tmp_path, target=KhronosNNEF.latest(),
        compression_level=None, input_names=["x"], output_names=["y"], atol=1e-5,
    )
    text = (path / "graph.nnef").read_text()
    assert "tract_" not in text
    assert "x = external<scalar>(shape = [" in text
    assert text.startswith("version 1.0;")


class GatherElements(nn.Module):
    """torch.gather has no strict-NNEF form (tract_core_gather_elements only)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.gather(self.lin(x), 1, torch.tensor([[3, 0], [1, 1]]))


@pytest.mark.parametrize(
    "model, args, match",
    [
        (GatherElements(), torch.randn(2, 4), "tract_core_gather_elements"),
        (mlp().half(), torch.randn(2, 4).half(), "f16"),
    ],
    ids=["tract-op", "f16-input"],
)
def test_tract_only_needs(model: nn.Module, args: Any, match: str, tmp_path: Path) -> None:
    with pytest.raises(T2NErrorStrictNNEFSpec, match=match):
        export_model_to_nnef(model.eval(), args, tmp_path / "m.nnef", KhronosNNEF.latest())
    assert list(tmp_path.iterdir()) == []
