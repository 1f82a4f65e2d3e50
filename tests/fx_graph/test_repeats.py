"""Alike layers captured once (fx_graph/repeats.py): a stack of blocks exported through the
public API inside ``layers_captured_once``, run in tract against PyTorch, and its artefact
compared with the one a capture layer by layer gives; layers whose index changes what
they compute are found out and captured one by one."""

from __future__ import annotations

import hashlib
import logging
import tarfile
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.fx_graph.repeats import RepeatPlan, layers_captured_once
from fastnnef.inference_target import TractNNEF
from tests import helpers

pytestmark = pytest.mark.skipif(helpers.FRONT_END == "jit", reason="torch.export's capture only")


class Block(nn.Module):
    """A residual block; ``special`` (a layer index or None): that layer doubles its
    output, a branch on an attribute the layers' comparison leaves aside (``layer_idx``)."""

    def __init__(self, width: int, layer_idx: int, special: int | None):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)
        self.layer_idx = layer_idx
        self.special = special

    def forward(self, x: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
        y = self.proj(self.norm(x)).relu() * scale
        if mask is not None:
            y = y.masked_fill(mask, 0.0)
        if self.layer_idx == self.special:
            y = y * 2
        return x + y


class Stack(nn.Module):
    def __init__(self, n: int = 6, width: int = 16, special: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(Block(width, i, special) for i in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x < -2.0
        for block in self.blocks:
            x = block(x, 0.5, mask)
        return x


def _export(model: Stack, tmp_path: Path, name: str, plan: RepeatPlan | None) -> Path:
    with layers_captured_once(plan):
        return helpers.export_and_check(model, (torch.randn(2, 5, 16),), tmp_path, name=name, input_names=["x"],
                                        target=TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}}))


def _members(path: Path) -> dict[str, str]:
    with tarfile.open(path) as archive:
        return {m.name: hashlib.sha256(archive.extractfile(m).read()).hexdigest()  # type: ignore[union-attr]
                for m in archive.getmembers() if m.isfile()}


def _plan(model: Stack) -> RepeatPlan:
    return RepeatPlan(list(model.blocks), ["block"] * len(model.blocks))


def test_alike_layers_captured_once_give_the_artefact_of_a_capture_layer_by_layer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = Stack()
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        once = _export(model, tmp_path, "once.nnef", _plan(model))
    assert "3 alike layers captured once" in caplog.text  # layers 2, 3, 4: 0, 1 and 5 are compared
    by_layer = _export(model, tmp_path, "by_layer.nnef", None)
    assert _members(once) == _members(by_layer)


@pytest.mark.parametrize("special", [0, 5])
def test_a_first_or_last_layer_of_its_own_is_captured_layer_by_layer(
        special: int, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The first and the last layer of a group are captured in full and compared with the
    second: one that computes otherwise sends the whole model back to a capture layer by
    layer, whose artefact tract runs as PyTorch does (export_and_check)."""
    model = Stack(special=special)
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        once = _export(model, tmp_path, "once.nnef", _plan(model))
    assert f"layer {special} (alike layers captured once from layer 1)" in caplog.text
    assert "captured again one by one" in caplog.text
    assert _members(once) == _members(_export(model, tmp_path, "by_layer.nnef", None))


def test_layers_called_otherwise_run_as_usual(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A layer called with other plain arguments than the second (another scale) is not a
    repeat of it: it is captured as it runs."""

    class Scaled(Stack):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for i, block in enumerate(self.blocks):
                x = block(x, 0.5 if i != 3 else 0.25, None)
            return x

    model = Scaled()
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        _export(model, tmp_path, "once.nnef", _plan(model))
    assert "2 alike layers captured once" in caplog.text  # 2 and 4; 3 ran as usual


def test_layers_of_other_kinds_or_shapes_are_not_grouped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = Stack()
    kinds = ["a", "a", "b", "a", "b", "a"]  # 4 of kind a: one group, of layers 0, 1, 3, 5
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        _export(model, tmp_path, "kinds.nnef", RepeatPlan(list(model.blocks), kinds))
    assert "1 alike layers captured once" in caplog.text  # layer 3
    caplog.clear()
    model.blocks[2].proj = nn.Linear(16, 16, bias=False)  # another structure: its own kind, alone
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        _export(model, tmp_path, "shapes.nnef", _plan(model))
    assert "2 alike layers captured once" in caplog.text  # of 0, 1, 3, 4, 5: 3 and 4 are repeats


def test_the_model_is_given_back_as_it_was(tmp_path: Path) -> None:
    model = Stack()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _export(model, tmp_path, "once.nnef", _plan(model))
    assert all("forward" not in block.__dict__ for block in model.blocks)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
