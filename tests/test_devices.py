"""Models that live on an accelerator export as they are: the export runs on a CPU
stand-in (torch_graph/devices.py), checks it in tract, and leaves the user's model on its
device, untouched. The CUDA tests run where a CUDA device is; the stand-in's copying runs
everywhere (on CPU models it shares their tensors instead of copying them)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_with_result
from fastnnef.inference_target import TractNNEF
from fastnnef.torch_graph.devices import _module_stand_in, on_cpu

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (benches/check_gpu_export.py runs these on one)"
)


class ConvBnMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 8)
        self.head.weight = self.mlp[2].weight  # tied: one tensor, one copy
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.head(self.mlp(y)) + self.offset


def models() -> list[tuple[str, nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    conv = ConvBnMlp()
    conv.bn.running_mean.uniform_(-0.5, 0.5)
    conv.bn.running_var.uniform_(0.5, 2.0)
    encoder = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    return [("conv_bn_mlp", conv.eval(), torch.randn(2, 3, 8, 8)),
            ("transformer_encoder_layer", encoder.eval(), torch.randn(2, 5, 16))]


def _snapshot(model: nn.Module) -> dict[str, tuple[torch.device, int, torch.Tensor]]:
    return {n: (t.device, t.data_ptr(), t.detach().clone()) for n, t in model.state_dict(keep_vars=True).items()}


def _assert_untouched(model: nn.Module, before: dict[str, tuple[torch.device, int, torch.Tensor]]) -> None:
    for name, tensor in model.state_dict(keep_vars=True).items():
        device, ptr, values = before[name]
        assert (tensor.device, tensor.data_ptr()) == (device, ptr), f"{name} moved"
        torch.testing.assert_close(tensor.detach(), values, rtol=0, atol=0)


def test_cpu_models_are_exported_as_they_are() -> None:
    _, model, x = models()[0]
    assert on_cpu(model, (x,)) == (model, (x,))


@pytest.mark.parametrize("case", range(2), ids=["conv_bn_mlp", "transformer_encoder_layer"])
@needs_cuda
def test_model_on_cuda(tmp_path: Path, case: int) -> None:
    name, model, x = models()[case]
    model, x = model.to("cuda:0"), x.to("cuda:0")
    before = _snapshot(model)
    result = export_model_with_result(model, (x,), tmp_path / f"{name}.nnef.tgz", TractNNEF.latest())
    assert "check_io" in result.checks
    _assert_untouched(model, before)
    assert x.device == torch.device("cuda:0")
    with torch.no_grad():
        expected = model(x).cpu().numpy()
    (got,) = TractArtefact.load(result.path).run([x.cpu()])
    # cuDNN convolutions may run in TF32: the GPU's output is only that close to tract's
    np.testing.assert_allclose(got, expected, atol=5e-3, rtol=5e-3)


def test_stand_in_copies_nothing_already_on_cpu() -> None:
    """The stand-in's deep copy, as it runs for a model on an accelerator: modules are
    copies, tensors on CPU are the model's own (an accelerator's would be CPU copies),
    tied weights stay tied."""
    _, model, _x = models()[0]
    model.cache = {"past": [torch.zeros(3)]}  # a tensor held in containers is a tensor of the model too
    stand_in = _module_stand_in(model)
    assert stand_in is not model and stand_in.mlp is not model.mlp
    assert stand_in.conv.weight is model.conv.weight and stand_in.bn.running_var is model.bn.running_var
    assert stand_in.cache is not model.cache and stand_in.cache["past"][0] is model.cache["past"][0]
    assert stand_in.head.weight is stand_in.mlp[2].weight


@needs_cuda
def test_script_module_on_cuda(tmp_path: Path) -> None:
    _, model, x = models()[0]
    scripted = torch.jit.script(copy.deepcopy(model)).to("cuda:0")
    before = _snapshot(scripted)
    path = export_model_with_result(scripted, (x.to("cuda:0"),), tmp_path / "s.nnef.tgz", TractNNEF.latest()).path
    _assert_untouched(scripted, before)
    with torch.no_grad():
        expected = model(x).numpy()
    (got,) = TractArtefact.load(path).run([x])
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
