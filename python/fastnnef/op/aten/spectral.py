"""Spectral ops: torch.fft (fft/ifft, rfft/irfft, hfft/ihfft and their 2-D / n-D forms,
fftfreq/rfftfreq, fftshift/ifftshift), stft/istft and the window functions.

Complex values are real tensors with a trailing (re, im) axis (op/aten/complex.py), which
is what ``tract_core_fft(input, axis, inverse)`` and ``tract_core_stft(input, axis, frame,
stride, window)`` take. tract's transforms are unnormalized (its inverse FFT does not
divide by n), so torch's ``norm`` is a scale applied after them; transforms over several
axes chain one ``tract_core_fft`` per axis. A real-to-complex transform feeds a zero
imaginary part and keeps the first n//2+1 bins; a complex-to-real one rebuilds the
Hermitian half (conjugated, reversed bins), runs the inverse FFT and keeps the real part
(which drops the imaginary parts of the DC and Nyquist bins, as torch does).

Windows and frequencies are computed at export time by torch itself (their sizes are
static) and stored as variables; istft's window envelope is summed in the graph, since
the frame count may be dynamic.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastnnef.dim import Size
from fastnnef.nnef.graph import NTensor, Tuple
from fastnnef.nnef.shapes import is_static, plus, times
from fastnnef.op.aten import indexing
from fastnnef.op.aten._common import torch_dtype
from fastnnef.op.aten.complex import (
    conjugate,
    is_complex,
    logical_rank,
    part,
    to_complex,
)
from fastnnef.op.context import OpContext
from fastnnef.op.registry import handler

_NORMS = ("backward", "forward", "ortho")


# --- shared steps -----------------------------------------------------------------------------
def _as_complex(ctx: OpContext, x: NTensor, index: int = 0) -> NTensor:
    """Node input ``index`` as a complex value in the output's part dtype."""
    x = ctx.cast(x, ctx.out_dtype())
    return x if is_complex(ctx, index) else to_complex(ctx, x)


def _length(ctx: OpContext, t: NTensor, axis: int, what: str) -> int:
    ctx.static(t, [axis], what)
    return int(t.shape[axis])


def _resize(ctx: OpContext, t: NTensor, axis: int, n: int, tag: str) -> NTensor:
    """``t`` cut or zero-padded to ``n`` along ``axis`` (torch's signal size ``n`` / ``s``)."""
    length = _length(ctx, t, axis, "an FFT with a signal size")
    if n < 1:
        raise ctx.unsupported(f"FFT signal size {n}")
    if n == length:
        return t
    if n < length:
        return ctx.tmp("slice", [t], {"axes": [axis], "begin": [0], "end": [n]}, suffix=f"cut{tag}")
    pads = [Tuple((0, n - length) if a == axis else (0, 0)) for a in range(t.rank)]
    shape = t.shape[:axis] + (n,) + t.shape[axis + 1:]
    return ctx.tmp("pad", [t], {"padding": pads, "border": "constant", "value": 0.0},
                   dtype=t.dtype, shape=shape, suffix=f"pad{tag}")


def _fft(ctx: OpContext, z: NTensor, axes: Sequence[int], inverse: bool) -> NTensor:
    """Unnormalized complex transforms along ``axes``, one tract_core_fft each."""
    for axis in axes:
        z = ctx.tmp("tract_core_fft", [z], {"axis": axis, "inverse": inverse}, suffix="ifft" if inverse else "fft")
    return z


def _norm_scale(ctx: OpContext, norm: str | None, n: int | None, inverse: bool) -> float:
    """torch's ``norm``: "backward" scales the inverse transforms by 1/n, "forward" the
    forward ones, "ortho" both by 1/sqrt(n). ``n`` is None when a signal axis is dynamic."""
    mode = norm or "backward"
    if mode not in _NORMS:
        raise ctx.unsupported(f"FFT norm {norm!r}", f"use one of {', '.join(_NORMS)}")
    if mode != "ortho" and (mode == "backward") != inverse:
        return 1.0
    if n is None:
        raise ctx.unsupported(
            f"norm={mode!r} along a dynamic axis (the scale depends on its length)",
            "make the transformed axes static, or scale the result yourself",
        )
    return n ** -0.5 if mode == "ortho" else 1.0 / n


