"""No option is accepted and then ignored: each TractNNEF / export option that changes the
graph is set here and its effect checked in the graph text and through tract; options
fastnnef cannot honour raise a clear error. (``strict_extra_imports``: tests/test_extras.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from tests import helpers
from tests.helpers import Fn, export_and_check

LATEST = TractNNEF.latest().version


def _text(path: Path) -> str:
    return (path / "graph.nnef").read_text()


def _export_dir(model: nn.Module, args: tuple, path: Path, **target_options) -> Path:
    target = TractNNEF(LATEST, check_io=False, **target_options)
    return export_model_to_nnef(model, args, path, target, compression_level=None)


# --- force_linear_accumulation_in_f32 ---------------------------------------------------------


class _Products(nn.Module):
    """Every op family the option covers: linear with and without bias, batched matmul
    with a broadcast batch, vector @ matrix, addmm with alpha and beta, einsum, conv and
    transposed conv."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(6, 5)
        self.lin_nb = nn.Linear(5, 3, bias=False)
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        self.deconv = nn.ConvTranspose1d(4, 2, 3, stride=2)
        self.b = nn.Parameter(torch.randn(1, 6, 7))
        self.v = nn.Parameter(torch.randn(7))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.lin_nb(self.lin(x))  # [2, 3, 3]
        mm = torch.matmul(x, self.b)  # [2, 3, 6] @ [1, 6, 7]
        vec = torch.matmul(mm, self.v)  # [2, 3]
        am = torch.addmm(self.v[:3], x[0], self.b[0, :, :3], beta=0.5, alpha=2.0)
        es = torch.einsum("bij,bjk->bik", h, h)
        return h, vec, am, es, self.deconv(self.conv(s))


def _products_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(2, 3, 6).half(), torch.randn(1, 3, 9).half()


def test_f16_products_accumulate_in_f32(tmp_path):
    model = _Products().half().eval()
    args = _products_inputs()
    target = TractNNEF(LATEST, force_linear_accumulation_in_f32=True)
    path = export_and_check(model, args, tmp_path, target=target, compression_level=None, atol=2e-2, rtol=2e-2)
    text = _text(path)
    assert "matmul(" not in text
    einsums = re.findall(r"tract_core_einsum\(\[[^]]*\], expr = '([^']+)', acc = '(\w+)'\)", text)
    assert sorted(einsums) == sorted([
        ("amk,ank->amn", "f32"), ("amk,ank->amn", "f32"),  # the two linears
        ("amk,akn->amn", "f32"), ("amk,akn->amn", "f32"),  # matmul, vector (as a matrix)
        ("mk,kn->mn", "f32"), ("bij,bjk->bik", "f32"),  # addmm, einsum
    ])
    # conv / deconv run on f32 operands; every product is cast back to the model's f16
    assert re.search(r"_acc = conv\(\w+_cast, \w+_cast_1, ", text)
    assert re.search(r"_acc = deconv\(\w+_cast, \w+_filter, ", text)
    assert len(re.findall(r"tract_core_cast\(\w+_acc, to = 'f16'\)", text)) == 2
    outputs = TractArtefact.load(path).output_facts
    assert [dtype for dtype, _ in outputs] == ["f16"] * 5


def test_without_the_option_f16_products_stay_f16(tmp_path):
    model = _Products().half().eval()
    path = export_and_check(
        model, _products_inputs(), tmp_path, compression_level=None, atol=2e-2, rtol=2e-2,
    )
    text = _text(path)
    assert text.count(" = matmul(") == 5 and "acc = 'f16'" in text and "acc = 'f32'" not in text
    assert "to = 'f32'" not in text


def test_f32_models_are_unchanged_by_the_option(tmp_path):
    model = _Products().eval()
    args = tuple(a.float() for a in _products_inputs())
    plain = _export_dir(model, args, tmp_path / "plain.nnef")
    forced = _export_dir(model, args, tmp_path / "forced.nnef", force_linear_accumulation_in_f32=True)
    assert _text(plain) == _text(forced)


def test_f32_accumulation_is_closer_to_f32_than_f16(tmp_path):
    """tract's f16 convolution rounds more than torch's; accumulating in f32 matches the
    f64 result better (on CPUs with native f16 kernels, matmuls gain the same way)."""
    torch.manual_seed(0)
    conv = nn.Conv1d(8, 16, 3)
    with torch.no_grad():  # large positive sums: f16 rounding errors show
        conv.weight.uniform_(0, 64.0)
        conv.bias.uniform_(-2, 2)
    x = torch.rand(2, 8, 11)
    exact = conv.double()(x.double()).detach().numpy()
    half, x16 = conv.half().eval(), x.half()
    errors = {}
    for flag in (False, True):
        path = _export_dir(half, (x16,), tmp_path / f"{flag}.nnef", force_linear_accumulation_in_f32=flag)
        (y,) = TractArtefact.load(path).run([x16])
        assert y.dtype == np.float16
        errors[flag] = np.abs(y.astype(np.float64) - exact).mean()
    assert errors[True] < errors[False] * 0.5, errors


