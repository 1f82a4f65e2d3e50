"""A stateful TorchScript module (its forward rebinds and writes into its attributes, and
branches on them) is exported as the call the user asked for: hardening and the trace run
its graph several times, each from the state the user's model has, and leave it there.
Before script_state.py, each run started where the previous one stopped, and check_io
compared tract with a later call than the one asked for, so it passed on a wrong artefact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export import export_model_with_result
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.torch_graph.script_state import attributes_kept


class Accumulator(nn.Module):
    """A streaming block: a state and a running total (a buffer) rebound on each call, a
    call count, and a branch on it (the first call is not like the others)."""

    def __init__(self) -> None:
        super().__init__()
        self.state = torch.zeros(1, 4)
        self.register_buffer("total", torch.zeros(1, 4))
        self.calls = 0
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 16).reshape(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.calls == 0:
            y = x @ self.weight + 1.0
        else:
            y = x @ self.weight * 2.0
        self.state = self.state * 0.5 + y
        self.total = self.total + x
        self.calls += 1
        return self.state + self.total


def scripted() -> torch.jit.ScriptModule:
    return torch.jit.script(Accumulator()).eval()


def _state(model: torch.jit.ScriptModule) -> tuple[object, ...]:
    return model.calls, model.state.clone(), model.total.clone()


def _assert_same_state(model: torch.jit.ScriptModule, before: tuple[object, ...]) -> None:
    calls, state, total = before
    assert model.calls == calls
    torch.testing.assert_close(model.state, state, rtol=0, atol=0)
    torch.testing.assert_close(model.total, total, rtol=0, atol=0)


@pytest.mark.parametrize("calls_before", [0, 2])
def test_exported_call_is_the_next_one(tmp_path: Path, calls_before: int) -> None:
    x = torch.arange(4.0).reshape(1, 4) / 4
    model, twin = scripted(), scripted()
    with torch.no_grad():
        for _ in range(calls_before):
            model(x)
            twin(x)
        expected = twin(x)  # the call the export is asked for
    before = _state(model)
    result = export_model_with_result(model, (x,), tmp_path / "acc.nnef.tgz", TractNNEF.latest())
    assert "check_io" in result.checks
    torch.testing.assert_close(result.traced_outputs[0], expected, rtol=0, atol=0)
    (got,) = TractArtefact.load(result.path).run([x])
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6, atol=1e-6)
    _assert_same_state(model, before)


def test_hardening_leaves_the_state(tmp_path: Path) -> None:
    """harden_jit_for_export evaluates the graph (If conditions, sizes): the module it
    returns and the user's start from the user's state."""
    x = torch.ones(1, 4)
    model = scripted()
    before = _state(model)
    hardened = harden_jit_for_export(model, (x,))
    _assert_same_state(model, before)
    _assert_same_state(hardened, before)


def test_hardening_leaves_the_inputs() -> None:
    class Scaling(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bool(x.sum() > 0):  # an If the hardening evaluates
                x.mul_(2.0)
            return x + 1.0

    x = torch.ones(3)
    harden_jit_for_export(torch.jit.script(Scaling()).eval(), (x,))
    assert torch.equal(x, torch.ones(3))


def test_writes_in_place_are_undone() -> None:
    class Running(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("total", torch.zeros(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.total.add_(x)
            return self.total * 2.0

    model = torch.jit.script(Running()).eval()
    total = model.total
    with attributes_kept(model._c):
        model(torch.ones(4))
        assert float(model.total.sum()) == 4.0
    assert model.total is total and float(total.sum()) == 0.0


def test_a_write_into_a_weight_is_refused() -> None:
    class Drifting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                self.weight.add_(1.0)
            return x * self.weight

    model = torch.jit.script(Drifting()).eval()
    with pytest.raises(T2NErrorInvalidArgument, match=r"writes in place into the weights \['weight'\]"):
        with attributes_kept(model._c):
            model(torch.ones(4))
