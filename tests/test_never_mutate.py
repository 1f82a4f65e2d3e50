"""Exporting never changes the model (parameters, buffers, attributes, flags, hooks), and two exports
from two threads at once give the same bytes as one at a time."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from tests import helpers
from tests.helpers import TRACER_ALLOWED


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))
        self.register_buffer("unused_counter", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x) * self.scale)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(3, 4)
        self.block = Block()
        self.head = nn.Linear(4, 2, bias=False)
        self.head.weight.requires_grad_(False)  # frozen head: mixed requires_grad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(torch.relu(self.first(x))))


def _hooks(model: nn.Module) -> dict[str, Any]:
    return {
        name: [
            (k, id(v)) for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
            for k, v in getattr(m, attr).items()
        ]
        for name, m in model.named_modules()
    }


def test_export_never_mutates(tmp_path: Path) -> None:
    model = Model()
    model.eval()
    model.block.train()  # a submodule left in training mode by the user
    seen: list[str] = []
    model.block.register_forward_hook(lambda m, i, o: seen.append("hook"))
    model.first.register_forward_pre_hook(lambda m, i: None)
    before = copy.deepcopy(model)
    params_before = {n: (type(p), p.requires_grad) for n, p in model.named_parameters()}
    ids_before = {n: id(p) for n, p in model.named_parameters()}
    training_before = {n: m.training for n, m in model.named_modules()}
    hooks_before = _hooks(model)
    keys_before = list(model.state_dict().keys())

    x = torch.randn(2, 3)
    export_model_to_nnef(model, x, tmp_path / "m.nnef", TractNNEF.latest())

    # The model runs once eagerly (the references), and under torch.export once more on fake
    # tensors (the capture, which reads no value), with the user's hooks each time.
    runs = 1 if helpers.FRONT_END == "jit" else 2
    assert seen == ["hook"] * runs, "the model runs once per capture, with the user's hooks"
    assert {n: (type(p), p.requires_grad) for n, p in model.named_parameters()} == params_before
    assert all(type(p) is nn.Parameter for p in model.parameters())
    assert {n: id(p) for n, p in model.named_parameters()} == ids_before
    for (name, p), (_, q) in zip(model.named_parameters(), before.named_parameters()):
        assert torch.equal(p, q), name
        assert p.grad is None, name
    for (name, b), (_, c) in zip(model.named_buffers(), before.named_buffers()):
        assert b.dtype == c.dtype and torch.equal(b, c), name
    assert {n: m.training for n, m in model.named_modules()} == training_before
    assert _hooks(model) == hooks_before
    assert list(model.state_dict().keys()) == keys_before
    assert set(vars(model)) == set(vars(before))


class Streaming(nn.Module):
    """A forward that changes its module: a state buffer rebound, a counter, a cache added."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.register_buffer("state", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.state = self.state * 0.5 + x
        self.last = x
        return self.state * 2.0


@TRACER_ALLOWED  # torch.export refuses a tensor attribute assigned in forward: "auto" traces
def test_forward_changing_its_module(tmp_path: Path) -> None:
    """The artefact computes the call asked for (its weights are read after the trace: the
    state the forward rebound is read as it was before), and the module is left as it was."""
    model = Streaming()
    state, x = model.state, torch.arange(3.0)
    path = export_model_to_nnef(model, x, tmp_path / "s.nnef.tgz", TractNNEF.latest())  # check_io: tract == 2x
    (got,) = TractArtefact.load(path).run([x])
    np.testing.assert_allclose(got, 2.0 * x.numpy())
    assert model.calls == 0 and model.state is state and not hasattr(model, "last")
    assert torch.equal(state, torch.zeros(3))


class Other(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.sigmoid(self.a(x))) + x


def test_two_threads(tmp_path: Path) -> None:
    jobs = [(Model().eval(), torch.randn(2, 3)), (Other().eval(), torch.randn(4, 5))]
    alone = [
        export_model_to_nnef(m, x, tmp_path / f"alone{i}.nnef", TractNNEF.latest()).read_bytes()
        for i, (m, x) in enumerate(jobs)
    ]
    results: list[bytes | None] = [None, None]
    errors: list[BaseException] = []

    def run(i: int, round_: int) -> None:
        try:
            model, x = jobs[i]
            path = export_model_to_nnef(model, x, tmp_path / f"round{round_}_{i}.nnef", TractNNEF.latest())
            results[i] = path.read_bytes()
        except BaseException as err:  # surfaced in the main thread below
            errors.append(err)

    for round_ in range(3):  # a few rounds: interleavings vary
        threads = [threading.Thread(target=run, args=(i, round_)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert results == alone
