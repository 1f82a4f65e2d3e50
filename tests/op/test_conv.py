"""Convolutions (conv, deconv, padding_mode variants) exported and compared with tract."""

from __future__ import annotations

import tarfile
from collections.abc import Callable

import pytest
import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF
from fastnnef.inference_target.tract import TractCheckTolerance
from tests.helpers import export_and_check


class Fn(nn.Module):
    """Wraps a functional call (conv1d/conv2d with explicit weights)."""

    def __init__(self, fn: Callable[..., torch.Tensor], *params: torch.Tensor):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList([nn.Parameter(p) for p in params])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, *self.params)


def x1(c: int = 4, t: int = 11) -> torch.Tensor:
    return torch.randn(2, c, t)


def x2(c: int = 4, h: int = 9, w: int = 7) -> torch.Tensor:
    return torch.randn(2, c, h, w)


def x3(c: int = 2) -> torch.Tensor:
    return torch.randn(1, c, 5, 6, 4)


CASES = [
    # (id, module factory, input factory)
    ("conv1d", lambda: nn.Conv1d(4, 6, 3), x1),
    ("conv1d_stride_pad", lambda: nn.Conv1d(4, 6, 5, stride=2, padding=2), x1),
    ("conv1d_dilation", lambda: nn.Conv1d(4, 6, 3, dilation=3, padding=1), x1),
    ("conv1d_groups", lambda: nn.Conv1d(4, 6, 3, groups=2, padding=1), x1),
    ("conv1d_depthwise", lambda: nn.Conv1d(4, 4, 3, groups=4, padding=1), x1),
    ("conv1d_depthwise_mult", lambda: nn.Conv1d(4, 8, 3, groups=4), x1),
    ("conv1d_no_bias", lambda: nn.Conv1d(4, 6, 3, bias=False), x1),
    pytest.param("conv1d_same_even", lambda: nn.Conv1d(4, 6, 4, padding="same"), x1,
                 marks=pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")),
    ("conv1d_same_dilated", lambda: nn.Conv1d(4, 6, 3, padding="same", dilation=2), x1),
    ("conv1d_valid", lambda: nn.Conv1d(4, 6, 3, padding="valid"), x1),
    ("conv1d_reflect", lambda: nn.Conv1d(4, 6, 3, padding=2, padding_mode="reflect"), x1),
    ("conv1d_replicate", lambda: nn.Conv1d(4, 6, 3, padding=1, padding_mode="replicate"), x1),
    ("conv1d_circular", lambda: nn.Conv1d(4, 6, 3, padding=2, padding_mode="circular"), x1),
    ("conv2d", lambda: nn.Conv2d(4, 6, 3), x2),
    ("conv2d_rect", lambda: nn.Conv2d(4, 6, (3, 1), stride=(2, 1), padding=(1, 0)), x2),
    ("conv2d_dilation_groups", lambda: nn.Conv2d(4, 6, 3, dilation=(2, 1), groups=2, padding=2), x2),
    ("conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, groups=4, padding=1, bias=False), x2),
    pytest.param("conv2d_same", lambda: nn.Conv2d(4, 6, (4, 3), padding="same"), x2,
                 marks=pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")),
    ("conv2d_reflect", lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"), x2),
    ("conv2d_replicate", lambda: nn.Conv2d(4, 6, 3, padding=(2, 1), padding_mode="replicate"), x2),
    ("conv2d_circular", lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="circular"), x2),
    ("conv3d", lambda: nn.Conv3d(2, 3, 3, padding=1), x3),
    ("conv3d_stride", lambda: nn.Conv3d(2, 4, (3, 2, 1), stride=(1, 2, 1), groups=2), x3),
    ("conv_transpose1d", lambda: nn.ConvTranspose1d(4, 6, 3), x1),
    ("conv_transpose1d_stride", lambda: nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1), x1),
    ("conv_transpose1d_output_padding", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, output_padding=1), x1),
    ("conv_transpose1d_groups", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, groups=2, bias=False), x1),
    ("conv_transpose1d_dilation", lambda: nn.ConvTranspose1d(4, 6, 3, dilation=2, padding=1), x1),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), x2),
    ("conv_transpose2d_groups", lambda: nn.ConvTranspose2d(4, 8, (3, 2), stride=(2, 1), groups=4), x2),
    ("conv_transpose3d", lambda: nn.ConvTranspose3d(2, 3, 2, stride=2), x3),
    ("f_conv1d", lambda: Fn(lambda x, w, b: nn.functional.conv1d(x, w, b, padding=1), torch.randn(6, 4, 3),
                            torch.randn(6)), x1),
    ("f_conv_transpose2d", lambda: Fn(lambda x, w: nn.functional.conv_transpose2d(x, w, stride=2),
                                      torch.randn(4, 3, 2, 2)), x2),
]


def _params(cases):
    """(id, factory, inputs) tuples or pytest.param(id, factory, inputs, marks=...)."""
    for case in cases:
        marks = getattr(case, "marks", ())
        name, factory, inputs = case.values if marks else case
        yield pytest.param(factory, inputs, id=name, marks=marks)


