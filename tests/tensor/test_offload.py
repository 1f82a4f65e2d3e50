"""Weights that stay on disk: OffloadedTensor, load_offloaded_checkpoint and the
reference's offload API, each exported and run by tract, and an export under a memory
limit smaller than the weights."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.compress import offloaded_tensor_qtensor, quantize_weights_min_max_Q4_0
from fastnnef.exceptions import T2NErrorCheckpoint, T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.tensor.offload import (
    ComposedOffloadedTensor,
    OffloadedTensor,
    ctx_maybe_load_from_disk_as_offloaded,
    open_checkpoint,
    t2n_load_checkpoint_and_dispatch,
    trace_on_stand_ins,
)
from fastnnef.tensor.offload_load import load_offloaded_checkpoint
from fastnnef.tensor.quant import (
    QTensor,
    QTensorTractScaleOnly,
    fp_to_tract_q4_0_with_min_max_calibration,
    qscale_per_group_f16_min_max_calibration,
)
from fastnnef.tensor.residency import TensorResidencyPool
from fastnnef.utils import init_empty_weights
from tests.helpers import TRACER_ALLOWED, export_and_check

ROOT = Path(__file__).resolve().parents[2]


class TinyLM(nn.Module):
    """Embedding, two linears, an lm head tied to the embedding (llama-like)."""

    def __init__(self, vocab: int = 40, dim: int = 64, hidden: int = 128):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.head(h + self.down(torch.relu(self.up(h))))


IDS = torch.tensor([[1, 5, 7, 3]])


def state_of(model: nn.Module, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    # The tied head is saved once, under the embedding's name, as transformers does.
    return {k: v.to(dtype).contiguous() for k, v in model.state_dict().items() if k != "head.weight"}


def reference_model(state: dict[str, torch.Tensor]) -> TinyLM:
    model = TinyLM().eval()
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model


def empty_model() -> TinyLM:
    with init_empty_weights():
        return TinyLM().eval()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("level", [None, 0, 1])
def test_bf16_checkpoint_exports_without_loading_weights(tmp_path, level):
    torch.manual_seed(0)
    state = state_of(TinyLM(), torch.bfloat16)
    ckpt = tmp_path / "model.safetensors"
    save_file(state, ckpt)
    before = sha(ckpt)
    model = load_offloaded_checkpoint(empty_model(), ckpt)
    assert all(isinstance(p, OffloadedTensor) for p in model.parameters())
    assert model.head.weight is model.embed.weight  # tied weights stay tied (one .dat)
    path = export_and_check(model, IDS, tmp_path, compression_level=level, input_names=["ids"], output_names=["y"])
    (got,) = TractArtefact.load(path).run([IDS])
    # bf16 -> f32 is exact: tract equals the in-memory model built from the same weights.
    np.testing.assert_allclose(got, reference_model(state)(IDS).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert sha(ckpt) == before  # the checkpoint is only read
    if level is None:
        assert sorted(p.name for p in path.iterdir()) == [
            "down.weight.dat", "embed.weight.dat", "graph.nnef", "up.bias.dat", "up.weight.dat"
        ]
        assert _native.dat_decode((path / "up.weight.dat").read_bytes()).encoding == "f32"


def test_sharded_checkpoint_with_q4_0_computed_on_the_way(tmp_path):
    torch.manual_seed(1)
    state = state_of(TinyLM())
    save_file({k: v for k, v in state.items() if k.startswith("embed")}, tmp_path / "s-1.safetensors")
    save_file({k: v for k, v in state.items() if not k.startswith("embed")}, tmp_path / "s-2.safetensors")
    weight_map = {k: "s-1.safetensors" if k.startswith("embed") else "s-2.safetensors" for k in state}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model = load_offloaded_checkpoint(empty_model(), tmp_path, q4_0_module_classes=(nn.Linear,))
    path = export_and_check(model, IDS, tmp_path, compression_level=None, atol=1e-3, rtol=1e-3)
    # Linear weights quantized by Rust on the way; torch ran with the same Q4_0 values.
    for name in ("up.weight", "down.weight"):
        dat = _native.dat_decode((path / f"{name}.dat").read_bytes())
        assert dat.encoding == "q4_0"
        expected = _native.q4_0_dequantize(_native.q4_0_quantize(state[name].numpy()), list(state[name].shape))
        np.testing.assert_array_equal(dat.array(), expected)
    # The tied embedding/head is not only a Linear weight: it stays float.
    assert _native.dat_decode((path / "embed.weight.dat").read_bytes()).encoding == "f32"


class _RowsNotWholeBlocks(nn.Module):
    """A Linear whose rows are whole Q4_0 blocks (32 inputs) and one whose rows are not (48)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 48), nn.Linear(48, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_q4_0_impossible_shape_stays_float_and_says_so(tmp_path, caplog):
    """A weight tract cannot hold as Q4_0 is written in float with a warning naming it (the
    narrow error only: any other failure propagates)."""
    torch.manual_seed(2)
    state = state_of(_RowsNotWholeBlocks())
    save_file(state, tmp_path / "m.safetensors")
    with init_empty_weights():
        model = _RowsNotWholeBlocks()
    with caplog.at_level("WARNING", logger="fastnnef"):
        load_offloaded_checkpoint(model, tmp_path / "m.safetensors", q4_0_module_classes=(nn.Linear,))
    assert "not quantizing b.weight to Q4_0, written in float" in caplog.text
    assert "a.weight" not in caplog.text
    path = export_and_check(model, torch.randn(3, 32), tmp_path, compression_level=None, atol=1e-3, rtol=1e-3)
    encodings = {name: _native.dat_decode((path / f"{name}.dat").read_bytes()).encoding
                 for name in ("a.weight", "b.weight")}
    assert encodings == {"a.weight": "q4_0", "b.weight": "f32"}


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16, torch.float32])
def test_f16_linear_of_an_offloaded_weight_reads_it_by_blocks(tmp_path, monkeypatch, stored):
    """An eager f16 ``F.linear`` with an offloaded weight (of any stored float dtype) never
    materializes it, and equals torch's f16 product of the f16 weight up to the f32
    summation order (within one f16 rounding)."""
    torch.manual_seed(3)
    weight, bias = (torch.randn(1000, 300) / 20).to(stored), torch.randn(1000).half()
    save_file({"w": weight}, tmp_path / "m.safetensors")
    off = OffloadedTensor(open_checkpoint(tmp_path / "m.safetensors"), "w", torch.float16)
    x = torch.randn(2, 7, 300).half()
    materialized = []
    real = OffloadedTensor._materialize
    monkeypatch.setattr(OffloadedTensor, "_materialize", lambda self: materialized.append(self) or real(self))
    for b in (None, bias):
        got = torch.nn.functional.linear(x, off, b)
        expected = torch.nn.functional.linear(x, weight.half(), b)
        assert got.dtype == torch.float16 and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=2**-10, atol=2**-14)
    assert not materialized


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16, torch.float32])
def test_half_linear_of_a_q4_0_weight_reads_it_by_blocks(tmp_path, monkeypatch, stored, dtype):
    """An eager half ``F.linear`` with a weight written as Q4_0 never materializes it (no
    Q4_0 copy of a whole head), and equals torch's product with the whole tensor's Q4_0
    values up to the f32 summation order (within one rounding of ``dtype``). Blocks of
    rows of several sizes, so that a block ends inside the tensor and at its end."""
    torch.manual_seed(4)
    weight, bias = (torch.randn(1000, 320) / 20).to(stored), torch.randn(1000).to(dtype)
    save_file({"w": weight}, tmp_path / "m.safetensors")
    off = OffloadedTensor(open_checkpoint(tmp_path / "m.safetensors"), "w", dtype).as_q4_0()
    whole = off.to_base_tensor()  # the whole tensor's Q4_0 values, in dtype
    x = torch.randn(2, 7, 320).to(dtype)
    materialized = []
    real = OffloadedTensor._materialize
    monkeypatch.setattr(OffloadedTensor, "_materialize", lambda self: materialized.append(self) or real(self))
    for elements in (320 * 7, 1 << 18):
        monkeypatch.setattr("fastnnef.tensor.offload._LINEAR_BLOCK_ELEMENTS", elements)
        for b in (None, bias):
            got = torch.nn.functional.linear(x, off, b)
            expected = torch.nn.functional.linear(x.float(), whole.float(), None if b is None else b.float())
            assert got.dtype == dtype and got.shape == expected.shape
            eps = torch.finfo(dtype).eps
            torch.testing.assert_close(got.float(), expected, rtol=eps, atol=eps / 16)
    assert not materialized


