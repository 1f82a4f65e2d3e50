"""``front_end="auto"``, the default (issue 25): ``torch.export``, and the jit tracer only
where torch.export cannot serve the model, decided before anything is written, the reason
logged once (``fx_graph/fallback.py``); the program's range constraints as ``tract_assert``
lines. Each fallback reason has its test; so has each error that is not one."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorIOPytorchTractNotISO, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.op.custom_extractors import ModuleInfoExtractor
from tests.helpers import TRACER_ALLOWED, assert_outputs_match, export_and_check

FELL_BACK = "exported with the torch.jit.trace front end"


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if FELL_BACK in r.getMessage()]


def _graph_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        member = tar.extractfile("graph.nnef")
        assert member is not None
        return member.read().decode()


@pytest.fixture(autouse=True)
def _logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fastnnef")


def test_the_default_is_torch_export(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No front_end given: torch.export, no tracer (its deprecation warning would be an
    error here: pyproject.toml's filterwarnings), nothing logged about a fallback."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8))
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B"}})
    path = export_model_to_nnef(model, torch.randn(3, 4), tmp_path / "m.nnef", target, input_names=["x"])
    x = torch.randn(7, 4)
    with torch.no_grad():
        assert_outputs_match(model(x), TractArtefact.load(path).run([x]), 1e-5, 1e-5)
    assert _fallbacks(caplog) == []


@TRACER_ALLOWED
def test_a_script_module_is_traced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = torch.jit.script(nn.Sequential(nn.Linear(3, 2), nn.ReLU()))
    export_and_check(script, (torch.randn(1, 3),), tmp_path, front_end="auto")
    (line,) = _fallbacks(caplog)
    assert "TorchScript module" in line


class Doubled(nn.Module):
    """A module that only its extractor exports (its forward is not what is written)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class DoubledExtractor(ModuleInfoExtractor):
    MODULE_CLASS = Doubled

    def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph, inference_target, **kwargs):  # type: ignore[no-untyped-def]
        (x,) = g.tensor_inputs()
        g.emit("add", [x, x], out=0)
        return []


def test_a_module_exported_whole_by_its_extractor_stays_on_torch_export(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Module extractors serve both front ends: no fallback (and no tracer warning, an
    error here) for a model holding one."""
    model = nn.Sequential(nn.Linear(3, 3), Doubled())
    export_and_check(model, (torch.randn(2, 3),), tmp_path)
    assert _fallbacks(caplog) == []


class Branch(nn.Module):
    """Python control flow on a tensor's value: torch.export cannot capture it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


@TRACER_ALLOWED
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_model_torch_export_cannot_capture_is_traced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    export_and_check(Branch(), (torch.rand(2, 3),), tmp_path,
                     no_redraw="the tracer keeps the branch taken: fresh inputs may take the other one")
    (line,) = _fallbacks(caplog)
    assert "T2NErrorTorchExportFailed: torch.export could not capture Branch" in line


class RangeOf(nn.Module):
    """torch.arange over bounds given as 0-d tensors: a data-dependent length, which
    torch.export captures as an unbacked symbol that the lowering refuses."""

    def forward(self, start: torch.Tensor, end: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return torch.arange(start, end, step) * 2


@TRACER_ALLOWED
def test_a_program_the_lowering_refuses_is_traced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bounds = tuple(torch.tensor(v) for v in (1, 6, 3))
    path = export_and_check(RangeOf(), bounds, tmp_path, no_redraw="random bounds make invalid ranges")
    (line,) = _fallbacks(caplog)
    assert "T2NErrorNotImplemented" in line and "a size computed from the values of a tensor" in line
    inputs = [torch.tensor(v) for v in (2, 11, 2)]
    assert_outputs_match(RangeOf()(*inputs), TractArtefact.load(path).run(inputs), 0, 0)


class OnesOfRatio(nn.Module):
    """A size divided by a size: the ``ones`` handler refuses it under either front end."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ones(x.shape[0] // y.shape[0]) + x.sum()


@TRACER_ALLOWED
def test_a_conversion_refusal_is_retried_with_the_tracer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The handler refuses the program's IR: "auto" tries the tracer (the reason logged),
    which refuses it too; the tracer's error is raised and nothing is written."""
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "S"}, "y": {0: "T"}})
    with pytest.raises(T2NErrorNotImplemented, match="aten::ones"):
        export_model_to_nnef(OnesOfRatio(), (torch.randn(12), torch.randn(3)), tmp_path / "m.nnef", target,
                             input_names=["x", "y"])
    (line,) = _fallbacks(caplog)
    assert "T2NErrorNotImplemented: aten::ones" in line
    assert list(tmp_path.iterdir()) == []


class Counting(nn.Module):
    """Each call multiplies by its call count: the program (second call) differs from the
    reference run (first call), so check_io fails on a written artefact."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


def test_a_check_io_failure_is_not_a_reason_to_trace(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(T2NErrorIOPytorchTractNotISO):
        export_model_to_nnef(Counting(), (torch.randn(3, 4),), tmp_path / "m.nnef", TractNNEF.latest())
    assert _fallbacks(caplog) == []


def test_a_model_failing_on_its_inputs_is_not_a_reason_to_trace(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="fails on the example inputs"):
        export_model_to_nnef(nn.Linear(4, 2), (torch.randn(3, 5),), tmp_path / "m.nnef", TractNNEF.latest())
    assert _fallbacks(caplog) == [] and list(tmp_path.iterdir()) == []


class Bounded(nn.Module):
    """Guards on a dynamic axis: torch records them as the program's range of S."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.size(1) >= 4)
        torch._check(x.size(1) <= 64)
        return x.softmax(1) * 2


@pytest.mark.parametrize("front_end", ["auto", "export"])
def test_range_constraints_become_tract_assertions(front_end: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_and_check(Bounded(), (torch.randn(2, 6),), tmp_path, target=target, input_names=["x"],
                            front_end=front_end)
    text = _graph_text(path)
    assert "extension tract_assert S >= 4;" in text and "extension tract_assert S <= 64;" in text
    artefact = TractArtefact.load(path)
    for length in (4, 64):
        x = torch.randn(2, length)
        assert_outputs_match(Bounded()(x), artefact.run([x]), 1e-5, 1e-5)


def test_torchs_default_range_adds_no_assertion(tmp_path: Path) -> None:
    """A dynamic axis nothing bounds (torch's ``[0, oo]``): the artefact is as the tracer
    would write it, without assertion lines."""
    target = TractNNEF.latest().with_dynamic_axes({"x": {0: "B"}})
    path = export_and_check(nn.Linear(3, 2), (torch.randn(2, 3),), tmp_path, target=target, input_names=["x"])
    assert "tract_assert" not in _graph_text(path)
