"""ModuleInfoExtractor registration, lookup, and end-to-end conversion through tract
(fastnnef.op.custom_extractors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotFoundModuleExtractor, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.op.custom_extractors import CUSTOMOP_KIND, ModuleInfoExtractor
from tests import helpers


class Block(nn.Module):
    pass


class SubBlock(Block):
    pass


class Unregistered(nn.Module):
    pass


class BlockExtractor(ModuleInfoExtractor):
    MODULE_CLASS = Block


def test_customop_kind():
    assert CUSTOMOP_KIND == "wired_custom::"
    assert BlockExtractor().op_kind == "wired_custom::Block"


def test_lookup_by_module_is_exact():
    assert type(ModuleInfoExtractor.get_by_module(Block())) is BlockExtractor
    with pytest.raises(T2NErrorNotFoundModuleExtractor) as err:
        ModuleInfoExtractor.get_by_module(SubBlock())  # subclasses are not matched
    assert "no module extractor for SubBlock; registered: [" in str(err.value)
    assert "MODULE_CLASS = SubBlock to add one" in str(err.value)
    assert isinstance(err.value, KeyError)


def test_lookup_by_kind():
    assert type(ModuleInfoExtractor.get_by_kind("wired_custom::Block")) is BlockExtractor
    with pytest.raises(T2NErrorNotFoundModuleExtractor,
                       match="no module extractor for kind 'wired_custom::Unregistered'"):
        ModuleInfoExtractor.get_by_kind("wired_custom::Unregistered")


def test_later_subclass_overrides():
    class Local(nn.Module):
        pass

    class First(ModuleInfoExtractor):
        MODULE_CLASS = Local

    class Second(ModuleInfoExtractor):
        MODULE_CLASS = Local

    assert type(ModuleInfoExtractor.get_by_module(Local())) is Second
    assert type(ModuleInfoExtractor.get_by_kind(CUSTOMOP_KIND + "Local")) is Second


def test_missing_module_class_and_default_conversion():
    class NoClass(ModuleInfoExtractor):
        pass

    with pytest.raises(T2NErrorNotImplemented) as err:
        NoClass()
    assert str(err.value) == (
        "NoClass has no MODULE_CLASS: set it to the nn.Module class this extractor handles"
    )
    with pytest.raises(T2NErrorNotImplemented) as err:
        BlockExtractor().convert_to_nnef(None, None, {}, None, None, None)
    assert str(err.value) == (
        "BlockExtractor.convert_to_nnef is not implemented: override it to emit the NNEF ops "
        "for Block"
    )


# --- end to end: extractors take over their module's calls, checked in tract -------------


class Gate(nn.Module):
    """A module whose forward cannot be traced into a static graph (data-dependent
    indexing): only its extractor can export it. Its meaning: x * sigmoid(x @ w.T + b), y + 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = torch.nonzero(torch.ones_like(x[0, :, 0])).flatten()  # data-dependent size
        gated = x[:, keep] * torch.sigmoid(self.proj(x[:, keep]))
        return gated, y + 1


class GateExtractor(ModuleInfoExtractor):
    MODULE_CLASS = Gate

    def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph, inference_target, **kwargs):
        x, y = g.tensor_inputs()
        proj = node.module.proj
        weight, bias = g.parameter(proj.weight), g.parameter(proj.bias)
        scores = g.tmp("matmul", [x, g.to_rank(weight, x.rank)], {"transposeA": False, "transposeB": True},
                       suffix="scores")
        gate = g.tmp("sigmoid", [g.tmp("add", [scores, g.to_rank(bias, x.rank)], suffix="biased")], suffix="gate")
        g.emit("mul", [x, gate], out=0)
        g.emit("add", [y, 1.0], out=1)
        return []


