"""Where the ``torch.export`` front end says an op came from: it captures without torch's
per-node stack traces (their cost, benches/README.md "Front ends"), so a refusal names the
op's module path and class, and torch's own data-dependent error still names the user's line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorTorchExportFailed
from fastnnef.export import export_model_to_nnef
from fastnnef.fx_graph import capture_program, lower_program
from fastnnef.inference_target import TractNNEF


class FloatOfInput(nn.Module):
    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * float(s)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


def test_a_data_dependent_guard_names_the_users_line(tmp_path: Path) -> None:
    line = FloatOfInput.forward.__code__.co_firstlineno + 1
    with pytest.raises(T2NErrorTorchExportFailed, match=rf'File "{__file__}", line {line}, in forward'):
        export_model_to_nnef(FloatOfInput(), (torch.randn(3), torch.tensor(0.5)), tmp_path / "m.nnef",
                             TractNNEF.latest(), front_end="export")
    assert list(tmp_path.iterdir()) == []


def test_every_op_names_its_module_and_class() -> None:
    model = nn.Sequential(Block())
    ir = lower_program(capture_program(model, (torch.randn(2, 3),), None, None, lambda names, inputs: {}))
    assert [(op.kind, op.scope, op.source) for op in ir.ops] == [
        ("aten::linear", "0.proj", "torch.nn.modules.linear.Linear"),
        ("aten::relu", "0", f"{__name__}.Block"),
    ]
