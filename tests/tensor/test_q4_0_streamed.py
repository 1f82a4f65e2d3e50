"""Q4_0 computed block by block in Rust (issue 19): the values torch computes with and
the payloads written are byte-identical to the previous whole-tensor path (quantize the
tensor, dequantize it to f32, cast with torch), for every stored dtype and model dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from fastnnef import _native
from fastnnef.exceptions import T2NErrorImpossibleQuantization, T2NErrorInvalidArgument
from fastnnef.tensor.offload import ComposedOffloadedTensor, OffloadedTensor, open_checkpoint
from fastnnef.tensor.quant import QTensorTractScaleOnly, fp_to_tract_q4_0_with_min_max_calibration
from tests.helpers import export_and_check

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def whole_tensor_q4_0(values: torch.Tensor) -> np.ndarray:
    """The previous path's packed blocks: the whole tensor quantized at once."""
    if values.dtype == torch.bfloat16:
        return _native.q4_0_quantize(values.view(torch.int16).numpy(), bf16=True)
    return _native.q4_0_quantize(values.numpy())


def previous_round_trip(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What torch computed with before: blocks -> f32 tensor -> stored dtype -> model dtype."""
    f32 = torch.from_numpy(_native.q4_0_dequantize(whole_tensor_q4_0(values), list(values.shape)))
    return f32.to(values.dtype).to(dtype)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(torch.int32 if tensor.element_size() == 4 else torch.int16)


def weights(dtype: torch.dtype, rows: int = 96, cols: int = 160) -> torch.Tensor:
    """Values over several magnitudes, with an all-zero block and exact ties of max |x|."""
    torch.manual_seed(0)
    w = torch.randn(rows, cols) * torch.logspace(-3, 2, rows).unsqueeze(1)
    w[3, :32] = 0
    w[5, 32:64] = torch.tensor([4.0, -4.0] * 16)
    return w.to(dtype)


@pytest.mark.parametrize("stored", FLOATS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_offloaded_q4_0_values_equal_the_whole_tensor_path(tmp_path, stored, dtype):
    w = weights(stored)
    save_file({"w": w}, tmp_path / "m.safetensors")
    off = OffloadedTensor(open_checkpoint(tmp_path / "m.safetensors"), "w", dtype, q4_0=True)
    got = off.to_base_tensor()
    assert got.dtype == dtype and got.shape == w.shape
    assert torch.equal(bits(got), bits(previous_round_trip(w, dtype)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_in_memory_round_trip_equals_the_whole_tensor_path(tmp_path, dtype):
    # Composed offloaded tensors (experts) go through the in-memory round trip.
    w = weights(dtype, rows=64, cols=64)
    save_file({f"r.{i}": w[i].clone() for i in range(64)}, tmp_path / "rows.safetensors")
    ckpt = open_checkpoint(tmp_path / "rows.safetensors")
    composed = ComposedOffloadedTensor.compose([[OffloadedTensor(ckpt, f"r.{i}") for i in range(64)]], 0, None)
    got = composed.as_q4_0().to_base_tensor()
    assert got.dtype == dtype
    assert torch.equal(bits(got), bits(previous_round_trip(w, dtype)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_packed_blocks_dequantize_straight_to_the_model_dtype(dtype):
    q = fp_to_tract_q4_0_with_min_max_calibration(weights(torch.float32, rows=8, cols=64))
    f32 = torch.from_numpy(_native.q4_0_dequantize(q.blocks.numpy(), [8, 64]))
    moved = QTensorTractScaleOnly._from_blocks(q.blocks, (8, 64), dtype)
    assert torch.equal(bits(moved.decompress()), bits(f32.to(dtype)))


def test_streamed_round_trip_refuses_what_q4_0_cannot_hold(tmp_path):
    bad = weights(torch.float32, rows=8, cols=64)
    bad[2, 7] = float("inf")
    save_file({"bad": bad, "ids": torch.zeros(8, 32, dtype=torch.int64)}, tmp_path / "m.safetensors")
    ckpt = open_checkpoint(tmp_path / "m.safetensors")
    with pytest.raises(T2NErrorImpossibleQuantization, match="block 4"):
        ckpt.q4_0_round_trip("bad", "f32")
    with pytest.raises(T2NErrorInvalidArgument, match="'ids' is"):
        ckpt.q4_0_round_trip("ids", "f32")
    with pytest.raises(T2NErrorInvalidArgument, match="float dtype"):
        ckpt.q4_0_round_trip("bad", "f64")


class Head(nn.Module):
    """An embedding and an untied head, as an LLM's first and last layers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(96, 64)
        self.head = nn.Linear(64, 96, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_bf16_checkpoint_exported_as_q4_0_in_f16(tmp_path):
    """The -dt f16 -c min_max_q4_0 path: the head's payload is the whole-tensor blocks of
    its bf16 weight, tract runs it, and torch computed with its values."""
    state = {"embed.weight": weights(torch.bfloat16, 96, 64) / 100,
             "head.weight": weights(torch.bfloat16, 96, 64) / 300}
    save_file(state, tmp_path / "m.safetensors")
    ckpt = open_checkpoint(tmp_path / "m.safetensors")
    model = Head().half().eval()
    model.embed._parameters["weight"] = nn.Parameter(OffloadedTensor(ckpt, "embed.weight", torch.float16),
                                                     requires_grad=False)
    model.head._parameters["weight"] = nn.Parameter(
        OffloadedTensor(ckpt, "head.weight", torch.float16, q4_0=True), requires_grad=False
    )
    ids = torch.tensor([[1, 5, 3, 95]])
    path = export_and_check(model, ids, tmp_path, compression_level=None, atol=1e-2, rtol=1e-2)
    dat = _native.dat_decode((path / "head.weight.dat").read_bytes())
    assert dat.encoding == "q4_0"
    assert dat.payload() == whole_tensor_q4_0(state["head.weight"]).tobytes()
    used = model.head.weight.to_base_tensor()
    assert torch.equal(bits(used), bits(previous_round_trip(state["head.weight"], torch.float16)))


@pytest.mark.parametrize("q4_0", [False, True], ids=["float", "q4_0"])
def test_embedding_lookup_reads_only_its_rows(tmp_path, monkeypatch, q4_0):
    """An eager lookup in a tied embedding (bf16 checkpoint, f16 model) equals indexing the
    whole value, and never materializes the table."""
    table = weights(torch.bfloat16, 96, 64) / 100
    save_file({"embed.weight": table}, tmp_path / "m.safetensors")
    tied = OffloadedTensor(open_checkpoint(tmp_path / "m.safetensors"), "embed.weight", torch.float16, q4_0=q4_0)
    model = Head().half().eval()
    param = nn.Parameter(tied, requires_grad=False)
    model.embed._parameters["weight"] = model.head._parameters["weight"] = param
    ids = torch.tensor([[1, 5, 3, 95, 5]])
    whole = tied.to_base_tensor()
    expected = whole[ids] @ whole.T
    materialized = []
    real = OffloadedTensor._materialize
    monkeypatch.setattr(OffloadedTensor, "_materialize", lambda self: materialized.append(self) or real(self))
    with torch.no_grad():
        got = model(ids)
    # The f16 head's product runs from the map by weight blocks in f32 (no copy of the
    # table, nor of its Q4_0 values): torch's f16 product up to the f32 summation order.
    assert not materialized
    assert torch.allclose(got.float(), expected.float(), rtol=2**-10, atol=2**-14)
    assert torch.equal(bits(model.embed(ids)), bits(whole[ids]))
