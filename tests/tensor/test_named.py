"""NamedTensor and apply_name_to_tensor_in_module: a user-given nnef_name becomes the
weight's .dat label (exported and run by tract), naming a model shares storage and keeps
ties and parameters, and export itself never names anything."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.tensor import NamedTensor, apply_name_to_tensor_in_module
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.quant import fp_to_tract_q4_0_with_min_max_calibration
from tests.helpers import TRACER_ALLOWED, export_and_check


class Net(nn.Module):
    """Parameters, a tied pair, a buffer and a tensor kept as a plain attribute."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 32)
        self.up = nn.Linear(32, 64)
        self.head = nn.Linear(32, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 64))
        self.offset = torch.full((32,), 0.25)  # not registered

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        u = torch.relu(self.up(h) * self.scale)
        return self.head(h + u[..., :32] + self.offset)


IDS = torch.tensor([[1, 4, 9, 2]])


def test_named_parameter_is_exported_under_its_nnef_name(tmp_path):
    model = Net().eval()
    named = NamedTensor(model.up.weight.detach(), nnef_name="shared/up_proj.w")
    model.up._parameters["weight"] = nn.Parameter(named, requires_grad=False)
    assert isinstance(model.up.weight, NamedTensor) and isinstance(model.up.weight, nn.Parameter)
    path = export_and_check(model, IDS, tmp_path, compression_level=None)
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*.dat"))
    # c0: the plain tensor attribute, a constant of the trace.
    assert files == ["c0.dat", "embed.weight.dat", "scale.dat", "shared/up_proj.w.dat", "up.bias.dat"]
    assert ("shared_up_proj_w = variable<scalar>(label = 'shared/up_proj.w', shape = [64, 32]);"
            in (path / "graph.nnef").read_text())


@TRACER_ALLOWED  # torch.export cannot capture NamedTensor weights ("Unable to cast NotImplemented"): "auto" traces
def test_apply_name_names_every_tensor_in_place_sharing_storage(tmp_path):
    model = Net().eval()
    expected = model(IDS)
    storage = {n: t.data_ptr() for n, t in [*model.named_parameters(), *model.named_buffers()]}
    assert apply_name_to_tensor_in_module(model) is None
    names = {n: (type(t), t.nnef_name) for n, t in [*model.named_parameters(), *model.named_buffers()]}
    assert names == {
        "embed.weight": (NamedTensor, "embed.weight"),
        "up.weight": (NamedTensor, "up.weight"),
        "up.bias": (NamedTensor, "up.bias"),
        "scale": (NamedTensor, "scale"),
    }
    assert model.head.weight is model.embed.weight  # one NamedTensor for the tied pair
    assert isinstance(model.offset, NamedTensor) and model.offset.nnef_name == "offset"
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in model.parameters())
    assert {n: t.data_ptr() for n, t in [*model.named_parameters(), *model.named_buffers()]} == storage
    out = model(IDS)
    assert type(out) is torch.Tensor  # ops give plain tensors: the name is the weight's only
    torch.testing.assert_close(out, expected)
    # Named by their paths, the weights keep the labels an unnamed export gives them; the
    # plain attribute, a nameless constant (c0) before, now has its path too.
    named_path = export_and_check(model, IDS, tmp_path, name="named.nnef", compression_level=None)
    plain_path = export_model_to_nnef(Net().eval(), IDS, tmp_path / "plain.nnef", TractNNEF.latest(),
                                      compression_level=None)
    renamed = {"c0.dat": "offset.dat"}
    assert sorted(renamed.get(p.name, p.name) for p in plain_path.glob("*.dat")) == sorted(
        p.name for p in named_path.glob("*.dat")
    )
    for dat in plain_path.glob("*.dat"):
        assert (named_path / renamed.get(dat.name, dat.name)).read_bytes() == dat.read_bytes()


def test_apply_name_leaves_quantized_and_offloaded_weights(tmp_path):
    model = Net().eval()
    q = fp_to_tract_q4_0_with_min_max_calibration(model.up.weight.detach())
    model.up._parameters["weight"] = nn.Parameter(q, requires_grad=False)
    off = OffloadedTensor.from_original_tensor(model.up.bias.detach(), "up.bias", tmp_path)
    model.up._parameters["bias"] = nn.Parameter(off, requires_grad=False)
    apply_name_to_tensor_in_module(model)
    assert type(model.up.weight).__name__ == "QTensorTractScaleOnly"
    assert isinstance(model.up.bias, OffloadedTensor)
    assert isinstance(model.embed.weight, NamedTensor)