@pytest.mark.parametrize("factory,inputs", list(_params(CASES)))
def test_conv(factory, inputs, tmp_path):
    torch.manual_seed(0)
    model = factory().eval()
    export_and_check(model, inputs(), tmp_path, atol=1e-4, rtol=1e-4)


def test_conv_f16(tmp_path):
    torch.manual_seed(0)
    model = nn.Conv1d(4, 6, 3, padding=1).half().eval()
    x = x1().half()
    export_and_check(model, x, tmp_path, atol=1e-2, rtol=1e-2)


def test_conv1d_stack_dynamic_time(tmp_path):
    """Exported at T=20, run at T=33 and T=7: the time axis stays symbolic."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(4, 8, 3, padding=1), nn.ReLU(),
        nn.Conv1d(8, 8, 5, padding=2, groups=8), nn.ReLU(),
        nn.Conv1d(8, 6, 3, stride=2),
    ).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    path = export_model_to_nnef(
        model, torch.randn(1, 4, 20), tmp_path / "dyn.nnef", target,
        input_names=["x"], output_names=["y"], compression_level=0,
    )
    artefact = TractArtefact.load(path)
    for t in (33, 7):
        x = torch.randn(1, 4, t)
        (got,) = artefact.run([x])
        with torch.no_grad():
            expected = model(x).numpy()
        assert got.shape == expected.shape
        assert abs(got - expected).max() < 1e-4


def test_conv_transpose1d_dynamic_time(tmp_path):
    """A strided transposed conv (no output_padding) keeps the time axis symbolic."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ConvTranspose1d(6, 3, 4, stride=2, padding=1)).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    export_and_check(
        model, x1(t=10), tmp_path, target=target, input_names=["x"], output_names=["y"],
        run_inputs=[x1(t=17)],
    )


def test_conv_transpose_output_padding_dynamic_refused(tmp_path):
    model = nn.ConvTranspose1d(4, 6, 3, stride=2, output_padding=1).eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    with pytest.raises(T2NErrorNotImplemented, match="output_padding"):
        export_model_to_nnef(model, x1(), tmp_path / "m.nnef", target, input_names=["x"], output_names=["y"])


def test_conv_circular_dynamic_refused(tmp_path):
    model = nn.Conv1d(4, 6, 3, padding=1, padding_mode="circular").eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {2: "T"}})
    with pytest.raises(T2NErrorNotImplemented, match="circular padding"):
        export_model_to_nnef(model, x1(), tmp_path / "m.nnef", target, input_names=["x"], output_names=["y"])


def test_conv_khronos_strict(tmp_path):
    """Strict NNEF: conv, reflect pad and bias as [1, C] need no tract extension."""
    from fastnnef.inference_target import KhronosNNEF

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), nn.MaxPool2d(2)).eval()
    path = export_model_to_nnef(model, x2(c=3), tmp_path / "k.nnef", KhronosNNEF("1.0.5"))
    with tarfile.open(path) as archive:
        member = archive.extractfile("graph.nnef")
        assert member is not None
        text = member.read().decode()
    assert "tract_" not in text and "= conv(" in text and "border = 'reflect'" in text


# --- conv_tbc; what tracing records for torch.convolution ------------------------------------
class ConvTBC(nn.Module):
    """fairseq's time-major convolution (torch.conv_tbc)."""

    def __init__(self, c_in: int = 4, c_out: int = 6, k: int = 3, pad: int = 1, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, c_in, c_out, dtype=dtype))
        self.bias = nn.Parameter(torch.randn(c_out, dtype=dtype))
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.conv_tbc(x, self.weight, self.bias, self.pad)


@pytest.mark.parametrize("kwargs", [dict(), dict(k=4, pad=0), dict(k=5, pad=3)], ids=["pad1", "even-kernel", "pad3"])
def test_conv_tbc(kwargs, tmp_path):
    torch.manual_seed(0)
    export_and_check(ConvTBC(**kwargs).eval(), (torch.randn(7, 2, 4),), tmp_path, atol=1e-4)


def test_conv_tbc_dynamic_time_f16(tmp_path):
    torch.manual_seed(0)
    model = ConvTBC(dtype=torch.float16).eval()
    target = TractNNEF(TractNNEF.latest_version(), check_io_tolerance=TractCheckTolerance.VERY,
                       dynamic_axes={"x": {0: "T"}})
    export_and_check(model, (torch.randn(7, 2, 4).half(),), tmp_path, target=target, input_names=["x"],
                     run_inputs=[torch.randn(11, 2, 4).half()], atol=1e-2, rtol=1e-2)


def test_torch_convolution_traces_as_convolution():
    """torch.convolution (and the backend hook convolution_overrideable) is recorded as
    aten::_convolution, which conv.py handles: should that change, this fails."""
    fn = lambda x: torch.convolution(x, torch.ones(6, 4, 3), None, [1], [1], [1], False, [0], 1)  # noqa: E731
    with torch.no_grad():
        graph = str(torch.jit.trace(fn, (torch.randn(2, 4, 7),), check_trace=False).inlined_graph)
    assert "aten::_convolution(" in graph and "aten::convolution(" not in graph
