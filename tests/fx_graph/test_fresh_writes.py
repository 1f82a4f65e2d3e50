"""In-place writes under torch.export (fx_graph/fresh_writes.py): writes into memory the
program made are replayed functionally where they stand, without the second trace of
``run_decompositions`` (through slices and selects by ``slice_scatter``/``select_scatter``,
a view made before a write made again after it); a write through a view of another kind,
into an input, or beside an op of unknown aliasing is left to torch's functionalization.
Each case is exported and run in tract against torch, and the captured program shows which
way it went."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.fx_graph.capture import capture_program
from fastnnef.fx_graph.fresh_writes import make_fresh_writes_functional
from tests.helpers import Fn, export_and_check


def writes_left(model: nn.Module, *args: torch.Tensor) -> list[str]:
    """The in-place ops that torch.export's program keeps after the rewrite: those are left
    to torch's functionalization."""
    with torch.no_grad():
        program = torch.export.export(model, args, strict=False)
    make_fresh_writes_functional(program)
    return sorted(str(n.target) for n in program.graph.nodes
                  if isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable)


class ConvBlock(nn.Module):
    """What vision models are made of: ReLU(inplace=True) after batch norm, a residual ``+=``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm(self.conv(x)))
        out += x
        return self.relu(out)


def router(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral's top-k renormalization: a write into one result of topk."""
    weights, experts = torch.topk(x.softmax(-1), 2, dim=-1)
    weights /= weights.sum(-1, keepdim=True)
    return weights, experts


def chained(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Reads before, between and after two writes of one tensor."""
    y = x * 1
    before = y + 0
    y.add_(1.0)
    between = y * 2
    y.mul_(3.0).masked_fill_(x > 1.0, -5.0)
    return before, between, y


def view_then_write(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A view made before the write reads the written values."""
    y = x * 1
    flat = y.view(-1)
    y.mul_(2.0)
    return flat + 0, y


def write_into_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1:3].add_(10.0)
    return y


def interleaved(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3.5's interleaved mRoPE: two writes through strided slices of one selected row,
    the row read after both; a write into a select of a select."""
    freqs = torch.stack([x, x * 2, x * 3])
    row = freqs[0]
    for dim, offset in ((1, 1), (2, 2)):
        row[..., offset:6:3] = freqs[dim, ..., offset:6:3]
    grid = x * 1
    grid[1][2].fill_(-7.0)
    return row * 1, grid


def view_of_a_view_then_writes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Views taken before, between and after writes, each read after the last write."""
    y = x * 1
    head = y[:2]
    tail = y[:, 3:]
    y[0, 0] = 100.0
    middle = y[1:].t()
    y[:, 4:].mul_(-1.0)
    return head * 1, tail * 1, middle * 1, y


def write_into_split(x: torch.Tensor) -> torch.Tensor:
    """split's results are views (``Tensor(a)[]``): the write shows in the whole."""
    y = x * 1
    head, _ = y.split(3, dim=1)
    head.neg_()
    return y


def write_through_transpose(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.t()[0].add_(5.0)
    return y


def copies_before_write(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``to`` another dtype and ``reshape`` of a transposed tensor copy: they keep the values
    from before the write."""
    y = x * 1
    half = y.to(torch.float16)
    flat = y.t().reshape(-1)
    y.mul_(2.0)
    return half, flat, y


def write_through_same_dtype_to(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``to`` its own dtype is the tensor itself: torch records the write through it."""
    y = x * 1
    same = y.to(torch.float32)
    y.mul_(2.0)
    return same * 1, y


def view_after_write(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.clamp_(-0.5, 0.5)
    return y.view(-1)


CASES: list[tuple[str, Callable[[], nn.Module], list[str]]] = [
    ("conv_block", ConvBlock, []),
    ("router", lambda: Fn(router), []),
    ("chained", lambda: Fn(chained), []),
    ("view_after_write", lambda: Fn(view_after_write), []),
    ("view_then_write", lambda: Fn(view_then_write), []),
    ("write_into_view", lambda: Fn(write_into_view), []),
    ("interleaved", lambda: Fn(interleaved), []),
    ("view_of_a_view_then_writes", lambda: Fn(view_of_a_view_then_writes), []),
    ("write_into_split", lambda: Fn(write_into_split), ["aten.neg_.default"]),
    ("write_through_transpose", lambda: Fn(write_through_transpose), ["aten.add_.Tensor"]),
    ("copies_before_write", lambda: Fn(copies_before_write), ["aten.mul_.Tensor"]),
    ("write_through_same_dtype_to", lambda: Fn(write_through_same_dtype_to), ["aten.mul_.Tensor"]),
]


@pytest.mark.parametrize(("make", "left"), [pytest.param(make, left, id=name) for name, make, left in CASES])
def test_writes_in_tract_as_in_torch(make: Callable[[], nn.Module], left: list[str], tmp_path: Path) -> None:
    model = make().eval()
    x = torch.randn(2, 4, 5, 5) if isinstance(model, ConvBlock) else torch.randn(3, 6)
    export_and_check(model, (x,), tmp_path, front_end="export")
    assert writes_left(model, x) == left


def test_batch_norm_kept_as_called_when_every_write_is_fresh() -> None:
    """No second trace: ``run_decompositions`` would have rewritten batch_norm."""
    program = capture_program(ConvBlock().eval(), (torch.randn(1, 4, 5, 5),), None, None,
                              lambda names, inputs: {}, values=False).program
    kinds = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "aten.batch_norm.default" in kinds
    assert "aten.relu.default" in kinds and "aten.add.Tensor" in kinds