class WithGates(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.first = Gate(dim)
        self.second = Gate(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, extra = self.first(self.inp(x), x)
        h, extra = self.second(h, extra)
        return h + extra


def test_extractor_takes_over_its_module(tmp_path: Path):
    model = WithGates().eval()
    x = torch.randn(2, 5, 8)
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_model_to_nnef(model, x, tmp_path / "gates.nnef", target, input_names=["x"],
                                output_names=["y"], compression_level=None, front_end=helpers.FRONT_END)
    text = (path / "graph.nnef").read_text()
    # The modules' weights are declared under their parameter names; their internals
    # (the data-dependent gather) were never traced.
    for label in ("first.proj.weight", "second.proj.bias"):
        assert f"label = '{label}'" in text
    assert "gather" not in text
    assert "forward" not in model.first.__dict__  # the redirection is gone
    artefact = TractArtefact.load(path)
    for length in (5, 9):
        xs = torch.randn(2, length, 8)
        (got,) = artefact.run([xs])
        torch.testing.assert_close(torch.from_numpy(got), model(xs).detach(), atol=1e-5, rtol=1e-5)


class SoftGate(nn.Module):
    """Gate without its data-dependent gather: x * sigmoid(x @ w.T + b), y + 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * torch.sigmoid(self.proj(x)), y + 1


class SoftGateExtractor(GateExtractor):
    MODULE_CLASS = SoftGate


class WithSoftGate(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.gate = SoftGate(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, extra = self.gate(self.inp(x), x)
        return (h + extra).flatten(1)  # the call's output sizes (S) read after it


def test_extractor_takes_over_its_module_under_torch_export(tmp_path: Path):
    """torch.export records the module's call as one op (its fake kernel gives the outputs'
    symbolic sizes), which the extractor converts; the user's model is left as it was."""
    model = WithSoftGate().eval()
    assert type(ModuleInfoExtractor.get_by_module(model.gate)) is SoftGateExtractor
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = helpers.export_and_check(model, torch.randn(2, 5, 8), tmp_path, target=target, input_names=["x"],
                                    compression_level=None, front_end="export",
                                    run_inputs=[torch.randn(2, 9, 8)])
    text = (path / "graph.nnef").read_text()
    assert "label = 'gate.proj.weight'" in text and "label = 'inp.weight'" in text
    assert "gate_SoftGate_gate = sigmoid(" in text  # the extractor's ops, named after the call
    assert "reshape(add, shape = [8*S]" in text  # the call's output sizes, torch's
    assert "forward" not in model.gate.__dict__
    assert not model.gate._forward_hooks and not model.gate._forward_pre_hooks


def test_extractor_errors_name_the_fix(tmp_path: Path):
    class Twice(nn.Module):
        def forward(self, x):
            return x * 2, x * 3

    class Partial(ModuleInfoExtractor):
        MODULE_CLASS = Twice

        def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph, inference_target, **kwargs):
            (x,) = g.tensor_inputs()
            g.emit("mul", [x, 2.0], out=0)
            return []

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.twice = Twice()

        def forward(self, x):
            a, b = self.twice(x)
            return a + b

    with pytest.raises(T2NErrorNotImplemented, match=re.escape(
        "Partial emitted no op for output 1 of Twice: emit it with g.emit(kind, args, attrs, out=1)"
    )):
        export_model_to_nnef(Outer(), torch.rand(3), tmp_path / "p.nnef", TractNNEF.latest(),
                             front_end=helpers.FRONT_END)
    assert not list(tmp_path.iterdir())

    class Undeclared(ModuleInfoExtractor):
        MODULE_CLASS = Twice

        def convert_to_nnef(self, g, node, name_to_tensor, null_ref, torch_graph, inference_target, **kwargs):
            (x,) = g.tensor_inputs()
            g.emit("mul", [x, 2.0], out=0)
            g.emit("mul", [x, 3.0], out=1)
            return ["my_fragment"]

    with pytest.raises(T2NErrorNotImplemented, match=re.escape(
        "Undeclared uses fragments ['my_fragment'] it did not declare: declare each with g.fragment(name, text)"
    )):
        export_model_to_nnef(Outer(), torch.rand(3), tmp_path / "u.nnef", TractNNEF.latest(),
                             front_end=helpers.FRONT_END)


def test_compatibility_names_are_not_registered():
    from fastnnef.op.custom_extractors import LSTMExtractor, find_extractor

    assert LSTMExtractor.MODULE_CLASS is nn.LSTM
    assert find_extractor(nn.LSTM(2, 2)) is None  # nn.LSTM exports through aten::lstm
