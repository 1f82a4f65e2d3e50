"""The ``torch.export`` front end (``front_end="export"``, issue 25): the same IR as the jit
tracer's, sizes from torch's symbolic shapes, tensor values read at run time, no
deprecated API on its path; ``"auto"`` falls back to the tracer where torch.export cannot
capture the model."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorTorchExportFailed
from fastnnef.export import export_model_to_nnef, export_model_with_result
from fastnnef.inference_target import TractNNEF
from tests.helpers import TRACER_ALLOWED, Fn, assert_outputs_match, export_and_check

ROOT = Path(__file__).resolve().parent.parent


class Block(nn.Module):
    """One attention block: linear, layer norm, SDPA over heads split from the sequence's
    features, GELU, a buffer and a tensor constant; sizes read from the input."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)
        self.register_buffer("shift", torch.linspace(-1, 1, 8))
        self.scale = torch.tensor(0.5)  # a plain tensor attribute: a constant of the program

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        q, k, v = self.qkv(self.norm(x)).split(8, dim=-1)
        heads = [t.view(b, s, 2, 4).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(b, s, 8)
        return F.gelu(y) * self.scale + self.shift + x[:, : s // 2].mean(1, keepdim=True)


def _grown(x: torch.Tensor, axis: int, by: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[axis] += by
    return torch.randn(shape)


def test_a_block_with_a_dynamic_axis(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(2, 6, 8)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_and_check(model, (x,), tmp_path, target=target, input_names=["x"], front_end="export")
    artefact = TractArtefact.load(path)
    for longer in (_grown(x, 1, 3), _grown(x, 1, 10)):  # odd and even lengths: s // 2 in the graph
        with torch.no_grad():
            assert_outputs_match(model(longer), artefact.run([longer]), 1e-4, 1e-4)


@TRACER_ALLOWED
def test_the_same_outputs_as_the_jit_front_end(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(1, 5, 8)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    outputs = {}
    for front_end in ("jit", "export"):
        result = export_model_with_result(model, (x,), tmp_path / f"{front_end}.nnef", target, input_names=["x"],
                                          front_end=front_end)
        outputs[front_end] = TractArtefact.load(result.path).run([x])
    assert_outputs_match(torch.from_numpy(outputs["jit"][0]), outputs["export"], 1e-5, 1e-5)


class Counted(Block):
    """The block, counting its forward calls (eager and under torch.export's fake tensors) in
    a list: the export gives the module's attributes back as they were."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(True)
        return super().forward(x)


@pytest.mark.parametrize("front_end", ["export", "auto"])
def test_without_a_check_no_eager_forward_runs(tmp_path: Path, front_end: str) -> None:
    """Nothing reads the outputs of an export without check_io (``export_model_to_nnef``
    returns a path): torch.export's fake run is the only forward, and the artefact is the
    same as a checked export's."""
    torch.manual_seed(0)
    model, x = Counted().eval(), torch.randn(2, 6, 8)
    unchecked = TractNNEF(TractNNEF.latest_version(), check_io=False, dynamic_axes={"x": {1: "S"}})
    path = export_model_to_nnef(model, (x,), tmp_path / "unchecked.nnef", unchecked, input_names=["x"],
                                compression_level=None, front_end=front_end)
    assert len(model.calls) == 1
    checked = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    export_model_to_nnef(model, (x,), tmp_path / "checked.nnef", checked, input_names=["x"],
                         compression_level=None, front_end=front_end)
    assert len(model.calls) == 3  # eager, then fake
    assert (path / "graph.nnef").read_text() == (tmp_path / "checked.nnef" / "graph.nnef").read_text()
    artefact = TractArtefact.load(path)
    for longer in (x, _grown(x, 1, 3)):
        with torch.no_grad():
            assert_outputs_match(model(longer), artefact.run([longer]), 1e-4, 1e-4)


def test_the_caller_of_export_with_result_gets_the_outputs_without_a_check(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(1, 5, 8)
    unchecked = TractNNEF(TractNNEF.latest_version(), check_io=False)
    result = export_model_with_result(model, (x,), tmp_path / "m.nnef", unchecked, front_end="export")
    with torch.no_grad():
        assert torch.equal(result.traced_outputs[0], model(x))


def test_two_inputs_sharing_a_symbol(tmp_path: Path) -> None:
    torch.manual_seed(0)
    fn = Fn(lambda a, b: torch.cat([a, b * 2], dim=-1).softmax(-1) + b.sum(-1, keepdim=True))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    target = TractNNEF.latest().with_dynamic_axes({"a": {0: "N"}, "b": {0: "N"}})
    path = export_and_check(fn, (a, b), tmp_path, target=target, input_names=["a", "b"], front_end="export")
    a2, b2 = torch.randn(7, 4), torch.randn(7, 4)
    assert_outputs_match(fn(a2, b2), TractArtefact.load(path).run([a2, b2]), 1e-5, 1e-5)


def test_an_input_read_as_a_number_is_computed_at_run_time(tmp_path: Path) -> None:
    """``x * s.item()``: an unbacked symbol to torch.export, the 0-d input in the graph
    (the jit tracer freezes it: tests/test_frozen_constants.py)."""
    torch.manual_seed(0)
    path = export_and_check(Fn(lambda x, s: x * s.item() + s.item()), (torch.randn(5), torch.tensor(0.5)), tmp_path,
                            front_end="export")
    x, s = torch.randn(5), torch.tensor(-3.0)
    assert_outputs_match(x * -3.0 - 3.0, TractArtefact.load(path).run([x, s]), 1e-5, 1e-5)


def test_a_python_float_of_an_input_is_refused_naming_the_line(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorTorchExportFailed, match="data-dependent"):
        export_model_to_nnef(Fn(lambda x, s: x * float(s)), (torch.randn(3), torch.tensor(0.5)),
                             tmp_path / "m.nnef", TractNNEF.latest(), front_end="export")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_dynamic_axis_torch_fixes_is_refused_naming_the_input(tmp_path: Path) -> None:
    """istft needs its frequency axis at n_fft: torch fixes that dynamic axis, and the error
    names it as the user did (not as torch's ``L['flat'][0].size()[1]``)."""
    spec = torch.stft(torch.randn(1, 64), 16, 4, window=torch.hann_window(16), return_complex=True)
    model = Fn(lambda s: torch.istft(s, 16, 4, window=torch.hann_window(16)))
    target = TractNNEF.latest().with_dynamic_axes({"spec": {1: "F"}})
    named = r"(?s)input 'spec' axis 1 \(dynamic axis F\).*export it static"
    with pytest.raises(T2NErrorTorchExportFailed, match=named):
        export_model_to_nnef(model, (spec,), tmp_path / "m.nnef", target, input_names=["spec"], front_end="export")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_model_is_left_as_it_was(tmp_path: Path) -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)  # a buffer written by forward
            return self.lin(x) + self.calls

    model = Counter().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_and_check(model.eval(), (torch.randn(2, 4),), tmp_path, front_end="export",
                     no_redraw="the buffer counts calls: each torch run changes the expected output")
    model.train()
    export_model_to_nnef(model, (torch.randn(2, 4),), tmp_path / "train.nnef", TractNNEF.latest(), front_end="export")
    assert model.training and all(m.training for m in model.modules())
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]) or key == "calls", key
    assert float(model.calls) == 1.0  # export_and_check's own torch run; the exports restored it


@TRACER_ALLOWED
def test_a_script_module_is_traced_under_auto_and_refused_under_export(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = torch.jit.script(nn.Sequential(nn.Linear(3, 2), nn.ReLU()))
    with pytest.raises(T2NErrorTorchExportFailed, match="TorchScript"):
        export_model_to_nnef(script, (torch.randn(1, 3),), tmp_path / "e.nnef", TractNNEF.latest(), front_end="export")
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        export_and_check(script, (torch.randn(1, 3),), tmp_path, front_end="auto")
    assert "torch.jit.trace front end" in caplog.text


def test_an_unknown_front_end_is_refused(tmp_path: Path) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="front_end"):
        export_model_to_nnef(nn.ReLU(), (torch.randn(2),), tmp_path / "m.nnef", TractNNEF.latest(), front_end="fx")


def test_no_deprecation_warning_on_its_path(tmp_path: Path) -> None:
    """Under ``PYTHONWARNINGS=error`` (a common CI setting) the export front end raises no
    warning: it never calls the deprecated tracer."""
    script = textwrap.dedent(f"""
        import torch
        from fastnnef import export_model_to_nnef
        from fastnnef.inference_target import TractNNEF
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3))
        target = TractNNEF.latest().with_dynamic_axes({{"x": {{0: "B"}}}})
        export_model_to_nnef(model, torch.randn(2, 4), {str(tmp_path / "m.nnef")!r}, target,
                             input_names=["x"], front_end="export")
    """)
    env = {**os.environ, "PYTHONWARNINGS": "error", "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "m.nnef.tar").exists()