@TRACER_ALLOWED  # under "jit"
@pytest.mark.parametrize("front_end", ["jit", "export"])
def test_a_trace_on_stand_ins_reads_no_weight_and_writes_the_same_artefact(tmp_path, monkeypatch, front_end):
    """Under trace_on_stand_ins the trace reads no linear weight (the writer streams them),
    and the artefact is byte for byte the one of a trace on the real values. Under
    torch.export the capture reads no weight at all (fake tensors), and without check_io
    there is no eager run either: no weight is read with or without stand-ins."""
    torch.manual_seed(4)
    state = state_of(TinyLM(), torch.bfloat16)
    save_file(state, tmp_path / "model.safetensors")
    real = OffloadedTensor._materialize
    materialized: list[str] = []
    monkeypatch.setattr(OffloadedTensor, "_materialize", lambda self: materialized.append(self.key) or real(self))
    paths = []
    for stand_ins in (False, True):
        model = load_offloaded_checkpoint(empty_model(), tmp_path / "model.safetensors")
        materialized.clear()
        with trace_on_stand_ins() if stand_ins else contextlib.nullcontext():
            export_model_to_nnef(model, IDS, tmp_path / f"stand_ins_{stand_ins}.nnef.tgz",
                                 TractNNEF(TractNNEF.latest_version(), check_io=False),
                                 input_names=["ids"], output_names=["y"], front_end=front_end)
        # (torch's tracer itself views the tied embedding, a second module's parameter)
        read_by_the_trace = front_end == "jit" and not stand_ins
        assert bool({"up.weight", "down.weight"} & set(materialized)) == read_by_the_trace, materialized
        if front_end == "export":
            assert not materialized
        paths.append(tmp_path / f"stand_ins_{stand_ins}.nnef.tgz")
    assert sha(paths[0]) == sha(paths[1])
    (got,) = TractArtefact.load(paths[1]).run([IDS])
    np.testing.assert_allclose(got, reference_model(state)(IDS).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_f32_checkpoint_into_an_f16_model_converts_on_the_way(tmp_path):
    torch.manual_seed(2)
    state = state_of(TinyLM())
    save_file(state, tmp_path / "m.safetensors")
    with init_empty_weights():
        model = TinyLM().half().eval()
    load_offloaded_checkpoint(model, tmp_path / "m.safetensors")
    assert model.up.weight.dtype == torch.float16 and model.up.weight.stored_dtype == torch.float32
    out = export_model_to_nnef(model, IDS, tmp_path / "h.nnef", TractNNEF.latest(), compression_level=None)
    dat = _native.dat_decode((out / "up.weight.dat").read_bytes())
    assert dat.encoding == "f16"
    np.testing.assert_array_equal(dat.array(), state["up.weight"].half().numpy())


def test_f32_checkpoint_into_a_bf16_model_is_written_as_torch_rounds_it(tmp_path):
    """tract has no bf16: the weights go out as f32, but with the values the bf16 model
    computes with (rounded to bf16), not the checkpoint's wider ones."""
    torch.manual_seed(3)
    state = state_of(TinyLM())
    save_file(state, tmp_path / "m.safetensors")
    with init_empty_weights():
        model = TinyLM().to(torch.bfloat16).eval()
    load_offloaded_checkpoint(model, tmp_path / "m.safetensors")
    assert model.up.weight.dtype == torch.bfloat16 and model.up.weight.stored_dtype == torch.float32
    # check_io off: torch computes in bf16, tract in f32; compared below with f32 arithmetic.
    target = TractNNEF(TractNNEF.latest().version, check_io=False)
    out = export_model_to_nnef(model, IDS, tmp_path / "b.nnef", target, compression_level=None)
    (got,) = TractArtefact.load(out).run([IDS])
    f32_of_rounded = reference_model({k: v.to(torch.bfloat16) for k, v in state.items()})
    np.testing.assert_allclose(got, f32_of_rounded(IDS).detach().numpy(), rtol=1e-5, atol=1e-5)
    for name in ("up.weight", "up.bias", "down.weight"):
        dat = _native.dat_decode((out / f"{name}.dat").read_bytes())
        assert dat.encoding == "f32"
        rounded = state[name].to(torch.bfloat16).float().numpy()
        assert not np.array_equal(rounded, state[name].numpy())  # the rounding is visible
        np.testing.assert_array_equal(dat.array(), rounded)


def test_mismatch_is_refused_before_anything_changes(tmp_path):
    state = state_of(TinyLM())
    bad = dict(state)
    del bad["up.bias"]
    bad["down.weight"] = torch.zeros(3, 3)
    bad["extra.w"] = torch.zeros(2)
    save_file(bad, tmp_path / "m.safetensors")
    model = empty_model()
    with pytest.raises(T2NErrorCheckpoint) as err:
        load_offloaded_checkpoint(model, tmp_path / "m.safetensors")
    msg = str(err.value)
    assert "missing: 'up.bias'" in msg
    assert "shape: 'down.weight' is (3, 3)" in msg and "the model has (64, 128)" in msg
    assert "unexpected: 1 checkpoint tensors the model does not use ('extra.w')" in msg
    assert all(p.is_meta for p in model.parameters())  # nothing was touched

    save_file({**state, "up.bias": torch.zeros(128, dtype=torch.int32)}, tmp_path / "i.safetensors")
    with pytest.raises(T2NErrorCheckpoint,
                       match=r"'up.bias' in .*i\.safetensors is I32 but the model expects torch.float32"):
        load_offloaded_checkpoint(empty_model(), tmp_path / "i.safetensors")


class Experts(nn.Module):
    """Experts held as stacked parameters, as transformers 5 holds mixtral's: ``gate_up``
    [experts, 2 * hidden, dim] and ``down`` [experts, dim, hidden], each expert summed."""

    def __init__(self, experts: int = 3, dim: int = 32, hidden: int = 64):
        super().__init__()
        self.gate_up = nn.Parameter(torch.empty(experts, 2 * hidden, dim))
        self.down = nn.Parameter(torch.empty(experts, dim, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for e in range(self.gate_up.shape[0]):
            gate, up = (x @ self.gate_up[e].t()).chunk(2, dim=-1)
            out = out + (torch.relu(gate) * up) @ self.down[e].t()
        return out


def _expert_checkpoint(tmp_path: Path, experts: int = 3) -> tuple[Any, dict[str, torch.Tensor]]:
    """One tensor per expert and projection (the checkpoint layout), and the stacked
    parameters transformers would build from them."""
    torch.manual_seed(4)
    state = {}
    for e in range(experts):
        state[f"e.{e}.w1"], state[f"e.{e}.w3"] = torch.randn(64, 32), torch.randn(64, 32)
        state[f"e.{e}.w2"] = torch.randn(32, 64) / 8
    save_file(state, tmp_path / "experts.safetensors")
    stacked = {
        "gate_up": torch.cat([torch.stack([state[f"e.{e}.w{i}"] for e in range(experts)]) for i in (1, 3)], 1),
        "down": torch.stack([state[f"e.{e}.w2"] for e in range(experts)]),
    }
    return open_checkpoint(tmp_path / "experts.safetensors"), stacked


def _composed_experts(ckpt: Any, dtype: torch.dtype = torch.float32, experts: int = 3) -> dict[str,
                                                                                               ComposedOffloadedTensor]:
    def pieces(i: int) -> list[OffloadedTensor]:
        return [OffloadedTensor(ckpt, f"e.{e}.w{i}", dtype) for e in range(experts)]

    return {
        "gate_up": ComposedOffloadedTensor.compose([pieces(1), pieces(3)], stack_dim=0, cat_dim=1),
        "down": ComposedOffloadedTensor.compose([pieces(2)], stack_dim=0, cat_dim=None),
    }


def test_composed_checkpoint_tensors_are_stacked_when_read(tmp_path):
    ckpt, stacked = _expert_checkpoint(tmp_path)
    with init_empty_weights():
        model = Experts().eval()
    load_offloaded_checkpoint(model, ckpt, composed=_composed_experts(ckpt))
    assert isinstance(model.gate_up, ComposedOffloadedTensor) and model.gate_up.shape == (3, 128, 32)
    for name, value in stacked.items():
        torch.testing.assert_close(model.get_parameter(name).to_base_tensor(), value, rtol=0, atol=0)
    x = torch.randn(5, 32)
    path = export_and_check(model, x, tmp_path, compression_level=None)
    for name, value in stacked.items():  # written as the stacked values
        np.testing.assert_array_equal(_native.dat_decode((path / f"{name}.dat").read_bytes()).array(), value.numpy())
    reference = Experts().eval()
    reference.load_state_dict(stacked)
    (got,) = TractArtefact.load(path).run([x])
    np.testing.assert_allclose(got, reference(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_composed_tensors_convert_and_quantize_as_one_tensor(tmp_path):
    ckpt, stacked = _expert_checkpoint(tmp_path)
    composed = _composed_experts(ckpt, torch.float16)
    assert composed["gate_up"].dtype == torch.float16
    torch.testing.assert_close(composed["gate_up"].to_base_tensor(), stacked["gate_up"].half(), rtol=0, atol=0)
    # Q4_0 of a composed tensor: torch computes with, and the export writes, the blocks
    # of the composed value (a 2-D one here: rank-3 Q4_0 weights do not load in tract).
    rows = {f"r.{i}": torch.randn(32) for i in range(128)}
    save_file(rows, tmp_path / "rows.safetensors")
    rows_ckpt = open_checkpoint(tmp_path / "rows.safetensors")
    halves = [[OffloadedTensor(rows_ckpt, f"r.{i}") for i in range(h * 64, (h + 1) * 64)] for h in (0, 1)]
    weight = ComposedOffloadedTensor.compose(halves, stack_dim=0, cat_dim=0).as_q4_0()
    assert isinstance(weight, ComposedOffloadedTensor) and weight.q4_0 and weight.shape == (128, 32)
    value = torch.stack(list(rows.values()))
    expected = _native.q4_0_dequantize(_native.q4_0_quantize(value.numpy()), [128, 32])
    np.testing.assert_array_equal(weight.to_base_tensor().numpy(), expected)
    linear = nn.Linear(32, 128, bias=False).eval()
    linear._parameters["weight"] = nn.Parameter(weight, requires_grad=False)
    path = export_and_check(linear, torch.randn(5, 32), tmp_path, compression_level=None, atol=1e-3, rtol=1e-3)
    dat = _native.dat_decode((path / "weight.dat").read_bytes())
    assert dat.encoding == "q4_0"
    np.testing.assert_array_equal(dat.array(), expected)


def test_composed_tensors_that_do_not_compose_are_refused(tmp_path):
    ckpt, _ = _expert_checkpoint(tmp_path)
    gate = [OffloadedTensor(ckpt, f"e.{e}.w1") for e in range(3)]
    down = [OffloadedTensor(ckpt, f"e.{e}.w2") for e in range(3)]
    with pytest.raises(T2NErrorCheckpoint, match=r"e\.0\.w1 \[64, 32\].*do not compose"):
        ComposedOffloadedTensor.compose([gate[:2] + down[:1]], stack_dim=0, cat_dim=None)
    with init_empty_weights():
        model = Experts(experts=2).eval()
    with pytest.raises(T2NErrorCheckpoint, match=r"shape: .*is \(3, 128, 32\), the model has \(2, 128, 32\)"):
        load_offloaded_checkpoint(model, ckpt, composed=_composed_experts(ckpt))
    assert all(p.is_meta for p in model.parameters())  # nothing was touched


def test_truncated_checkpoint_names_the_file_and_the_tensor(tmp_path):
    ckpt = tmp_path / "m.safetensors"
    save_file(state_of(TinyLM()), ckpt)
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[:-100])
    with pytest.raises(T2NErrorCheckpoint, match=r"m\.safetensors.*tensor '.*' ends at byte .*truncated"):
        load_offloaded_checkpoint(empty_model(), ckpt)


def test_offloaded_tensor_reference_api(tmp_path):
    t = torch.randn(4, 32)
    off = OffloadedTensor.from_original_tensor(t, "layer.w", offload_dir=tmp_path)
    (file,) = tmp_path.iterdir()
    assert file.name.startswith("layer.w_float32_") and file.suffix == ".safetensors"
    torch.testing.assert_close(off.to_base_tensor(), t)
    torch.testing.assert_close(off * 2, t * 2)  # any op materializes
    half = off.to(torch.float16)
    assert isinstance(half, OffloadedTensor) and half.dtype == torch.float16
    torch.testing.assert_close(half.to_base_tensor(), t.half())
    with pytest.raises(T2NErrorNotImplemented, match="writes into an offloaded tensor"):
        off.add_(1)
    del off, half
    assert list(tmp_path.iterdir()) == []  # the offloaded file goes with its last tensor


def test_reload_reads_the_values_in_the_dtype_set_by_to(tmp_path):
    # The reference's OffloadedTensor.reload(device=None): the values, as a plain tensor.
    t = torch.randn(10, 10)
    off = OffloadedTensor.from_original_tensor(t, "w", offload_dir=tmp_path)
    half = off.to(torch.float16)
    assert half.dtype == torch.float16
    reloaded = half.reload()
    assert type(reloaded) is torch.Tensor and reloaded.dtype == torch.float16
    torch.testing.assert_close(reloaded, t.half())
    on_cpu = off.reload(device="cpu")
    assert type(on_cpu) is torch.Tensor and on_cpu.device == torch.device("cpu")
    torch.testing.assert_close(on_cpu, t)
    assert isinstance(off, OffloadedTensor) and off.dtype == torch.float32  # unchanged
    with TensorResidencyPool(max_cached_bytes=1 << 20) as pool, pool.scope():
        torch.testing.assert_close(off.reload(), t)
        off.reload()
        assert pool.stats["loads"] == 1 and pool.stats["hits"] == 1  # served by the pool


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_t2n_load_checkpoint_and_dispatch(tmp_path, fmt):
    torch.manual_seed(3)
    state = state_of(TinyLM())
    if fmt == "safetensors":
        ckpt = tmp_path / "model.safetensors"
        save_file(state, ckpt)
    else:
        ckpt = tmp_path / "pytorch_model.bin"
        torch.save(state, ckpt)
    model = t2n_load_checkpoint_and_dispatch(empty_model(), ckpt, device_map="t2n_offload_disk",
                                             offload_dir=tmp_path / "offload")
    assert isinstance(model.up.weight, OffloadedTensor)
    path = export_and_check(model, IDS, tmp_path, compression_level=0)
    np.testing.assert_allclose(TractArtefact.load(path).run([IDS])[0], reference_model(state)(IDS).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def kinds(model: nn.Module) -> dict[str, str]:
    return {n: "disk" if isinstance(t, OffloadedTensor) else "cpu"
            for n, t in [*model.named_parameters(), *model.named_buffers()]}


@pytest.mark.parametrize("device_map, expected", [
    # Each weight goes where its longest enclosing module name says.
    ({"": "disk", "up": "cpu"}, {"embed.weight": "disk", "up.weight": "cpu", "up.bias": "cpu", "down.weight": "disk"}),
    ({"": "cpu", "down": "t2n_offload_disk"},
     {"embed.weight": "cpu", "up.weight": "cpu", "up.bias": "cpu", "down.weight": "disk"}),
    ({"embed": "disk", "up.weight": "disk", "up.bias": "cpu", "down": "cpu", "head": "cpu"},
     {"embed.weight": "disk", "up.weight": "disk", "up.bias": "cpu", "down.weight": "cpu"}),
    (None, {"embed.weight": "cpu", "up.weight": "cpu", "up.bias": "cpu", "down.weight": "cpu"}),
])
def test_t2n_load_checkpoint_and_dispatch_places_each_module(tmp_path, device_map, expected):
    torch.manual_seed(5)
    state = state_of(TinyLM())
    save_file(state, tmp_path / "model.safetensors")
    model = t2n_load_checkpoint_and_dispatch(empty_model(), tmp_path / "model.safetensors", device_map, None)
    assert kinds(model) == expected  # the tied head follows the embedding, its first name
    assert model.head.weight is model.embed.weight
    assert not any(t.is_meta for t in model.parameters())
    path = export_and_check(model, IDS, tmp_path, compression_level=1)
    np.testing.assert_allclose(TractArtefact.load(path).run([IDS])[0], reference_model(state)(IDS).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device_map, message", [
    ({"up": "cpu", "down": "disk"},
     "device_map places no module holding 'embed.weight'; add an entry for it or '' for the whole model"),
    ({"": "disk", "up": 0}, "device_map['up'] is 0: fastnnef loads weights on 'cpu' (in memory) or 'disk' (offloaded)"),
    ("balanced", "device_map 'balanced' is not supported; use 't2n_offload_disk', 't2n_auto', 'auto', None"),
])
def test_bad_device_maps_are_refused_before_anything_changes(tmp_path, device_map, message):
    save_file(state_of(TinyLM()), tmp_path / "model.safetensors")
    model = empty_model()
    with pytest.raises(T2NErrorInvalidArgument, match="^" + re.escape(message)):
        t2n_load_checkpoint_and_dispatch(model, tmp_path / "model.safetensors", device_map, None)
    assert all(p.is_meta for p in model.parameters())


def test_half_of_an_offloaded_model_converts_when_read(tmp_path):
    torch.manual_seed(6)
    state = state_of(TinyLM())
    save_file(state, tmp_path / "model.safetensors")
    model = t2n_load_checkpoint_and_dispatch(empty_model(), tmp_path / "model.safetensors", "t2n_offload_disk",
                                             tmp_path / "offload").half()
    assert all(isinstance(p, OffloadedTensor) and p.dtype == torch.float16 and p.stored_dtype == torch.float32
               for p in model.parameters())
    path = export_and_check(model, IDS, tmp_path, compression_level=None, atol=1e-2, rtol=1e-2)
    dat = _native.dat_decode((path / "up.weight.dat").read_bytes())
    assert dat.encoding == "f16"
    np.testing.assert_array_equal(dat.array(), state["up.weight"].half().numpy())
    half_reference = reference_model(state).half()
    np.testing.assert_allclose(TractArtefact.load(path).run([IDS])[0], half_reference(IDS).float().detach().numpy(),
                               rtol=2e-2, atol=2e-2)


def test_quantizing_an_offloaded_model_quantizes_on_the_way(tmp_path):
    """Min-max Q4_0 of offloaded weights is left to the Rust writer: nothing is read or
    written when quantizing, torch computes with the Q4_0 values, and the artefact is
    byte for byte the one of the same model quantized in memory."""
    torch.manual_seed(7)
    state = state_of(TinyLM())
    (tmp_path / "ckpt").mkdir()
    save_file(state, tmp_path / "ckpt" / "model.safetensors")
    offloaded = load_offloaded_checkpoint(empty_model(), tmp_path / "ckpt" / "model.safetensors")
    in_memory = reference_model(state)
    quantize_weights_min_max_Q4_0(offloaded)
    quantize_weights_min_max_Q4_0(in_memory)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no quantized copy written
    for name in ("up", "down"):
        weight = getattr(offloaded, name).weight
        assert isinstance(weight, OffloadedTensor) and weight.q4_0 and not weight.packed
        assert weight.nnef_name == f"{name}.weight" and weight.key == f"{name}.weight"
        torch.testing.assert_close(weight.to_base_tensor(), getattr(in_memory, name).weight.decompress())
    assert isinstance(offloaded.embed.weight, OffloadedTensor) and not offloaded.embed.weight.q4_0  # tied: stays float
    path = export_and_check(offloaded, IDS, tmp_path, name="off.nnef", compression_level=None, atol=1e-5, rtol=1e-5)
    expected = export_model_to_nnef(in_memory, IDS, tmp_path / "mem.nnef", TractNNEF.latest(), compression_level=None)
    for member in sorted(expected.iterdir()):
        assert (path / member.name).read_bytes() == member.read_bytes(), member.name
    assert _native.dat_decode((path / "up.weight.dat").read_bytes()).encoding == "q4_0"
    # As in memory, a second pass leaves quantized weights alone.
    up = offloaded.up.weight
    quantize_weights_min_max_Q4_0(offloaded)
    assert offloaded.up.weight is up


def test_offloaded_tensor_qtensor(tmp_path):
    t = torch.randn(8, 64)
    in_memory = offloaded_tensor_qtensor(fp_to_tract_q4_0_with_min_max_calibration, t, "q40")
    assert isinstance(in_memory, QTensorTractScaleOnly)
    off = OffloadedTensor.from_original_tensor(t, "w", tmp_path)
    q = offloaded_tensor_qtensor(fp_to_tract_q4_0_with_min_max_calibration, off, "q40")
    assert isinstance(q, OffloadedTensor) and q.packed and q.nnef_name == "w.q40"
    assert sorted(p.name.split("_")[0] for p in tmp_path.iterdir()) == ["w", "w.q40"]  # beside its source
    torch.testing.assert_close(q.to_base_tensor(), in_memory.decompress())
    torch.testing.assert_close(q.packed_qtensor().blocks, in_memory.blocks)
    half = q.to(torch.float16)  # still the blocks on disk, dequantized to float16
    assert isinstance(half, OffloadedTensor) and half.packed and half.dtype == torch.float16
    # A QTensor that is not Q4_0 is offloaded as the values it stands for.
    q8 = offloaded_tensor_qtensor(
        lambda v: QTensor(v, qscale_per_group_f16_min_max_calibration(v, n_bits=8, group_size=32)), off, "q8"
    )
    assert isinstance(q8, OffloadedTensor) and not q8.packed
    torch.testing.assert_close(q8.to_base_tensor(), QTensor(t, qscale_per_group_f16_min_max_calibration(
        t, n_bits=8, group_size=32)).decompress())
    del off, q, half, q8
    assert list(tmp_path.iterdir()) == []  # each file goes with its last tensor


def test_packed_q4_0_checkpoint_tensor_is_checked(tmp_path):
    save_file({"blocks": torch.zeros(10, dtype=torch.uint8)}, tmp_path / "b.safetensors")
    with pytest.raises(T2NErrorCheckpoint,
                       match=r"'blocks' in .* is U8 \[10\]; the Q4_0 blocks of a \(8, 64\) tensor are U8 \[288\]"):
        OffloadedTensor(open_checkpoint(tmp_path / "b.safetensors"), "blocks", packed_shape=(8, 64))


def test_ctx_maybe_load_from_disk_as_offloaded(tmp_path):
    torch.manual_seed(4)
    state = state_of(TinyLM())
    save_file(state, tmp_path / "m.safetensors")
    torch.save(state, tmp_path / "m.pt")
    import safetensors.torch

    original = (torch.load, safetensors.torch.load_file)
    with ctx_maybe_load_from_disk_as_offloaded(tmp_path / "offload"):
        from_st = safetensors.torch.load_file(tmp_path / "m.safetensors")
        from_pt = torch.load(tmp_path / "m.pt")
    assert (torch.load, safetensors.torch.load_file) == original  # restored on exit
    assert all(isinstance(v, OffloadedTensor) for v in [*from_st.values(), *from_pt.values()])
    for loaded in (from_st, from_pt):
        model = empty_model()
        model.load_state_dict(loaded, strict=False, assign=True)
        model.head.weight = model.embed.weight
        export_and_check(model, IDS, tmp_path, name=f"m{len(list(tmp_path.iterdir()))}.nnef", compression_level=1)


CHILD = textwrap.dedent(
    """
    import resource, sys
    import torch
    from torch import nn
    from fastnnef.export import export_model_to_nnef
    from fastnnef.inference_target import TractNNEF
    from fastnnef.tensor.offload_load import load_offloaded_checkpoint
    from fastnnef.utils import init_empty_weights

    ckpt, out, layers, headroom = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with init_empty_weights():
        model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(layers)]).eval()
    x = torch.ones(1, 1024)
    nn.Linear(8, 8)(torch.ones(1, 8))  # warm torch's threads and allocator before measuring

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    limit = vm_bytes() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:  # control: the weights do not fit in what this process may still use
        open(ckpt, "rb").read()
        print("CONTROL: read the whole checkpoint", flush=True)
    except MemoryError:
        print("CONTROL: MemoryError", flush=True)
    load_offloaded_checkpoint(model, ckpt)
    # check_io off: tract's check loads every weight into RAM (it has no mmap of .dat files).
    target = TractNNEF(TractNNEF.latest_version(), check_io=False)
    print(export_model_to_nnef(model, x, out, target, compression_level=0), flush=True)
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to measure the address space")
def test_export_of_weights_larger_than_the_memory_the_process_may_use(tmp_path):
    """256 MiB of weights exported by a process whose address space may grow by only
    128 MiB beyond what Python and torch already hold (RLIMIT_AS, which every Linux
    process can set on itself: no cgroup or root needed). The archive is written while
    the model is captured, the writer's maps and buffer beside the capture's: with 96 MiB,
    enough when they ran one after the other, 1 run in 4 to 16 failed to map a weight."""
    layers, headroom = 64, 128 << 20
    rng = np.random.default_rng(0)
    ckpt = tmp_path / "big.safetensors"
    state = {f"{i}.weight": torch.from_numpy(rng.standard_normal((1024, 1024), dtype=np.float32) * 0.03)
             for i in range(layers)}
    save_file(state, ckpt)
    assert ckpt.stat().st_size > 2 * headroom
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
           "MALLOC_ARENA_MAX": "2"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ckpt), str(tmp_path / "big.nnef"), str(layers),
                           str(headroom)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CONTROL: MemoryError" in proc.stdout, proc.stdout
    artefact = tmp_path / "big.nnef.tar"
    assert proc.stdout.strip().endswith(str(artefact))
    x = torch.ones(1, 1024)
    expected = x
    for i in range(layers):
        expected = expected @ state[f"{i}.weight"].T
    np.testing.assert_allclose(TractArtefact.load(artefact).run([x])[0], expected.numpy(), rtol=1e-3, atol=1e-3)


def test_checkpoint_weights_written_during_the_capture_are_kept(tmp_path, monkeypatch):
    """A directory export of an offloaded model: each weight's file is streamed from the
    checkpoint while the model is captured, and the graph's writing keeps every one (the
    same checkpoint tensor in the same encoding: no file written twice)."""
    from fastnnef.artefact import Artefact
    from fastnnef.export import finish_export, options_of, prepare_export

    torch.manual_seed(3)
    state = state_of(TinyLM(), torch.bfloat16)
    save_file(state, tmp_path / "model.safetensors")
    model = load_offloaded_checkpoint(empty_model(), tmp_path / "model.safetensors")
    writers: list[tuple[str, str]] = []
    for name in ("add_offloaded", "add_tensor"):
        method = getattr(Artefact, name)

        def spy(self, label, *args, _method=method, **kwargs):
            writers.append((label, threading.current_thread().name))
            return _method(self, label, *args, **kwargs)

        monkeypatch.setattr(Artefact, name, spy)
    target = TractNNEF(TractNNEF.latest_version(), check_io=False)
    prepared = prepare_export(model, (IDS,), target, options_of(tmp_path / "m.nnef", compression_level=None))
    assert prepared.early is not None
    prepared.early._thread.join()  # everything written ahead
    result, _ = finish_export(prepared)
    assert sorted(writers) == [(label, "fastnnef-early") for label in ["down.weight", "embed.weight", "up.bias",
                                                                      "up.weight"]]
    (got,) = TractArtefact.load(result.path).run([IDS])
    np.testing.assert_allclose(got, reference_model(state)(IDS).detach().numpy(), rtol=1e-5, atol=1e-5)
