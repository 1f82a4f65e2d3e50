"""Dynamic axes: the symbol and custom assertions are declared, the input is written with
the symbol, and an artefact exported at one length runs at others."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check, needs_handler


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(4, 8)
        self.down = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x))) + x


class SizeArithmetic(nn.Module):
    """Uses the dynamic length in a reshape (x.shape[1] * 2), so shapes become expressions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y.reshape(x.shape[0], x.shape[1] * 2, 2) * 3.0


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(4, 6, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)


@pytest.mark.parametrize(
    "make_model",
    [Mlp, SizeArithmetic, pytest.param(Conv, marks=needs_handler("aten::_convolution"))],
    ids=["mlp", "size-arith", "conv1d"],
)
def test_dynamic_length(make_model: Callable[[], nn.Module], tmp_path: Path) -> None:
    model = make_model().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    torch.manual_seed(3)
    path = export_and_check(
        model, torch.randn(1, 5, 4), tmp_path, target=target, compression_level=None,
        input_names=["x"], output_names=["y"], custom_extensions=["tract_assert S >= 1"], atol=1e-5,
    )
    text = (path / "graph.nnef").read_text()
    lines = text.splitlines()
    assert "extension tract_symbol S;" in lines
    assert "extension tract_assert S >= 1;" in lines
    assert lines.index("extension tract_symbol S;") < lines.index("extension tract_assert S >= 1;")
    assert "  x = tract_core_external(shape = [1, S, 4], datum_type = 'f32');" in lines
    art = TractArtefact.load(path)
    assert art.input_facts == [("f32", [1, "S", 4])]
    for n in (3, 9, 1):
        x = torch.randn(1, n, 4)
        with torch.no_grad():
            expected = model(x)
        (got,) = art.run([x])
        assert got.shape == tuple(expected.shape)
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-5, rtol=1e-5)


def test_symbol_in_two_inputs_and_batch(tmp_path: Path) -> None:
    """Two inputs sharing S, plus a dynamic batch B on one: each symbol declared once."""

    class Add(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a * 2.0 + b

    target = TractNNEF.latest().with_dynamic_axes({"a": {0: "B", 1: "S"}, "b": {1: "S"}})
    path = export_and_check(
        Add(), (torch.randn(2, 5), torch.randn(1, 5)), tmp_path, target=target, compression_level=None,
        input_names=["a", "b"], run_inputs=[torch.randn(3, 7), torch.randn(1, 7)],
    )
    lines = (path / "graph.nnef").read_text().splitlines()
    assert lines.count("extension tract_symbol B;") == 1
    assert lines.count("extension tract_symbol S;") == 1