def test_two_tensors_under_one_name_are_refused_before_anything_is_written(tmp_path):
    model = Net().eval()
    model.up._parameters["bias"] = nn.Parameter(NamedTensor(model.up.bias.detach(), "scale"))
    with pytest.raises(T2NErrorInvalidArgument) as err:
        export_model_to_nnef(model, IDS, tmp_path / "m.nnef", TractNNEF.latest())
    assert str(err.value) == (
        "'up.bias' and 'scale' would both be exported as scale.dat; give each NamedTensor a distinct nnef_name"
    )
    assert list(tmp_path.iterdir()) == []


@TRACER_ALLOWED  # torch.export cannot capture NamedTensor weights ("Unable to cast NotImplemented"): "auto" traces
def test_a_named_attribute_cannot_take_a_weight_label(tmp_path):
    model = Net().eval()
    model.offset = NamedTensor(model.offset, "scale")
    with pytest.raises(T2NErrorInvalidArgument) as err:
        export_model_to_nnef(model, IDS, tmp_path / "m.nnef", TractNNEF.latest())
    assert str(err.value) == (
        "'offset' and a weight would both be exported as scale.dat; give each NamedTensor a distinct nnef_name"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad, message", [
    ("", "nnef_name must be a non-empty string, got ''"),
    (3, "nnef_name must be a non-empty string, got 3"),
    ("../w", "nnef_name '../w' cannot name a .dat file: invalid artefact member name '../w.dat'"),
])
def test_names_that_cannot_be_a_dat_file_are_refused(bad, message):
    with pytest.raises(T2NErrorInvalidArgument, match=f"^{message}".replace(".", r"\.").replace("(", r"\(")):
        NamedTensor(torch.zeros(2), bad)


def test_named_tensor_wraps_plain_tensors_only(tmp_path):
    off = OffloadedTensor.from_original_tensor(torch.zeros(2, 32), "w", tmp_path)
    with pytest.raises(T2NErrorInvalidArgument, match="^NamedTensor wraps a plain tensor, got OffloadedTensor"):
        NamedTensor(off, "w")


def test_name_survives_copies_pickles_and_dtype_changes():
    model = Net()
    apply_name_to_tensor_in_module(model)
    clone = copy.deepcopy(model)
    assert clone.up.weight.nnef_name == "up.weight" and isinstance(clone.up.weight, nn.Parameter)
    assert clone.up.weight.data_ptr() != model.up.weight.data_ptr()
    assert clone.head.weight is clone.embed.weight
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)  # our own bytes, written just above
    assert isinstance(state["up.weight"], NamedTensor) and state["up.weight"].nnef_name == "up.weight"
    model.half()
    assert isinstance(model.up.weight, NamedTensor) and model.up.weight.dtype == torch.float16
    assert "nnef_name='up.weight'" in repr(model.up.weight)


def test_export_never_names_the_model(tmp_path):
    model = Net().eval()
    export_model_to_nnef(model, IDS, tmp_path / "m.nnef", TractNNEF.latest())
    assert not any(isinstance(t, NamedTensor) for t in [*model.parameters(), *model.buffers(), model.offset])


def test_tied_named_tensor_is_written_once(tmp_path):
    model = Net().eval()
    model.embed._parameters["weight"] = nn.Parameter(NamedTensor(model.embed.weight.detach(), "vocab"))
    model.head._parameters["weight"] = model.embed.weight
    path = export_and_check(model, IDS, tmp_path, compression_level=None)
    assert sorted(p.name for p in path.glob("*.dat")) == ["c0.dat", "scale.dat", "up.bias.dat", "up.weight.dat",
                                                          "vocab.dat"]


def test_a_user_label_equal_to_a_generated_one_gets_its_own_file(tmp_path):
    """A weight the user names like a constant made in forward keeps its own .dat file."""
    import torch
    from torch import nn

    from fastnnef.tensor import NamedTensor
    from tests.helpers import export_and_check

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(NamedTensor(torch.randn(3), nnef_name="c0"), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w + torch.tensor([1.0, 2.0, 3.0])

    path = export_and_check(Model(), (torch.randn(2, 3),), tmp_path, compression_level=None)
    labels = sorted(p.name for p in path.glob("*.dat"))
    assert "c0.dat" in labels and len(labels) == 2, labels
