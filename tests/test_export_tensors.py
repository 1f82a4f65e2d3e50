"""Tensor-only exports (torch_to_nnef-api.md §4) through the Rust codec."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from fastnnef import _native
from fastnnef.artefact import quant_line, torch_tensor_to_native
from fastnnef.exceptions import (
    T2NErrorCheckpoint,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
    T2NErrorTensorTooLarge,
)
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor_export import (
    export_tensors_from_disk_to_nnef,
    export_tensors_to_nnef,
    iter_torch_tensors_from_disk,
)

# torch >= 2.10 deprecates its quantized dtypes; exporting them is still supported here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")


def read(path) -> np.ndarray:
    return _native.dat_decode(path.read_bytes()).array()


def test_writes_every_tensor_and_returns_the_dict(tmp_path):
    tensors = {
        "layers.0.weight": torch.randn(4, 6).T,  # non-contiguous
        "enc/dec/bias": torch.arange(5, dtype=torch.int32),
        "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "half": torch.ones(3, dtype=torch.float16),
        "mask": torch.tensor([[True, False]]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    assert export_tensors_to_nnef(tensors, str(tmp_path)) is tensors
    np.testing.assert_array_equal(read(tmp_path / "layers.0.weight.dat"), tensors["layers.0.weight"].numpy())
    np.testing.assert_array_equal(read(tmp_path / "enc/dec/bias.dat"), np.arange(5))
    bf = _native.dat_decode((tmp_path / "bf.dat").read_bytes())
    assert bf.encoding == "f32"
    np.testing.assert_array_equal(bf.array(), [1.5, -2.0])
    assert read(tmp_path / "mask.dat").tolist() == [[True, False]]
    assert read(tmp_path / "scalar.dat").shape == ()
    assert not (tmp_path / "graph.quant").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_per_tensor_quantized_tensors_get_codes_and_graph_quant(tmp_path):
    qu8 = torch.quantize_per_tensor(torch.tensor([0.0, 0.5, 1.0]), 0.0123, 128, torch.quint8)
    qi8 = torch.quantize_per_tensor(torch.tensor([-1.0, 1.0]), 0.5, 0, torch.qint8)
    qi32 = torch.quantize_per_tensor(torch.tensor([3.0]), 0.25, 0, torch.qint32)
    export_tensors_to_nnef({"qu": qu8, "qi": qi8, "bias": qi32}, tmp_path)
    for name, t, code, bits in [("qu", qu8, 2, 8), ("qi", qi8, 3, 8), ("bias", qi32, 3, 32)]:
        d = _native.dat_decode((tmp_path / f"{name}.dat").read_bytes())
        assert (d.item_type, d.bits) == (code, bits)
        np.testing.assert_array_equal(d.array(), t.int_repr().numpy())
    assert (tmp_path / "graph.quant").read_text() == (
        '"qu": zero_point_linear_quantize(scale = 0.0123, zero_point = 128, bits = 8, signed = false, '
        'symmetric = false);\n'
        '"qi": zero_point_linear_quantize(scale = 0.5, zero_point = 0, bits = 8, signed = true, symmetric = true);\n'
        '"bias": zero_point_linear_quantize(scale = 0.25, zero_point = 0, bits = 32, signed = true, '
        'symmetric = true);\n'
    )


def test_per_channel_quantized_is_refused_before_writing(tmp_path):
    pc = torch.quantize_per_channel(
        torch.randn(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.qint8
    )
    with pytest.raises(T2NErrorNotImplemented, match="per channel.*dequantize"):
        export_tensors_to_nnef({"first": torch.ones(2), "w": pc}, tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(T2NErrorNotImplemented):
        quant_line("w", pc)


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/../../b", ".hidden", "a//b", ""])
def test_names_that_escape_or_hide_are_rejected(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(T2NErrorInvalidArgument, match="invalid artefact member name"):
        export_tensors_to_nnef({"ok": torch.ones(1), name: torch.ones(1)}, out)
    assert list(tmp_path.rglob("*")) == [out]


def test_limits_are_checked_before_anything_is_written(tmp_path):
    # A stride-0 view: 2**30 + 1 f32 values (over 4 GiB) backed by 4 bytes.
    huge = torch.zeros(1).expand(2**30 + 1)
    with pytest.raises(T2NErrorTensorTooLarge, match="'huge'.*Q4_0 or split"):
        export_tensors_to_nnef({"small": torch.ones(2), "huge": huge}, tmp_path)
    with pytest.raises(T2NErrorTensorTooLarge, match="'deep'.*rank 9"):
        export_tensors_to_nnef({"small": torch.ones(2), "deep": torch.ones([1] * 9)}, tmp_path)
    with pytest.raises(T2NErrorInvalidArgument, match="empty bool"):
        export_tensors_to_nnef({"small": torch.ones(2), "e": torch.zeros(0, dtype=torch.bool)}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_bad_inputs(tmp_path):
    with pytest.raises(T2NErrorNotFoundFile, match="create it first"):
        export_tensors_to_nnef({"a": torch.ones(1)}, tmp_path / "missing")
    with pytest.raises(T2NErrorInvalidArgument, match="tensor.cpu"):
        torch_tensor_to_native(torch.ones(2, device="meta"), name="w")
    with pytest.raises(T2NErrorNotImplemented, match="float8"):
        torch_tensor_to_native(torch.ones(2).to(torch.float8_e4m3fn), name="f8")


def test_complex_tensors_get_a_trailing_pair_axis(tmp_path):
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    export_tensors_to_nnef({"z": z}, tmp_path)
    np.testing.assert_array_equal(read(tmp_path / "z.dat"), [[1, 2], [3, -4]])


def test_overwrites_an_existing_dat_atomically(tmp_path):
    (tmp_path / "a.dat").write_bytes(b"stale")
    export_tensors_to_nnef({"a": torch.ones(2)}, tmp_path)
    np.testing.assert_array_equal(read(tmp_path / "a.dat"), [1, 1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.dat"]


def test_iter_from_safetensors_and_torch_files(tmp_path, caplog):
    tensors = {"w": torch.randn(3, 4), "b": torch.arange(3), "skip.me": torch.zeros(1)}
    save_file(tensors, tmp_path / "m.safetensors")
    got = dict(iter_torch_tensors_from_disk(tmp_path / "m.safetensors", filter_key=lambda k: k != "skip.me"))
    assert got.keys() == {"w", "b"}
    torch.testing.assert_close(got["w"], tensors["w"])

    torch.save({**tensors, "step": 3}, tmp_path / "m.pt")
    with caplog.at_level(logging.WARNING):
        got = dict(iter_torch_tensors_from_disk(str(tmp_path / "m.pt")))
    assert got.keys() == {"w", "b", "skip.me"}
    assert "skipping 'step'" in caplog.text

    # A pickled module needs code execution: refused unless the caller opts in, never a fallback.
    module = torch.nn.Linear(2, 3)
    torch.save(module, tmp_path / "module.bin")
    with pytest.raises(T2NErrorCheckpoint, match=r"(?s)module\.bin.*pass weights_only=False"):
        list(iter_torch_tensors_from_disk(tmp_path / "module.bin"))
    got = dict(iter_torch_tensors_from_disk(tmp_path / "module.bin", weights_only=False))
    assert got.keys() == {"weight", "bias"}

    torch.save([1, 2], tmp_path / "list.pth")
    with pytest.raises(T2NErrorNotImplemented, match="state dict or an nn.Module"):
        list(iter_torch_tensors_from_disk(tmp_path / "list.pth"))
    with pytest.raises(T2NErrorNotImplemented, match=".safetensors, .pt"):
        list(iter_torch_tensors_from_disk(tmp_path / "x.onnx"))


def test_export_from_disk(tmp_path):
    save_file({"a.w": torch.ones(2, 2), "b": torch.zeros(3)}, tmp_path / "m.safetensors")
    out = tmp_path / "out"
    out.mkdir()
    seen = {}
    found = export_tensors_from_disk_to_nnef(
        tmp_path / "m.safetensors", out, filter_key=lambda k: k.startswith("a"), fn_check_found_tensors=seen.update
    )
    assert found.keys() == seen.keys() == {"a.w"}
    assert sorted(p.name for p in out.iterdir()) == ["a.w.dat"]

    def refuse(found):
        raise ValueError("missing tensors")

    with pytest.raises(ValueError, match="missing tensors"):
        export_tensors_from_disk_to_nnef(tmp_path / "m.safetensors", tmp_path / "nowhere",
                                         fn_check_found_tensors=refuse)


def test_truncated_checkpoints_name_the_file_and_the_tensor(tmp_path):
    save_file({"a": torch.ones(64), "b": torch.ones(64)}, tmp_path / "m.safetensors")
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "m.safetensors").write_bytes(data[:-10])
    with pytest.raises(T2NErrorCheckpoint, match=r"m\.safetensors.*tensor 'b' ends at byte \d+ but the file has only"):
        list(iter_torch_tensors_from_disk(tmp_path / "m.safetensors"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(T2NErrorCheckpoint, match="tensor 'b'"):
        export_tensors_from_disk_to_nnef(tmp_path / "m.safetensors", out)
    assert list(out.iterdir()) == []
    torch.save({"a": torch.ones(1000)}, tmp_path / "m.pt")
    (tmp_path / "m.pt").write_bytes((tmp_path / "m.pt").read_bytes()[:300])
    with pytest.raises(T2NErrorCheckpoint, match=r"cannot read tensors from '.*m\.pt'"):
        list(iter_torch_tensors_from_disk(tmp_path / "m.pt"))


def test_safetensors_export_streams_from_the_file(tmp_path):
    bf = torch.randn(8, 32).to(torch.bfloat16)
    save_file({"w": bf, "i": torch.arange(4)}, tmp_path / "m.safetensors")
    out = tmp_path / "out"
    out.mkdir()
    found = export_tensors_from_disk_to_nnef(tmp_path / "m.safetensors", out)
    assert all(isinstance(t, OffloadedTensor) for t in found.values())  # nothing loaded up front
    w = _native.dat_decode((out / "w.dat").read_bytes())
    assert w.encoding == "f32"  # bf16 widened exactly, on the way
    np.testing.assert_array_equal(w.array(), bf.float().numpy())
    np.testing.assert_array_equal(read(out / "i.dat"), np.arange(4))
    torch.testing.assert_close(found["w"].float(), bf.float())  # a torch op reads it from the file
