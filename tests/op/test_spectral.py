"""torch.fft, stft/istft and window functions exported and run in tract, compared with
torch (complex results compared as (re, im) pairs)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented, T2NErrorStrictNNEFSpec
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from tests.helpers import export_and_check
from tests.op._table import Fn, check

fft = torch.fft


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def crandn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.complex64)


def hann(n: int) -> torch.Tensor:
    return torch.hann_window(n)


def quiet(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` without torch's advice warnings (rectangular window, return_complex=False,
    zero tail), which the strict test settings turn into errors."""
    def run(*xs: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn(*xs)
    return run


# (id, fn, inputs factory, dynamic axes {input index: {dim: symbol}} or None)
CASES = [
    # complex-to-complex, odd sizes, signal sizes (n/s), every norm
    ("fft", lambda x: fft.fft(x), lambda: (randn(2, 9),), None),
    ("fft_complex_dim0_n", lambda z: fft.fft(z, n=6, dim=0, norm="ortho"), lambda: (crandn(5, 3),), None),
    ("fft_pad_forward", lambda x: fft.fft(x, n=12, norm="forward"), lambda: (randn(7),), None),
    ("ifft", lambda z: fft.ifft(z, dim=-2), lambda: (crandn(2, 7, 3),), None),
    ("ifft_ortho_cut", lambda z: fft.ifft(z, n=4, norm="ortho"), lambda: (crandn(3, 7),), None),
    ("fft2", lambda x: fft.fft2(x), lambda: (randn(2, 5, 6),), None),
    ("ifft2_s", lambda z: fft.ifft2(z, s=(4, 9), norm="forward"), lambda: (crandn(3, 5, 6),), None),
    ("fftn_all", lambda x: fft.fftn(x, norm="ortho"), lambda: (randn(3, 4, 5),), None),
    ("ifftn_dims", lambda z: fft.ifftn(z, dim=(0, 2)), lambda: (crandn(3, 4, 5),), None),
    # real-to-complex and back (odd and even lengths)
    ("rfft", lambda x: fft.rfft(x), lambda: (randn(3, 11),), None),
    ("rfft_n_dim", lambda x: fft.rfft(x, n=8, dim=0, norm="forward"), lambda: (randn(5, 3),), None),
    ("irfft", lambda z: fft.irfft(z), lambda: (crandn(2, 6),), None),
    ("irfft_odd_n", lambda z: fft.irfft(z, n=9, dim=0, norm="ortho"), lambda: (crandn(5, 2),), None),
    ("irfft_short_n", lambda z: fft.irfft(z, n=4), lambda: (crandn(3, 6),), None),
    ("rfft_irfft_roundtrip", lambda x: fft.irfft(fft.rfft(x), n=7), lambda: (randn(2, 7),), None),
    ("rfft2", lambda x: fft.rfft2(x), lambda: (randn(2, 5, 7),), None),
    ("irfft2", lambda z: fft.irfft2(z), lambda: (crandn(4, 5),), None),
    ("rfftn_s", lambda x: fft.rfftn(x, s=(6, 5), dim=(0, 2)), lambda: (randn(4, 2, 5),), None),
    ("irfftn_s", lambda z: fft.irfftn(z, s=(3, 7), norm="forward"), lambda: (crandn(2, 3, 4),), None),
    ("hfft", lambda z: fft.hfft(z), lambda: (crandn(3, 5),), None),
    ("hfft_n_ortho", lambda z: fft.hfft(z, n=7, norm="ortho"), lambda: (crandn(3, 5),), None),
    ("ihfft", lambda x: fft.ihfft(x), lambda: (randn(2, 9),), None),
    ("ihfft_forward", lambda x: fft.ihfft(x, dim=0, norm="forward"), lambda: (randn(6, 2),), None),
    ("hfft2", lambda z: fft.hfft2(z), lambda: (crandn(3, 4),), None),
    ("hfftn_s", lambda z: fft.hfftn(z, s=(4, 5), norm="ortho"), lambda: (crandn(2, 3, 4),), None),
    ("ihfft2", lambda x: fft.ihfft2(x), lambda: (randn(3, 5),), None),
    ("ihfftn_dims", lambda x: fft.ihfftn(x, dim=(0, 2), norm="forward"), lambda: (randn(4, 2, 5),), None),
    # frequencies, shifts
    ("fftfreq_rfftfreq", lambda x: x * fft.fftfreq(7) + fft.rfftfreq(12, d=0.5)[:7], lambda: (randn(2, 7),), None),
    ("fftshift", lambda x: fft.fftshift(x), lambda: (randn(4, 5),), None),
    ("ifftshift_dim", lambda x: fft.ifftshift(x, dim=(-1,)), lambda: (randn(4, 7),), None),
    ("fftshift_complex", lambda x: fft.fftshift(fft.fft2(x), dim=(0, 1)), lambda: (randn(5, 4),), None),
    # dynamic axes: batch, or the transformed axis itself when no scaling depends on it
    ("rfft_dyn_batch", lambda x: fft.rfft(x, norm="ortho"), lambda: (randn(3, 10),), {0: {0: "B"}}),
    ("fft_dyn_axis", lambda x: fft.fft(x, dim=1).abs(), lambda: (randn(3, 10),), {0: {1: "N"}}),
]

WINDOWS = [
    ("hann", lambda x: x * torch.hann_window(7), lambda: (randn(2, 7),), None),
    ("hann_symmetric", lambda x: x * torch.hann_window(7, periodic=False), lambda: (randn(7),), None),
    ("hamming_alpha_beta", lambda x: x * torch.hamming_window(8, True, 0.5, 0.4), lambda: (randn(8),), None),
    ("hamming_symmetric", lambda x: x * torch.hamming_window(5, periodic=False), lambda: (randn(5),), None),
    ("blackman", lambda x: x * torch.blackman_window(9), lambda: (randn(9),), None),
    ("bartlett_symmetric", lambda x: x * torch.bartlett_window(6, False), lambda: (randn(6),), None),
    ("kaiser_beta", lambda x: x * torch.kaiser_window(7, False, 5.0), lambda: (randn(7),), None),
    ("kaiser_default", lambda x: x * torch.kaiser_window(6), lambda: (randn(6),), None),
    ("hann_f16", lambda x: x * torch.hann_window(7, dtype=torch.float16), lambda: (randn(7).half(),), None),
    ("hann_f64", lambda x: x * torch.hann_window(7, dtype=torch.float64), lambda: (randn(7).double(),), None),
]

STFT = [
    # Whisper's front end: n_fft 400, hop 160, hann, power spectrum without the last frame.
    ("whisper_power", lambda a: torch.stft(a, 400, 160, window=hann(400), return_complex=True)[..., :-1].abs() ** 2,
     lambda: (randn(1, 1600),), None),
    ("center_reflect", lambda a: torch.stft(a, 64, 16, window=hann(64), return_complex=True), lambda: (randn(2, 301),),
     None),
    ("center_constant", lambda a: torch.stft(a, 32, 8, window=hann(32), pad_mode="constant", return_complex=True),
     lambda: (randn(130),), None),
    ("no_center_short_window", lambda a: torch.stft(a, 32, 10, 21, hann(21), center=False, return_complex=True),
     lambda: (randn(2, 150),), None),
    ("default_window_normalized", quiet(lambda a: torch.stft(a, 20, normalized=True, return_complex=True)),
     lambda: (randn(97),), None),
    ("rect_window_short", quiet(lambda a: torch.stft(a, 16, 4, win_length=10, return_complex=True)),
     lambda: (randn(90),), None),
    ("two_sided_real_output",
     quiet(lambda a: torch.stft(a, 16, 5, window=hann(16), onesided=False, return_complex=False)),
     lambda: (randn(2, 80),), None),
    ("computed_window", lambda a: torch.stft(a, 32, 8, window=hann(32).sqrt(), return_complex=True),
     lambda: (randn(2, 120),), None),
    ("computed_short_window", lambda a: torch.stft(a, 32, 7, 19, hann(19) ** 2, return_complex=True),
     lambda: (randn(120),), None),
    ("complex_signal", lambda z: torch.stft(z, 16, 4, window=hann(16), return_complex=True), lambda: (crandn(70),),
     None),
    ("dyn_time", lambda a: torch.stft(a, 64, 16, window=hann(64), return_complex=True).abs(),
     lambda: (randn(2, 400),), {0: {1: "T"}}),
    ("dyn_time_no_center", lambda a: torch.stft(a, 64, 16, window=hann(64), center=False, return_complex=True),
     lambda: (randn(2, 400),), {0: {1: "T"}}),
    # istft: onesided/two-sided, lengths, hops that don't divide n_fft, dynamic frames
    ("istft", lambda s: torch.istft(s, 16, 4, window=hann(16)), lambda: (_spec(2, 203, 16, 4),), None),
    ("istft_length_longer", quiet(lambda s: torch.istft(s, 16, 4, window=hann(16), length=250)),
     lambda: (_spec(2, 203, 16, 4),), None),
    ("istft_length_shorter", lambda s: torch.istft(s, 16, 4, window=hann(16), length=150),
     lambda: (_spec(1, 203, 16, 4),), None),
    ("istft_hop5_normalized", lambda s: torch.istft(s, 16, 5, 12, hann(12), normalized=True),
     lambda: (_spec(2, 101, 16, 5, 12, normalized=True),), None),
    ("istft_no_center", lambda s: torch.istft(s, 16, 4, window=hann(16) + 0.1, center=False),
     lambda: (_spec(0, 96, 16, 4, window=hann(16) + 0.1, center=False),), None),
    ("istft_two_sided", lambda s: torch.istft(s, 16, 4, window=hann(16), onesided=False),
     lambda: (_spec(2, 64, 16, 4, onesided=False),), None),
    ("stft_istft_roundtrip", lambda a: torch.istft(torch.stft(a, 32, 8, window=hann(32), return_complex=True), 32, 8,
                                                   window=hann(32), length=203), lambda: (randn(2, 203),), None),
    ("istft_dyn_frames", lambda s: torch.istft(s, 16, 4, window=hann(16)), lambda: (_spec(2, 100, 16, 4),),
     {0: {2: "T"}}),
]


def _spec(batch: int, length: int, n_fft: int, hop: int, win_length: int = 0, window: Any = None,
          **kwargs: Any) -> torch.Tensor:
    """A complex spectrogram from torch.stft (a valid istft input)."""
    signal = randn(batch, length) if batch else randn(length)
    win = window if window is not None else hann(win_length or n_fft)
    return torch.stft(signal, n_fft, hop, win_length or None, win, return_complex=True, **kwargs)


def _param(case: Any) -> Any:
    return pytest.param(*case[1:4], id=case[0])


# Cases whose inputs a fresh draw cannot stand for: case id -> why the redraw is skipped.
NO_REDRAW = {
    "istft_two_sided": "a two-sided spectrum of a real signal is Hermitian, a fresh draw is not (torch then "
                       "reads only its first half)",
}


@pytest.mark.parametrize("fn, make, dyn", [_param(c) for c in CASES])
def test_fft(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fn, make, dyn", [_param(c) for c in WINDOWS])
def test_window(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("fn, make, dyn", [_param(c) for c in STFT])
def test_stft(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any,
              request: pytest.FixtureRequest) -> None:
    torch.manual_seed(0)
    check(fn, make(), tmp_path, dyn, atol=1e-3, rtol=1e-3, no_redraw=NO_REDRAW.get(request.node.callspec.id))


class Spectrogram(nn.Module):
    """torchaudio-style: the window is a registered buffer, the power a pow of abs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", torch.hamming_window(50))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(wave, 64, 20, 50, self.window, return_complex=True, pad_mode="constant")
        return spec.abs().pow(2.0)


def test_spectrogram_window_buffer(tmp_path: Any) -> None:
    torch.manual_seed(0)
    export_and_check(Spectrogram(), (randn(2, 333),), tmp_path, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("fn, make, message", [
    pytest.param(lambda z: fft.ifft(z), lambda: (crandn(2, 8),), r"norm='backward' along a dynamic axis",
                 id="scale_on_dynamic_axis"),
    pytest.param(lambda a: torch.stft(a, 16, 4, 8, hann(8), center=False, align_to_window=True, return_complex=True),
                 lambda: (randn(2, 40),), "stft with align_to_window=True", id="align_to_window"),
    pytest.param(lambda s: torch.istft(s, 16, 4, window=hann(16), return_complex=True, onesided=False),
                 lambda: (_spec(1, 64, 16, 4, onesided=False),), "istft to a complex signal", id="istft_complex"),
])
def test_spectral_refused(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], message: str,
                          tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    target = TractNNEF.latest().with_dynamic_axes({"in0": {1: "N"}})
    with pytest.raises(T2NErrorNotImplemented, match=message):
        export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=["in0"])


def test_fft_refused_by_strict_nnef(tmp_path: Any) -> None:
    with pytest.raises(T2NErrorStrictNNEFSpec, match="needs the tract registry 'tract_core' \\(for tract_core_fft\\)"):
        export_and_check(Fn(lambda x: fft.rfft(x).abs()), (randn(8),), tmp_path, target=KhronosNNEF.latest())
