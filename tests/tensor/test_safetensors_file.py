"""``write_safetensors`` (tensor/safetensors_file.py, bytes written by rust/safetensors_write.rs):
files read back by the ``safetensors`` package and by fastnnef's own reader, byte-identical
to the package's, exported through tract, and never a partial file or a clobbered target."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorArtefactIO, T2NErrorInvalidArgument
from fastnnef.tensor.offload_load import load_offloaded_checkpoint
from fastnnef.tensor.safetensors_file import SAFETENSORS_DTYPES, write_safetensors
from fastnnef.utils import init_empty_weights
from tests.helpers import export_and_check


def sample(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    info = torch.iinfo(dtype)
    # randint's bound is an int64: the widest unsigned range is sampled below 2**63.
    return torch.randint(info.min, min(info.max, 2**62), shape, generator=gen, dtype=torch.int64).to(dtype)


def every_dtype() -> dict[str, torch.Tensor]:
    """One tensor of each dtype fastnnef writes, of assorted ranks (0-d and empty among them)."""
    shapes = [(3, 5), (), (7,), (0, 4), (2, 3, 4)]
    return {
        f"t_{name.lower()}": sample(dtype, shapes[i % len(shapes)], i)
        for i, (name, dtype) in enumerate(SAFETENSORS_DTYPES.items())
    }


def test_every_dtype_reads_back_and_matches_the_packages_bytes(tmp_path):
    tensors = every_dtype()
    tensors["transposed"] = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    write_safetensors(ours, tensors, metadata={"format": "pt"})
    save_file({k: v.contiguous() for k, v in tensors.items()}, theirs, metadata={"format": "pt"})
    assert ours.read_bytes() == theirs.read_bytes()

    back = load_file(ours)
    assert back.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name

    ckpt = _native.Checkpoint(str(ours))
    assert ckpt.metadata() == {"format": "pt"}
    for name, tensor in tensors.items():
        dtype_name, shape, _ = ckpt.info(name)
        assert SAFETENSORS_DTYPES[dtype_name] == tensor.dtype and shape == list(tensor.shape), name
        expected = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
        np.testing.assert_array_equal(ckpt.raw(name), expected, err_msg=name)
    assert sorted(os.listdir(tmp_path)) == ["ours.safetensors", "theirs.safetensors"]  # no temporary left


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_written_checkpoint_exports_through_tract(tmp_path, dtype):
    torch.manual_seed(0)
    reference = Mlp().to(dtype).float().eval()  # weights rounded to `dtype` once
    ckpt = tmp_path / "model.safetensors"
    write_safetensors(ckpt, {k: v.to(dtype) for k, v in reference.state_dict().items()})
    with init_empty_weights():
        empty = Mlp().eval()
    model = load_offloaded_checkpoint(empty, ckpt)
    x = torch.randn(2, 16)
    path = export_and_check(model, x, tmp_path, compression_level=0, input_names=["x"], output_names=["y"])
    (got,) = TractArtefact.load(path).run([x])
    np.testing.assert_allclose(got, reference(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_an_unsupported_dtype_writes_nothing_and_keeps_the_target(tmp_path):
    target = tmp_path / "w.safetensors"
    target.write_bytes(b"previous")
    with pytest.raises(T2NErrorInvalidArgument, match=r"'bad' has dtype torch.complex64"):
        write_safetensors(target, {"ok": torch.ones(2), "bad": torch.ones(2, dtype=torch.complex64)})
    assert target.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["w.safetensors"]


def test_a_byte_count_that_does_not_match_the_shape_leaves_nothing(tmp_path):
    target = tmp_path / "w.safetensors"
    target.write_bytes(b"previous")
    data = np.zeros(8, dtype=np.uint8)
    with pytest.raises(T2NErrorInvalidArgument, match=r"tensor 'a': 8 bytes given, but F32 of shape \[3\] needs 12"):
        _native.write_safetensors(str(target), [("a", "F32", [3], data)])
    with pytest.raises(T2NErrorInvalidArgument, match="'a' is given twice"):
        _native.write_safetensors(str(target), [("a", "U8", [8], data), ("a", "U8", [8], data)])
    with pytest.raises(T2NErrorInvalidArgument, match="'float32' is not a safetensors dtype name"):
        _native.write_safetensors(str(target), [("a", "float32", [2], data)])
    with pytest.raises(T2NErrorInvalidArgument, match="not contiguous"):
        _native.write_safetensors(str(target), [("a", "U8", [4], data[::2])])
    assert target.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["w.safetensors"]


def test_an_unwritable_folder_raises_artefact_io_and_leaves_nothing(tmp_path: Path):
    with pytest.raises(T2NErrorArtefactIO, match="cannot write"):
        write_safetensors(tmp_path / "missing" / "w.safetensors", {"a": torch.ones(3)})
    assert os.listdir(tmp_path) == []
