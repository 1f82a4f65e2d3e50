"""OpaqueTensorRef and set_opaque_tensor_in_params_as_ref: quantized and offloaded
parameters behind refs compute the same values, export to the same bytes (run by tract),
and export_form hands exports the tensor behind a ref."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fastnnef import _native
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef, export_tensors_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.tensor import OpaqueTensorRef, set_opaque_tensor_in_params_as_ref
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.opaque import export_form, opaque_to_final_tensor
from fastnnef.tensor.quant import fp_to_tract_q4_0_with_min_max_calibration
from tests.helpers import export_and_check


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 32)
        self.c = nn.Linear(64, 32)
        self.c.weight = self.b.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.b(h) + self.c(h)


X = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))


def opaque_net(tmp_path) -> Net:
    """a.weight Q4_0 in memory, b/c's tied weight and a.bias offloaded."""
    model = Net().eval()
    q = fp_to_tract_q4_0_with_min_max_calibration(model.a.weight.detach())
    model.a._parameters["weight"] = nn.Parameter(q, requires_grad=False)
    tied = nn.Parameter(OffloadedTensor.from_original_tensor(model.b.weight.detach(), "b.weight", tmp_path),
                        requires_grad=False)
    model.b._parameters["weight"] = model.c._parameters["weight"] = tied
    bias = OffloadedTensor.from_original_tensor(model.a.bias.detach(), "a.bias", tmp_path)
    model.a._parameters["bias"] = nn.Parameter(bias, requires_grad=False)
    return model


def test_refs_compute_and_export_as_the_opaque_tensors(tmp_path):
    model = opaque_net(tmp_path / "offload")
    expected = model(X)
    before = export_model_to_nnef(model, X, tmp_path / "before.nnef", TractNNEF.latest(), compression_level=None)
    opaque = {n: p for n, p in model.named_parameters()}
    assert set_opaque_tensor_in_params_as_ref(model) is None
    refs = dict(model.named_parameters(remove_duplicate=False))
    assert sorted(n for n, p in refs.items() if isinstance(p, OpaqueTensorRef)) == ["a.bias", "a.weight", "b.weight",
                                                                                    "c.weight"]
    assert refs["a.weight"].opaque_tensor is opaque["a.weight"] and refs["a.weight"].nnef_name == "a.weight"
    assert model.c.weight is model.b.weight and model.b.weight.nnef_name == "b.weight"  # still tied
    assert isinstance(refs["a.weight"], nn.Parameter) and isinstance(refs["b.bias"], nn.Parameter)
    assert type(refs["b.bias"]) is nn.Parameter  # plain parameters are left alone
    torch.testing.assert_close(model(X), expected)
    after = export_and_check(model, X, tmp_path, name="after.nnef", compression_level=None, atol=1e-5, rtol=1e-5)
    assert sorted(p.name for p in after.iterdir()) == sorted(p.name for p in before.iterdir())
    for member in before.iterdir():
        assert (after / member.name).read_bytes() == member.read_bytes(), member.name
    assert _native.dat_decode((after / "a.weight.dat").read_bytes()).encoding == "q4_0"


def test_ref_ops(tmp_path):
    t = torch.randn(4, 32)
    off = OffloadedTensor.from_original_tensor(t, "w", tmp_path)
    ref = OpaqueTensorRef(torch.empty(4, 32, device="meta"), off)
    assert (ref.shape, ref.dtype) == (off.shape, off.dtype)
    torch.testing.assert_close(ref * 2, t * 2)
    assert isinstance(ref.detach(), OpaqueTensorRef)
    half = ref.to(torch.float16)  # still on disk, converted when read
    assert isinstance(half, OpaqueTensorRef) and isinstance(half.opaque_tensor, OffloadedTensor)
    torch.testing.assert_close(opaque_to_final_tensor(half), t.half())
    with pytest.raises(T2NErrorNotImplemented, match="writes into an offloaded tensor"):
        ref.mul_(2)
    assert export_form(ref) is off
    assert repr(ref).startswith("OpaqueTensorRef(OffloadedTensor(key='tensor', shape=(4, 32)")


def test_ref_arguments_are_checked():
    q = fp_to_tract_q4_0_with_min_max_calibration(torch.randn(4, 32))
    with pytest.raises(T2NErrorInvalidArgument,
                       match="^OpaqueTensorRef stands for a QTensor or an OffloadedTensor, got Tensor$"):
        OpaqueTensorRef(None, torch.zeros(2))
    with pytest.raises(T2NErrorInvalidArgument,
                       match=r"^meta_tensor is \(4, 16\) torch.float32 but the opaque tensor is \(4, 32\)"):
        OpaqueTensorRef(torch.empty(4, 16, device="meta"), q)


def test_tensor_export_writes_the_tensor_behind_a_ref(tmp_path):
    q = fp_to_tract_q4_0_with_min_max_calibration(torch.randn(8, 64))
    off = OffloadedTensor.from_original_tensor(q, "w", tmp_path / "offload")  # kept as Q4_0 blocks
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    export_tensors_to_nnef({"q": OpaqueTensorRef(None, q), "off": OpaqueTensorRef(None, off)}, tmp_path / "a")
    q.write_in_file(tmp_path / "b", "q")
    expected = (tmp_path / "b" / "q.dat").read_bytes()
    assert (tmp_path / "a" / "q.dat").read_bytes() == expected
    assert (tmp_path / "a" / "off.dat").read_bytes() == expected
