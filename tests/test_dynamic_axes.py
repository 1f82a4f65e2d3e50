"""Dynamic axes: the symbol and custom assertions are declared, the input is written with
the symbol, and an artefact exported at one length runs at others."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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


class TransformerBlock(nn.Module):
    """Pre-norm causal attention + MLP; heads split with sizes read from x.shape."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("reify", [True, False], ids=["sdpa_op", "sdpa_decomposed"])
def test_transformer_blocks_run_at_other_batch_and_lengths(tmp_path: Path, reify: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(TransformerBlock(), TransformerBlock()).eval()
    target = TractNNEF(TractNNEF.latest_version(), reify_sdpa_operator=reify).with_dynamic_axes(
        {"x": {0: "B", 1: "S"}}
    )
    path = export_and_check(model, (torch.randn(2, 7, 32),), tmp_path, target=target,
                            input_names=["x"], output_names=["y"],
                            custom_extensions=["tract_assert S >= 1"])
    artefact = TractArtefact.load(path)
    assert artefact.input_facts == [("f32", ["B", "S", 32])]
    for batch, length in ((1, 1), (3, 12), (1, 40)):
        x = torch.randn(batch, length, 32)
        (got,) = artefact.run([x])
        with torch.no_grad():
            expected = model(x).numpy()
        assert abs(got - expected).max() < 1e-4, (batch, length)