def _volume(ctx: OpContext, t: NTensor, axes: Sequence[int]) -> int | None:
    """The number of samples over ``axes`` (None when one is dynamic)."""
    n = 1
    for axis in axes:
        if not is_static(t.shape[axis]):
            return None
        n *= int(t.shape[axis])
    return n


def _finish(ctx: OpContext, t: NTensor, scale: float) -> NTensor:
    if scale == 1.0:
        return ctx.emit("copy", [t])
    return ctx.emit("mul", [t, scale])


def _half_spectrum(ctx: OpContext, z: NTensor, axis: int) -> NTensor:
    """The first n//2+1 bins along ``axis`` (real-input transforms)."""
    n = _length(ctx, z, axis, "a one-sided FFT")
    return ctx.tmp("slice", [z], {"axes": [axis], "begin": [0], "end": [n // 2 + 1]}, suffix="onesided")


def _complex_to_real(ctx: OpContext, z: NTensor, axis: int, n: int) -> NTensor:
    """Inverse FFT of a one-sided spectrum into ``n`` real samples (unnormalized): bins
    n//2+1..n-1 are the conjugates of bins n-n//2-1..1."""
    half = n // 2 + 1
    z = _resize(ctx, z, axis, half, "half")
    mirror = n - half
    if mirror > 0:
        m = ctx.tmp("slice", [z], {"axes": [axis], "begin": [1], "end": [1 + mirror]}, suffix="mirror")
        m = ctx.tmp("tract_core_downsample", [m], {"axis": axis, "stride": -1, "modulo": 0}, suffix="reversed")
        z = ctx.tmp("concat", [[z, conjugate(ctx, m, final=False)]], {"axis": axis}, suffix="hermitian")
    return part(ctx, _fft(ctx, z, [axis], True), 0)


def _dims(ctx: OpContext, dims: list[int] | None, sizes: list[int] | None, rank: int) -> list[int]:
    """Transformed axes: ``dim``, else the last len(s) axes, else all (torch's rule)."""
    if dims is None:
        dims = list(range(rank - len(sizes), rank)) if sizes is not None else list(range(rank))
    axes = [ctx.axis(d, rank) for d in dims]
    if len(set(axes)) != len(axes):
        raise ctx.unsupported(f"FFT dims {dims} repeat an axis")
    if sizes is not None and len(sizes) != len(axes):
        raise ctx.unsupported(f"FFT sizes {sizes} and dims {dims} differ in length")
    return axes


def _sizes(ctx: OpContext, index: int) -> list[int] | None:
    """``SymInt? n`` or ``SymInt[]? s`` as a list (None: the input's sizes)."""
    return ctx.arg(index, "I?")


def _dim_list(ctx: OpContext, index: int) -> list[int] | None:
    return ctx.arg(index, "I?")


# --- torch.fft ------------------------------------------------------------------------------
def _c2c(ctx: OpContext, x: NTensor, inverse: bool) -> NTensor:
    """fft / ifft / fft2 / ifft2 / fftn / ifftn."""
    sizes, norm = _sizes(ctx, 1), ctx.arg(3, "s?")
    axes = _dims(ctx, _dim_list(ctx, 2), sizes, logical_rank(ctx))
    z = _as_complex(ctx, x)
    for k, axis in enumerate(axes):
        if sizes is not None:
            z = _resize(ctx, z, axis, sizes[k], str(k))
    return _finish(ctx, _fft(ctx, z, axes, inverse), _norm_scale(ctx, norm, _volume(ctx, z, axes), inverse))


def _r2c(ctx: OpContext, x: NTensor, inverse: bool) -> NTensor:
    """rfft / rfft2 / rfftn (and ihfft, their conjugate with the inverse's scaling): the
    last transformed axis keeps n//2+1 bins."""
    if is_complex(ctx, 0):
        raise ctx.unsupported(f"{ctx.kind} of a complex tensor", "torch only takes real input here")
    sizes, norm = _sizes(ctx, 1), ctx.arg(3, "s?")
    axes = _dims(ctx, _dim_list(ctx, 2), sizes, logical_rank(ctx))
    x = ctx.cast(x, ctx.out_dtype())
    for k, axis in enumerate(axes):
        if sizes is not None:
            x = _resize(ctx, x, axis, sizes[k], str(k))
    z = _half_spectrum(ctx, _fft(ctx, to_complex(ctx, x), axes, False), axes[-1])
    scale = _norm_scale(ctx, norm, _volume(ctx, x, axes), inverse)
    if inverse:  # ihfft = conj(rfft) / n
        z = conjugate(ctx, z, final=False)
    return _finish(ctx, z, scale)


def _c2r(ctx: OpContext, z: NTensor, inverse: bool) -> NTensor:
    """irfft / irfft2 / irfftn (and hfft: the conjugate input, the forward's scaling): the
    other axes get complex inverse transforms, the last one a complex-to-real one."""
    sizes, norm = _sizes(ctx, 1), ctx.arg(3, "s?")
    axes = _dims(ctx, _dim_list(ctx, 2), sizes, logical_rank(ctx))
    z = _as_complex(ctx, z)
    if not inverse:  # hfft(x) = irfft(conj(x)) scaled as a forward transform
        z = conjugate(ctx, z, final=False)
    last = axes[-1]
    n = sizes[-1] if sizes is not None else 2 * (_length(ctx, z, last, "an inverse real FFT") - 1)
    if n < 1:
        raise ctx.unsupported(f"inverse real FFT into {n} samples", "give the output length n")
    for k, axis in enumerate(axes[:-1]):
        if sizes is not None:
            z = _resize(ctx, z, axis, sizes[k], str(k))
    z = _fft(ctx, z, axes[:-1], True)
    other = _volume(ctx, z, axes[:-1])
    x = _complex_to_real(ctx, z, last, n)
    return _finish(ctx, x, _norm_scale(ctx, norm, None if other is None else other * n, inverse))


_FFT_ARGS = "t _ _ _"


@handler("aten::fft_fft", "aten::fft_fft2", "aten::fft_fftn", args=_FFT_ARGS, complex=True)
def fft_fft(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::fft_fft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also fft2/fftn: SymInt[1]? s, int[1]? dim)"""  # noqa: E501
    return _c2c(ctx, x, inverse=False)


@handler("aten::fft_ifft", "aten::fft_ifft2", "aten::fft_ifftn", args=_FFT_ARGS, complex=True)
def fft_ifft(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::fft_ifft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also ifft2/ifftn)"""
    return _c2c(ctx, x, inverse=True)


@handler("aten::fft_rfft", "aten::fft_rfft2", "aten::fft_rfftn", args=_FFT_ARGS, complex=True)
def fft_rfft(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::fft_rfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also rfft2/rfftn)"""
    return _r2c(ctx, x, inverse=False)


@handler("aten::fft_ihfft", "aten::fft_ihfft2", "aten::fft_ihfftn", args=_FFT_ARGS, complex=True)
def fft_ihfft(ctx: OpContext, x: NTensor) -> NTensor:
    """aten::fft_ihfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also ihfft2/ihfftn)"""
    return _r2c(ctx, x, inverse=True)


@handler("aten::fft_irfft", "aten::fft_irfft2", "aten::fft_irfftn", args=_FFT_ARGS, complex=True)
def fft_irfft(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::fft_irfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also irfft2/irfftn)"""
    return _c2r(ctx, z, inverse=True)


@handler("aten::fft_hfft", "aten::fft_hfft2", "aten::fft_hfftn", args=_FFT_ARGS, complex=True)
def fft_hfft(ctx: OpContext, z: NTensor) -> NTensor:
    """aten::fft_hfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor  (also hfft2/hfftn)"""
    return _c2r(ctx, z, inverse=False)


@handler("aten::fft_fftfreq", "aten::fft_rfftfreq", args="i f *")
def fft_fftfreq(ctx: OpContext, n: int, d: float) -> NTensor:
    """aten::fft_fftfreq(int n, float d=1., *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (also rfftfreq)"""  # noqa: E501
    kind = ctx.kind.split("::")[1]
    dtype = ctx.out_torch_dtype()
    data = getattr(torch.fft, kind[len("fft_"):])(n, d, dtype=dtype)
    return ctx.constant(data, label=f"{kind}_{n}_{d}_{dtype}".replace(".", "_"))


def _shift(ctx: OpContext, x: NTensor, dims: list[int] | None, inverse: bool) -> NTensor:
    """Roll each axis by n//2 (fftshift) or -(n//2) (ifftshift)."""
    rank = logical_rank(ctx)
    axes = [ctx.axis(d, rank) for d in dims] if dims is not None else list(range(rank))
    shifts = []
    for axis in axes:
        n = _length(ctx, x, axis, "fftshift")
        shifts.append(-(n // 2) if inverse else n // 2)
    return indexing.roll(ctx, x, shifts, axes)


@handler("aten::fft_fftshift", args="t I?", complex=True)
def fft_fftshift(ctx: OpContext, x: NTensor, dims: list[int] | None) -> NTensor:
    """aten::fft_fftshift(Tensor self, int[1]? dim=None) -> Tensor"""
    return _shift(ctx, x, dims, inverse=False)


@handler("aten::fft_ifftshift", args="t I?", complex=True)
def fft_ifftshift(ctx: OpContext, x: NTensor, dims: list[int] | None) -> NTensor:
    """aten::fft_ifftshift(Tensor self, int[1]? dim=None) -> Tensor"""
    return _shift(ctx, x, dims, inverse=True)


# --- windows --------------------------------------------------------------------------------
@handler("aten::hann_window", "aten::hamming_window", "aten::blackman_window", "aten::bartlett_window",
         "aten::kaiser_window", args="i *")
def window(ctx: OpContext, n: int) -> NTensor:
    """aten::hann_window.periodic(int window_length, bool periodic, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor  (every window; hamming's alpha/beta, kaiser's beta)"""  # noqa: E501
    kind = ctx.kind.split("::")[1]
    # The overloads differ by what comes between the length and the 4 trailing options:
    # periodic, then hamming's alpha and beta or kaiser's beta.
    extra = [ctx.arg(i, "b" if i == 1 else "f") for i in range(1, ctx.n_inputs - 4)]
    dtype = ctx.out_torch_dtype()
    data = getattr(torch, kind)(n, *extra, dtype=dtype)
    label = "_".join([kind, str(n), *map(str, extra), str(dtype)]).replace(".", "_").replace("-", "m")
    return ctx.constant(data, label=label)


# --- stft / istft -----------------------------------------------------------------------------
def _frames(n: Size, frame: int, hop: int) -> Size:
    """Frames of ``frame`` samples every ``hop`` in ``n`` samples (tract's formula)."""
    return (n - frame) // hop + 1


def _window_input(ctx: OpContext, index: int, n_fft: int, win_length: int, dtype: str) -> NTensor | None:
    """The analysis window (tract_core_stft takes it as a tensor argument); None for
    torch's default, a rectangular window of n_fft."""
    window = ctx.arg(index, "v")
    if window is None:
        if win_length == n_fft:
            return None
        return ctx.constant(torch.ones(win_length, dtype=torch_dtype(dtype)),
                            label=f"stft_rect_window_{win_length}_{dtype}")
    if not ctx.is_tensor(index) or ctx.traced_shape(index) != (win_length,):
        raise ctx.unsupported(f"an STFT window that is not a 1-D tensor of win_length={win_length}")
    return window


@handler("aten::stft", args="t i i? i? _ b b? b? b?", complex=True)
def stft(
    ctx: OpContext, x: NTensor, n_fft: int, hop: int | None, win_length: int | None, normalized: bool,
    onesided: bool | None, _return_complex: bool | None, align: bool | None,
) -> NTensor:
    """aten::stft(Tensor self, int n_fft, int? hop_length=None, int? win_length=None, Tensor? window=None, bool normalized=False, bool? onesided=None, bool? return_complex=None, bool? align_to_window=None) -> Tensor  (also stft.center)"""  # noqa: E501
    # torch.stft pads the signal itself before this overload
    return _stft(ctx, x, n_fft, hop, win_length, False, "", normalized, onesided, align)


@handler("aten::stft", args="t i i? i? _ b s b b? b? b?", complex=True, overload="center")
def stft_center(
    ctx: OpContext, x: NTensor, n_fft: int, hop: int | None, win_length: int | None, center: bool,
    pad_mode: str, normalized: bool, onesided: bool | None, _return_complex: bool | None, align: bool | None,
) -> NTensor:
    """aten::stft.center(Tensor self, int n_fft, int? hop_length=None, int? win_length=None, Tensor? window=None, bool center=True, str pad_mode="reflect", bool normalized=False, bool? onesided=None, bool? return_complex=None, bool? align_to_window=None) -> Tensor"""  # noqa: E501
    return _stft(ctx, x, n_fft, hop, win_length, center, pad_mode, normalized, onesided, align)


def _stft(
    ctx: OpContext, x: NTensor, n_fft: int, hop: int | None, win_length: int | None, center: bool,
    pad_mode: str, normalized: bool, onesided: bool | None, align: bool | None,
) -> NTensor:
    if align:
        raise ctx.unsupported("stft with align_to_window=True")
    hop = hop or n_fft // 4
    win_length = win_length or n_fft
    rank = logical_rank(ctx)
    if rank not in (1, 2):
        raise ctx.unsupported(f"stft of a rank-{rank} signal", "torch takes (L) or (B, L)")
    axis = rank - 1
    z = _as_complex(ctx, x)
    if center:
        z = _center_pad(ctx, z, axis, n_fft // 2, pad_mode)
    window = _window_input(ctx, 4, n_fft, win_length, z.dtype)
    length = z.shape[axis]
    if is_static(length) and int(length) < n_fft:
        raise ctx.unsupported(f"stft with n_fft={n_fft} longer than the signal ({length})")
    if window is not None and is_complex(ctx, 4):
        raise ctx.unsupported("stft with a complex window")
    framed = z.shape[:axis] + (_frames(length, n_fft, hop), n_fft, 2)
    attrs: dict[str, object] = {"axis": axis, "frame": n_fft, "stride": hop}
    if window is None or (ctx.is_variable(window) and window.dtype == z.dtype):
        if window is not None:
            attrs["window"] = window
        spec = ctx.tmp("tract_core_stft", [z], attrs, dtype=z.dtype, shape=framed, suffix="frames")
    else:
        spec = _computed_window_stft(ctx, z, attrs, window, framed)
    if onesided is None:
        onesided = not is_complex(ctx, 0)
    if onesided:
        spec = _half_spectrum(ctx, spec, axis + 1)
    perm = list(range(axis)) + [axis + 1, axis, axis + 2]
    spec = ctx.tmp("transpose", [spec], {"axes": perm}, suffix="bins_first")
    return _finish(ctx, spec, n_fft ** -0.5 if normalized else 1.0)


def _computed_window_stft(
    ctx: OpContext, z: NTensor, attrs: dict[str, object], window: NTensor, framed: Sequence[Size],
) -> NTensor:
    """STFT with a window the graph computes (tract_core_stft only takes a constant one):
    the unwindowed spectra, back to frames by an inverse FFT, windowed, transformed again."""
    axis, n_fft = int(attrs["axis"]), int(attrs["frame"])  # type: ignore[call-overload]
    raw = ctx.tmp("tract_core_stft", [z], attrs, dtype=z.dtype, shape=framed, suffix="raw")
    frames = _fft(ctx, raw, [axis + 1], True)  # n_fft times the frames
    w = ctx.cast(window, z.dtype)
    size = _length(ctx, w, 0, "an STFT window")
    if size < n_fft:  # centered in the frame, as torch and tract do
        left = (n_fft - size) // 2
        w = ctx.tmp("pad", [w], {"padding": [Tuple((left, n_fft - size - left))], "border": "constant", "value": 0.0},
                    dtype=w.dtype, shape=(n_fft,), suffix="window_pad")
    w = ctx.tmp("mul", [w, 1.0 / n_fft], suffix="window_scaled")
    w = ctx.to_rank(ctx.tmp("unsqueeze", [w], {"axes": [1]}, suffix="window_pair"), len(framed))
    return _fft(ctx, ctx.tmp("mul", [frames, w], suffix="windowed"), [axis + 1], False)


def _center_pad(ctx: OpContext, z: NTensor, axis: int, pad: int, mode: str) -> NTensor:
    border = {"reflect": "reflect", "constant": "constant", "replicate": "replicated"}.get(mode)
    if border is None:
        raise ctx.unsupported(f"stft pad_mode={mode!r}", "use reflect, constant or replicate")
    pads = [Tuple((pad, pad) if a == axis else (0, 0)) for a in range(z.rank)]
    shape = z.shape[:axis] + (plus(z.shape[axis], 2 * pad),) + z.shape[axis + 1:]
    attrs: dict[str, object] = {"padding": pads, "border": border}
    if border == "constant":
        attrs["value"] = 0.0
    return ctx.tmp("pad", [z], attrs, dtype=z.dtype, shape=shape, suffix="centered")


def _overlap_add(ctx: OpContext, frames: NTensor, hop: int, tag: str) -> NTensor:
    """Sum frames ``[..., T, n]`` placed every ``hop`` samples into ``[..., (T+R-1)*hop]``
    (R = ceil(n / hop)): each frame cut in R blocks of ``hop``, block r shifted by r
    frames. Only pads and adds, so T may be dynamic."""
    lead, t, n = frames.shape[:-2], frames.shape[-2], int(frames.shape[-1])
    r = -(-n // hop)
    axis = frames.rank - 1
    if r * hop > n:
        pads = [Tuple((0, r * hop - n) if a == axis else (0, 0)) for a in range(frames.rank)]
        frames = ctx.tmp("pad", [frames], {"padding": pads, "border": "constant", "value": 0.0},
                         dtype=frames.dtype, shape=lead + (t, r * hop), suffix=f"{tag}_blocks_pad")
    blocks = ctx.tmp("reshape", [frames], {"shape": [r, hop], "axis_start": axis, "axis_count": 1},
                     dtype=frames.dtype, shape=lead + (t, r, hop), suffix=f"{tag}_blocks")
    total: NTensor | None = None
    for k in range(r):
        block = ctx.tmp("slice", [blocks], {"axes": [axis], "begin": [k], "end": [k + 1]}, suffix=f"{tag}_block")
        pads = [Tuple((k, r - 1 - k) if a == axis - 1 else (0, 0)) for a in range(blocks.rank)]
        shifted = ctx.tmp("pad", [block], {"padding": pads, "border": "constant", "value": 0.0},
                          dtype=frames.dtype, shape=lead + (plus(t, r - 1), 1, hop), suffix=f"{tag}_shifted")
        total = shifted if total is None else ctx.tmp("add", [total, shifted], suffix=f"{tag}_sum")
    assert total is not None
    length = times(plus(t, r - 1), hop)
    return ctx.tmp("reshape", [total], {"shape": [length], "axis_start": axis - 1, "axis_count": 3},
                   dtype=frames.dtype, shape=lead + (length,), suffix=f"{tag}_signal")


@handler("aten::istft", args="t i i? i? _ b b b? i? b", complex=True)
def istft(
    ctx: OpContext, z: NTensor, n_fft: int, hop: int | None, win_length: int | None, center: bool,
    normalized: bool, onesided: bool | None, length: int | None, return_complex: bool,
) -> NTensor:
    """aten::istft(Tensor self, int n_fft, int? hop_length=None, int? win_length=None, Tensor? window=None, bool center=True, bool normalized=False, bool? onesided=None, int? length=None, bool return_complex=False) -> Tensor"""  # noqa: E501
    if return_complex or not is_complex(ctx, 0):
        raise ctx.unsupported("istft to a complex signal or of a real spectrum",
                              "pass a complex spectrum, return_complex=False")
    hop = hop or n_fft // 4
    win_length = win_length or n_fft
    rank = logical_rank(ctx)
    if rank not in (2, 3):
        raise ctx.unsupported(f"istft of a rank-{rank} spectrum", "torch takes (F, T) or (B, F, T)")
    freq, time = rank - 2, rank - 1
    bins = _length(ctx, z, freq, "istft")
    if onesided is None:
        onesided = bins != n_fft
    z = ctx.cast(z, ctx.out_dtype())
    if onesided:
        frames = _complex_to_real(ctx, z, freq, n_fft)
    else:
        frames = part(ctx, _fft(ctx, z, [freq], True), 0)
    # Window, centered in n_fft (default: rectangular), with the inverse FFT's 1/n_fft and
    # the normalization's sqrt(n_fft) folded in.
    window = _window_input(ctx, 4, n_fft, win_length, frames.dtype)
    if window is None:
        window = ctx.constant(torch.ones(n_fft, dtype=torch_dtype(frames.dtype)),
                              label=f"istft_rect_window_{n_fft}_{frames.dtype}")
    window = ctx.cast(window, frames.dtype)
    if win_length < n_fft:
        left = (n_fft - win_length) // 2
        window = ctx.tmp("pad", [window], {"padding": [Tuple((left, n_fft - win_length - left))], "border": "constant",
                                           "value": 0.0}, dtype=window.dtype, shape=(n_fft,), suffix="window_pad")
    gain = (n_fft ** 0.5 if normalized else 1.0) / n_fft
    weights = ctx.tmp("unsqueeze", [ctx.tmp("mul", [window, gain], suffix="window_gain")], {"axes": [1]},
                      suffix="window_col")
    frames = ctx.tmp("mul", [frames, ctx.to_rank(weights, frames.rank)], suffix="windowed")
    by_time = list(range(freq)) + [time, freq]
    signal = _overlap_add(ctx, ctx.tmp("transpose", [frames], {"axes": by_time}, suffix="by_time"), hop, "ola")
    # The squared window summed the same way, to undo the overlap's gain.
    square = ctx.tmp("unsqueeze", [ctx.tmp("sqr", [window], suffix="window_sq")], {"axes": [0]}, suffix="window_row")
    n_frames = z.shape[time]
    window_frames = ctx.tmp("tract_core_broadcast", [square], {"shape": [n_frames, n_fft]}, suffix="window_frames")
    envelope = _overlap_add(ctx, window_frames, hop, "envelope")
    expected = plus(times(plus(n_frames, -1), hop), n_fft)
    start = n_fft // 2 if center else 0
    if length is not None:
        end: Size = start + length
    else:
        end = plus(expected, -(n_fft // 2)) if center else expected
    static_end = is_static(end) and is_static(expected)
    stop = min(int(end), int(expected)) if static_end else end
    cut = {"axes": [freq], "begin": [start], "end": [stop]}
    trimmed = ctx.tmp("slice", [signal], cut, suffix="trimmed")
    envelope_trimmed = ctx.tmp("slice", [envelope], {**cut, "axes": [0]}, suffix="envelope_trimmed")
    y = ctx.tmp("div", [trimmed, ctx.to_rank(envelope_trimmed, freq + 1)], suffix="normalized")
    if static_end and int(end) > int(expected):  # a requested length past the frames: zeros
        pads = [Tuple((0, int(end) - int(expected)) if a == freq else (0, 0)) for a in range(y.rank)]
        return ctx.emit("pad", [y], {"padding": pads, "border": "constant", "value": 0.0})
    return ctx.emit("copy", [y])