# --- upsample_with_debox ----------------------------------------------------------------------

DEBOX_CASES = [  # (model, input shape, debox size)
    pytest.param(nn.Upsample(scale_factor=2), (1, 2, 5), [1, 1, 2], id="1d_scale"),
    pytest.param(nn.Upsample(scale_factor=(3, 2)), (2, 3, 4, 5), [1, 1, 3, 2], id="2d_scales"),
    pytest.param(Fn(lambda x: F.interpolate(x, size=(8, 15))), (1, 1, 4, 5), [1, 1, 2, 3], id="2d_size"),
    pytest.param(Fn(lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact")), (1, 2, 3, 3, 2),
                 [1, 1, 2, 2, 2], id="3d_nearest_exact"),
]


@pytest.mark.parametrize("model, shape, size", DEBOX_CASES)
def test_upsample_with_debox(model, shape, size, tmp_path):
    target = TractNNEF(LATEST, upsample_with_debox=True)
    path = export_and_check(model, torch.randn(*shape), tmp_path, target=target, compression_level=None)
    text = _text(path)
    padding = ", ".join(["(0, 0)"] * len(shape))
    assert f"debox(input_0, size = {size}, stride = {size}, padding = [{padding}])" in text
    assert "tract_core_resize" not in text


def test_upsample_with_debox_on_a_dynamic_axis(tmp_path):
    target = TractNNEF(LATEST, upsample_with_debox=True).with_dynamic_axes({"x": {2: "T"}})
    path = export_and_check(
        nn.Upsample(scale_factor=2), torch.randn(1, 3, 4), tmp_path, target=target,
        input_names=["x"], run_inputs=[torch.randn(1, 3, 9)], compression_level=None,
    )
    assert "debox(" in _text(path)


@pytest.mark.parametrize("model", [
    pytest.param(nn.Upsample(scale_factor=1.5), id="non_integer"),
    pytest.param(nn.Upsample(scale_factor=2, mode="linear"), id="linear"),
])
def test_debox_only_replaces_integer_nearest_upsampling(model, tmp_path):
    target = TractNNEF(LATEST, upsample_with_debox=True)
    path = export_and_check(model, torch.randn(1, 2, 6), tmp_path, target=target, compression_level=None)
    assert "debox(" not in _text(path) and "tract_core_resize(" in _text(path)


def test_upsample_with_debox_needs_a_tract_with_debox():
    with pytest.raises(T2NErrorInvalidArgument, match=(
        r"^upsample_with_debox=True needs tract >= 0\.23\.0 \(the debox operator\), but the "
        r"target is tract 0\.22\.3: raise the version or leave upsample_with_debox False$"
    )):
        TractNNEF("0.22.3", upsample_with_debox=True)


# --- native_gated_delta_op ----------------------------------------------------------------------


def test_native_gated_delta_op():
    """Gated delta nets are exported only as tract's fused operator: True asks for it (and
    needs a tract that has it), False (the reference's scan lowering) is refused."""
    assert TractNNEF(LATEST, native_gated_delta_op=None).native_gated_delta_op is None
    assert TractNNEF(LATEST, native_gated_delta_op=True).native_gated_delta_op is True
    with pytest.raises(T2NErrorNotImplemented, match=r"^native_gated_delta_op=False: .* no tract_core_scan lowering"):
        TractNNEF(LATEST, native_gated_delta_op=False)
    with pytest.raises(T2NErrorInvalidArgument, match=r"needs tract >= 0\.23\.5 .* the target is tract 0\.23\.4"):
        TractNNEF("0.23.4", native_gated_delta_op=True)


# --- skip_eager_forward ------------------------------------------------------------------------


class _CountsForwards(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.calls: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.device.type)
        return self.lin(x)


def test_skip_eager_forward_no_forward_besides_the_trace(tmp_path):
    """fastnnef's only forward is the trace's (its outputs are the check's references): the
    option's promise holds with either value, and the artefact is the same."""
    model = _CountsForwards()
    x = torch.randn(4, 3)
    paths = []
    for skip in (False, True):
        model.calls.clear()
        paths.append(export_model_to_nnef(
            model, x, tmp_path / f"{skip}.nnef", TractNNEF.latest(), skip_eager_forward=skip,
            front_end=helpers.FRONT_END,
        ))
        # torch.export also runs forward once under fake tensors (the capture, no value computed)
        assert model.calls == ["cpu"] * (1 if helpers.FRONT_END == "jit" else 2)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    with pytest.raises(T2NErrorInvalidArgument, match="^skip_eager_forward must be a bool, got 'yes'$"):
        export_model_to_nnef(model, x, tmp_path / "c.nnef", TractNNEF.latest(), skip_eager_forward="yes")
