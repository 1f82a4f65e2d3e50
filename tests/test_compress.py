"""Q4_0 weight compression through the drop-in API (torch_to_nnef-api.md §9.2): quantized
models run in torch, export as Q4_0 .dat files holding exactly the blocks torch used, and
tract's outputs match the dequantized torch forward."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import export_and_check
from torch import nn

from fastnnef import _native
from fastnnef.compress import (
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_REGISTRY,
    dynamic_load_registry,
    quantize_weights_min_max_Q4_0,
)
from fastnnef.exceptions import T2NErrorImport, T2NErrorInvalidArgument
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.tensor.quant import QTensorTractScaleOnly

VENDOR_TRACT, CODE_Q4_0, CODE_Q4_0_LEGACY = 0x5452, 0x3040, 0x2040


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(8, 16, 4)  # weight 16x8x4: 32 values per output channel
        self.c2 = nn.Conv2d(2, 4, 4)  # weight 4x2x4x4: 32 values per output channel
        self.head = nn.Linear(64, 3)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.c1(x1), self.head(self.c2(x2).flatten(1))


class Emb(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 64)
        self.proj = nn.Linear(64, 32, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.emb(ids))


def _model(factory):
    torch.manual_seed(0)
    return factory().eval()


CASES = {
    "mlp": (Mlp, lambda: (torch.randn(2, 5, 64),), {"fc1.weight": "Linear", "fc2.weight": "Linear"}),
    "conv": (
        ConvNet,
        lambda: (torch.randn(1, 8, 12), torch.randn(1, 2, 7, 7)),
        {"c1.weight": "Conv", "c2.weight": "Conv", "head.weight": "Linear"},
    ),
    "embedding": (Emb, lambda: (torch.tensor([[1, 4, 9], [0, 2, 2]]),),
                  {"emb.weight": "Embedding", "proj.weight": "Linear"}),
}
QUANTIZED_KINDS = {
    "min_max_q4_0": {"Linear"},
    "min_max_q4_0_with_embeddings": {"Linear", "Embedding"},
    "min_max_q4_0_with_embeddings_99": {"Linear", "Embedding"},
    "min_max_q4_0_all": {"Linear", "Embedding", "Conv"},
}


def _dat_files(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {
            m.name[: -len(".dat")]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers() if m.name.endswith(".dat")
        }


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("scheme", sorted(DEFAULT_COMPRESSION))
def test_default_compressions_export_q4_0(case: str, scheme: str, tmp_path: Path) -> None:
    factory, make_args, weights = CASES[case]
    model = _model(factory)
    floats = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert DEFAULT_COMPRESSION[scheme](model) is model
    expected_q = {name for name, kind in weights.items() if kind in QUANTIZED_KINDS[scheme]}
    params = dict(model.named_parameters())
    assert {n for n, p in params.items() if isinstance(p, QTensorTractScaleOnly)} == expected_q
    torch.manual_seed(1)
    args = make_args()
    path = export_and_check(model, args, tmp_path, name="m.nnef.tgz", compression_level=1, atol=1e-5, rtol=1e-5)
    files = _dat_files(path)
    percentile = 0.99 if scheme.endswith("_99") else 1.0
    for name in weights:
        dat = _native.dat_decode(files[name])
        if name not in expected_q:
            assert dat.encoding == "f32"
            continue
        assert (dat.vendor, dat.item_type) == (VENDOR_TRACT, CODE_Q4_0)
        assert dat.shape == list(floats[name].shape)
        # The stored blocks are what the quantizer gives for the ORIGINAL float weight.
        blocks = _native.q4_0_quantize(floats[name].numpy(), percentile=percentile)
        assert dat.payload() == blocks.tobytes()
        assert len(files[name]) == 128 + floats[name].numel() // 32 * 18
        assert floats[name].numel() * 4 / len(dat.payload()) == pytest.approx(32 * 4 / 18)
        # torch ran on exactly what tract dequantizes.
        np.testing.assert_array_equal(params[name].decompress().numpy(), dat.array())


def test_legacy_order_for_old_tract(tmp_path: Path) -> None:
    model = DEFAULT_COMPRESSION["min_max_q4_0"](_model(Mlp))
    weight = model.fc1.weight
    assert isinstance(weight, QTensorTractScaleOnly)
    path = export_and_check(model, (torch.randn(3, 64),), tmp_path, target=TractNNEF("0.21.10"), name="m.nnef.tgz")
    dat = _native.dat_decode(_dat_files(path)["fc1.weight"])
    assert (dat.vendor, dat.item_type) == (VENDOR_TRACT, CODE_Q4_0_LEGACY)
    np.testing.assert_array_equal(dat.array(), weight.decompress().numpy())
    # Same values as the GGML-order file, nibbles in the legacy order.
    ggml = _native.q4_0_blocks_dat_encode(weight.blocks.numpy(), [32, 64])
    assert dat.payload() != _native.dat_decode(ggml).payload()


def test_f16_model(tmp_path: Path) -> None:
    model = DEFAULT_COMPRESSION["min_max_q4_0"](_model(Mlp).half())
    assert model.fc1.weight.dequant_to_dtype == torch.float16
    path = export_and_check(model, (torch.randn(3, 64).half(),), tmp_path, name="m.nnef.tgz", atol=1e-2, rtol=1e-2)
    dat = _native.dat_decode(_dat_files(path)["fc1.weight"])
    assert (dat.vendor, dat.item_type) == (VENDOR_TRACT, CODE_Q4_0)


def test_khronos_target_gets_dequantized_floats(tmp_path: Path) -> None:
    model = DEFAULT_COMPRESSION["min_max_q4_0"](_model(Mlp))
    path = export_model_to_nnef(model, torch.randn(3, 64), tmp_path / "k.nnef.tgz",
                                KhronosNNEF("1.0.5", check_io=False))
    dat = _native.dat_decode(_dat_files(path)["fc1.weight"])
    assert dat.encoding == "f32"
    np.testing.assert_array_equal(dat.array(), model.fc1.weight.decompress().numpy())


def test_graph_declares_q4_0_variable_without_generic(tmp_path: Path) -> None:
    model = DEFAULT_COMPRESSION["min_max_q4_0"](_model(Mlp))
    path = export_and_check(model, (torch.randn(3, 64),), tmp_path, name="m.nnef.tgz")
    with tarfile.open(path) as tar:
        text = tar.extractfile("graph.nnef").read().decode()  # type: ignore[union-attr]
    assert "variable(label = 'fc1.weight', shape = [32, 64]);" in text
    assert "variable<scalar>(label = 'fc1.bias', shape = [32]);" in text


def test_shared_weight_quantized_once(tmp_path: Path) -> None:
    model = _model(Mlp)
    model.fc3 = nn.Linear(64, 32)
    model.fc3.weight = model.fc1.weight  # tied
    quantize_weights_min_max_Q4_0(model)
    assert model.fc3.weight is model.fc1.weight
    assert isinstance(model.fc1.weight, QTensorTractScaleOnly)
    assert model.fc1.weight.nnef_name == "fc1.weight"


def test_weight_shared_outside_the_classes_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    model = _model(Emb)
    model.emb = nn.Embedding(32, 64)
    model.proj = nn.Linear(64, 32, bias=False)
    model.proj.weight = model.emb.weight  # tied embedding / head
    with caplog.at_level(logging.WARNING, logger="fastnnef"):
        DEFAULT_COMPRESSION["min_max_q4_0"](model)
    assert not isinstance(model.proj.weight, QTensorTractScaleOnly)
    assert "shared with emb" in caplog.text
    DEFAULT_COMPRESSION["min_max_q4_0_with_embeddings"](model)
    assert isinstance(model.proj.weight, QTensorTractScaleOnly) and model.proj.weight is model.emb.weight


def test_unquantizable_shapes_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    model = nn.Sequential(nn.Linear(10, 4), nn.Linear(4, 64), nn.Linear(64, 2))
    with caplog.at_level(logging.INFO, logger="fastnnef"):
        quantize_weights_min_max_Q4_0(model)
    kinds = [isinstance(m.weight, QTensorTractScaleOnly) for m in model]
    assert kinds == [False, False, True]
    assert "not quantizing 0.weight" in caplog.text and "not quantizing 1.weight" in caplog.text


def test_percentile_is_checked() -> None:
    with pytest.raises(T2NErrorInvalidArgument, match="percentile"):
        quantize_weights_min_max_Q4_0(_model(Mlp), percentile=0.0)


def test_registry() -> None:
    assert dynamic_load_registry(DEFAULT_COMPRESSION_REGISTRY) is DEFAULT_COMPRESSION
    with pytest.raises(T2NErrorImport):
        dynamic_load_registry("fastnnef.no_such_module.REG")
    with pytest.raises(T2NErrorInvalidArgument, match="expected a dict"):
        dynamic_load_registry("fastnnef.compress.quantize_weights_min_max_Q4_0")
