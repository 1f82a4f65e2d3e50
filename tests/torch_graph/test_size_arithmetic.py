"""Sizes computed from shapes (window padding, patch sizes, codec padding, attention
scales, position ranges) export folded for static inputs and, where tract can express
them, symbolic for dynamic axes: each artefact is run by tract at the traced size and at
two others, and compared with torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NError
from fastnnef.inference_target import TractNNEF
from tests.helpers import export_and_check


class SwinWindowPad(nn.Module):
    """Shifted-window vision transformers: pad H and W up to a multiple of the window,
    then cut the image into windows (``(ws - W % ws) % ws``, ``Hp // ws``)."""

    def __init__(self, window: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.window = window
        self.proj = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        ws = self.window
        pad_r = (ws - w % ws) % ws
        pad_b = (ws - h % ws) % ws
        x = F.pad(self.proj(x), (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = x.shape[1], x.shape[2]
        x = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, ws * ws, c)


class CodecPadding(nn.Module):
    """Neural audio codecs: pad the end of the signal so that a strided convolution sees
    whole frames (``ceil`` of a fractional frame count), as EnCodec writes it, with the
    kernel size and total padding held in integer buffers."""

    def __init__(self, kernel: int = 7, stride: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stride = stride
        self.register_buffer("kernel_size", torch.tensor(kernel), persistent=False)
        self.register_buffer("padding_total", torch.tensor(kernel - stride), persistent=False)
        self.conv = nn.Conv1d(2, 4, kernel, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        extra = ideal_length - length
        x = F.pad(x, (self.padding_total, extra))
        return self.conv(x)


class CodecReflectPadding(CodecPadding):
    """The same padding by reflection or replication at the ends (EnCodec's pad_mode)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        n_frames = torch.ceil((length - self.kernel_size + self.padding_total) / self.stride + 1).to(torch.int64) - 1
        extra = n_frames * self.stride + self.kernel_size - self.padding_total - length
        right = self.padding_total // 2
        return self.conv(F.pad(x, (self.padding_total - right, right + extra), mode=self.mode))


class CodecPaddingMath(nn.Module):
    """The same padding with Python's ``math.ceil`` (DAC-style code)."""

    def __init__(self, kernel: int = 7, stride: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.kernel, self.stride = kernel, stride
        self.conv = nn.Conv1d(2, 4, kernel, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padding_total = self.kernel - self.stride
        length = x.shape[-1]
        n_frames = (length - self.kernel + padding_total) / self.stride + 1
        ideal = (math.ceil(n_frames) - 1) * self.stride + (self.kernel - padding_total)
        return self.conv(F.pad(x, (padding_total, ideal - length)))


def _ceil_to(size: int, multiple: int) -> int:
    """As mobile vision transformers round a size up: torch.ceil while tracing (a traced
    size is a tensor then), math.ceil in eager mode."""
    if torch.jit.is_tracing():
        return torch.ceil(size / multiple).mul(multiple).to(torch.int64)  # type: ignore[return-value]
    return int(math.ceil(size / multiple) * multiple)


class PatchResize(nn.Module):
    """Mobile vision transformers: resize to a multiple of the patch size, then unfold
    into patches."""

    def __init__(self, patch: int = 2) -> None:
        super().__init__()
        self.patch = patch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        ph = pw = self.patch
        new_h, new_w = _ceil_to(h, ph), _ceil_to(w, pw)
        if new_h != h or new_w != w:
            x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False)
        n_h, n_w = new_h // ph, new_w // pw
        x = x.reshape(b * c * n_h, ph, n_w, pw).transpose(1, 2)
        return x.reshape(b, c, n_h * n_w, ph * pw)


class PatchResizeMath(nn.Module):
    """The same rounding with Python's math.ceil also while tracing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new_w = int(math.ceil(x.shape[-1] / 2) * 2)
        return F.pad(x, (0, new_w - x.shape[-1])).reshape(x.shape[0], -1, 2)


class DisentangledScale(nn.Module):
    """Disentangled-attention encoders: the attention scale from the head size,
    ``torch.sqrt(torch.tensor(size, dtype=float) * scale_factor)`` and ``1/math.sqrt``."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)
        scores = torch.matmul(q, k.transpose(-1, -2)) / scale.to(dtype=q.dtype)
        return scores * (1 / math.sqrt(q.size(-1) * 2))


class SizeScale(nn.Module):
    """A scale from a dynamic size, as a tensor (mean over a length written by hand)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.tensor(x.size(1), dtype=torch.float32)
        return x.sum(1) / torch.sqrt(n)


class PositionRange(nn.Module):
    """Llama-style positions: ``arange(past, past + S)`` with a cache of ``past`` entries."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        past = cache.shape[1]
        pos = torch.arange(past, past + x.shape[1])
        return x * pos.unsqueeze(-1).float()


class SizeBounds(nn.Module):
    """zeros/full/slices whose sizes are sums, products and differences of sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        pad = torch.zeros(x.shape[0], s + 2, x.shape[2])
        grid = torch.full((2 * s - 1, 2), 0.5)
        y = torch.cat([x, x], 1)[:, s - 1 : 2 * s - 1]
        return pad[:, 1 : s + 1] + y + grid[: s].sum() + grid[s - 1 :].sum()


class TensorBounds(nn.Module):
    """An arange whose end is a size held in a tensor (``torch.tensor(S) * 2``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.tensor(x.shape[1]) * 2
        steps = torch.arange(0, n, 2)
        return x + steps.unsqueeze(-1)


class ClampedSlice(nn.Module):
    """A slice end past the traced size of a dynamic axis: torch clamps it to the size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :10] * 2


class SizeMax(nn.Module):
    """``max`` of a size and a constant, as a padding (Python's max on sizes)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        extra = max(8 - x.shape[-1], 0)
        return F.pad(x, (0, extra))


class CausalMask(nn.Module):
    """A causal mask over a cache of P entries and S new ones (``full((S, P + S))``,
    ``triu(diagonal=P + 1)``), and a size product (``zeros(S * P)``)."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        s, p = x.shape[1], cache.shape[1]
        mask = torch.triu(torch.full((s, p + s), float("-inf")), diagonal=p + 1)
        keep = torch.exp(mask).sum(-1, keepdim=True)  # how many positions each row sees
        return x[0] * keep + torch.zeros(s * p).sum()


class TensorSliceEnd(nn.Module):
    """A slice end held in a tensor computed from a size (``x[:, :torch.tensor(S) - 1]``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.tensor(x.shape[1]) - 1
        return x[:, :n] + x[:, 1:]


class RelativePositions(nn.Module):
    """Positions scaled by a size (``arange(S) / S``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        return x + (torch.arange(s, dtype=torch.float32) / s).unsqueeze(-1)


class LastRows(nn.Module):
    """The last S rows of a buffer of P + S (``y[:, -x.size(1):]``, a bound from the end)."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        total = x.shape[1] + cache.shape[1]
        return torch.ones(1, total, 4).cumsum(1)[:, -x.shape[1] :] * x


class StridedFrames(nn.Module):
    """A strided convolution, then its frames grouped by 4 (padded up): the frame count
    ``(L - 3) / 2 + 1`` is a size expression the padding builds on."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(2, 3, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        frames = y.shape[-1]
        y = F.pad(y, (0, (4 - frames % 4) % 4))
        return y.reshape(y.shape[0], 3, -1, 4).sum(-1)


class HalveAxis(nn.Module):
    """A dynamic axis split in halves (``view(b, s // 2, 2 * c)``): right for an even S
    only, which tract cannot prove, so a dynamic export refuses it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        return x.reshape(b, s // 2, 2 * c) * 2


Case = tuple[Callable[[], nn.Module], Callable[[int], Sequence[torch.Tensor]], dict[str, dict[int, str]], int]

# name -> (model, inputs at length n, dynamic axes, traced length)
CASES: dict[str, Case] = {
    "swin-window-pad": (SwinWindowPad, lambda n: [torch.randn(1, n, n + 1, 3)], {"x": {1: "H", 2: "W"}}, 6),
    "codec-padding": (CodecPadding, lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 20),
    "codec-reflect": (lambda: CodecReflectPadding("reflect"), lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 20),
    "codec-replicate": (
        lambda: CodecReflectPadding("replicate"), lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 20,
    ),
    "codec-padding-math": (CodecPaddingMath, lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 20),
    "patch-resize": (PatchResize, lambda n: [torch.randn(1, 2, n, n + 1)], {"x": {2: "H", 3: "W"}}, 5),
    "patch-resize-math": (PatchResizeMath, lambda n: [torch.randn(1, 2, n)], {"x": {2: "W"}}, 5),
    "disentangled-scale": (
        DisentangledScale, lambda n: [torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)],
        {"q": {2: "S"}, "k": {2: "S"}}, 5,
    ),
    "size-scale": (SizeScale, lambda n: [torch.randn(1, n, 4)], {"x": {1: "S"}}, 5),
    "position-range": (
        PositionRange, lambda n: [torch.randn(1, n, 4), torch.randn(1, n + 3, 4)],
        {"x": {1: "S"}, "cache": {1: "P"}}, 5,
    ),
    "size-bounds": (SizeBounds, lambda n: [torch.randn(2, n, 3)], {"x": {1: "S"}}, 5),
    "tensor-bounds": (TensorBounds, lambda n: [torch.randn(1, n, 4)], {"x": {1: "S"}}, 5),
    "clamped-slice": (ClampedSlice, lambda n: [torch.randn(1, n, 3)], {"x": {1: "S"}}, 5),
    "size-max": (SizeMax, lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 5),
    "causal-mask": (
        CausalMask, lambda n: [torch.randn(1, n, 4), torch.randn(1, n + 2, 4)], {"x": {1: "S"}, "cache": {1: "P"}}, 5,
    ),
    "tensor-slice-end": (TensorSliceEnd, lambda n: [torch.randn(1, n, 3)], {"x": {1: "S"}}, 5),
    "relative-positions": (RelativePositions, lambda n: [torch.randn(1, n, 3)], {"x": {1: "S"}}, 5),
    "last-rows": (
        LastRows, lambda n: [torch.randn(1, n, 4), torch.randn(1, n + 2, 4)], {"x": {1: "S"}, "cache": {1: "P"}}, 5,
    ),
    "strided-frames": (StridedFrames, lambda n: [torch.randn(1, 2, n)], {"x": {2: "L"}}, 17),
    "halve-axis": (HalveAxis, lambda n: [torch.randn(1, 2 * n, 3)], {"x": {1: "S"}}, 5),
}

# Sizes turned into Python numbers while traced (math.ceil): tracing freezes them at the
# traced value, so a dynamic export refuses them.
FROZEN = {"codec-padding-math", "patch-resize-math"}
# Sizes that decide a branch while traced (max of sizes, `if new_h != h`): the traced
# branch is exported with a warning; right at some lengths only, so not run at others.
# patch-resize then resizes to a size of a dynamic axis, which tract's resize refuses.
BRANCHED = {"size-max", "patch-resize"}
# What tract cannot express for a dynamic axis: refused, naming the op.
UNPROVABLE = {"halve-axis"}


# torch warns about torch.tensor(size) while tracing (a traced size is a tensor then), as
# disentangled-attention encoders write it.
COPY_WARNING = "ignore:To copy construct from a tensor"


@pytest.mark.filterwarnings(COPY_WARNING)
@pytest.mark.parametrize("name", sorted(CASES))
def test_static(name: str, tmp_path: Path) -> None:
    make, inputs, _axes, n = CASES[name]
    torch.manual_seed(1)
    export_and_check(make().eval(), tuple(inputs(n)), tmp_path, atol=1e-5)


@pytest.mark.filterwarnings(COPY_WARNING)
@pytest.mark.parametrize("name", sorted(set(CASES) - FROZEN - BRANCHED - UNPROVABLE))
def test_dynamic(name: str, tmp_path: Path) -> None:
    make, inputs, axes, n = CASES[name]
    model = make().eval()
    torch.manual_seed(1)
    target = TractNNEF.latest().with_dynamic_axes(axes)
    path = export_and_check(model, tuple(inputs(n)), tmp_path, target=target, input_names=list(axes), atol=1e-5)
    artefact = TractArtefact.load(path)
    for length in (n + 3, n + 6):
        args = inputs(length)
        with torch.no_grad():
            expected = model(*args)
        (got,) = artefact.run(args)
        assert got.shape == tuple(expected.shape), (length, got.shape, expected.shape)
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_dynamic_frozen_refused(name: str, tmp_path: Path) -> None:
    make, inputs, axes, n = CASES[name]
    target = TractNNEF.latest().with_dynamic_axes(axes)
    with pytest.raises(T2NError, match="frozen"):
        export_and_check(make().eval(), tuple(inputs(n)), tmp_path, target=target, input_names=list(axes))
    assert not (tmp_path / "model.nnef").exists()


def test_dynamic_branch_on_size_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make, inputs, axes, n = CASES["size-max"]
    target = TractNNEF.latest().with_dynamic_axes(axes)
    export_and_check(make().eval(), tuple(inputs(n)), tmp_path, target=target, input_names=list(axes))
    assert "takes the traced branch at every length" in caplog.text
    assert "max(8 - x.shape[-1], 0)" in caplog.text


def test_dynamic_resize_to_size_refused(tmp_path: Path) -> None:
    make, inputs, axes, n = CASES["patch-resize"]
    target = TractNNEF.latest().with_dynamic_axes(axes)
    with pytest.raises(T2NError, match="upsample_bilinear2d"):
        export_and_check(make().eval(), tuple(inputs(n)), tmp_path, target=target, input_names=list(axes))


class _TanhGelu(torch.autograd.Function):
    """A GELU written as a custom autograd function (its own backward), as some encoders do."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(1.702 * x)


class CustomGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _TanhGelu.apply(self.lin(x)) * 2


def test_custom_autograd_function_traced_through(tmp_path: Path) -> None:
    model = CustomGelu().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": {1: "S"}})
    path = export_and_check(model, (torch.randn(1, 5, 4),), tmp_path, target=target, input_names=["x"])
    artefact = TractArtefact.load(path)
    for length in (2, 9):
        x = torch.randn(1, length, 4)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(torch.from_numpy(artefact.run([x])[0]), expected, atol=1e-5, rtol=1e-5)


def test_dynamic_halving_refused(tmp_path: Path) -> None:
    make, inputs, axes, n = CASES["halve-axis"]
    target = TractNNEF.latest().with_dynamic_axes(axes)
    with pytest.raises(T2NError, match=r"aten::reshape .*3\*S elements into sizes that hold 6\*\(S/2\)"):
        export_and_check(make().eval(), tuple(inputs(n)), tmp_path, target=target, input_names=list(axes))


# --- the same patterns in transformers' models (tiny configs, random weights) -----------------
class _Hidden(nn.Module):
    """A transformers model with its last hidden state as the output."""

    def __init__(self, model: nn.Module, keyword: str = ""):
        super().__init__()
        self.model, self.keyword = model, keyword

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(**{self.keyword: x}) if self.keyword else self.model(x)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


def _encodec_encoder() -> nn.Module:
    from transformers import EncodecConfig, EncodecModel

    config = EncodecConfig(hidden_size=8, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2],
                           codebook_size=16, codebook_dim=8, audio_channels=1, num_lstm_layers=1)
    return _Hidden(EncodecModel(config).encoder)


def _swin() -> nn.Module:
    from transformers import SwinConfig, SwinModel

    config = SwinConfig(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=2)
    return _Hidden(SwinModel(config))


def _mobilevit() -> nn.Module:
    from transformers import MobileViTConfig, MobileViTModel

    config = MobileViTConfig(image_size=32, hidden_sizes=[16, 20, 24], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
                             num_attention_heads=2, patch_size=2)
    return _Hidden(MobileViTModel(config))


def _deberta_v2() -> nn.Module:
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32, max_position_embeddings=64, relative_attention=True,
                             position_buckets=8, pos_att_type=["p2c", "c2p"])
    return _Hidden(DebertaV2Model(config), "inputs_embeds")


# name -> (model, input at size n, traced size): odd sizes, so that the padding is taken.
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], torch.Tensor], int]] = {
    "encodec-encoder": (_encodec_encoder, lambda n: torch.randn(1, 1, n), 37),
    "swin": (_swin, lambda n: torch.randn(1, 3, 28, 4 * n), 7),
    "mobilevit": (_mobilevit, lambda n: torch.randn(1, 3, n, n), 36),
    "deberta-v2": (_deberta_v2, lambda n: torch.randn(1, n, 16), 7),
}


@pytest.mark.filterwarnings(COPY_WARNING)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformers_model_static(name: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    make, inputs, n = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    export_and_check(model, (inputs(n),), tmp_path, atol=1e-4)


# name -> (dynamic axis, two other sizes): DeBERTa-v2's scale (torch.sqrt(torch.tensor(size)
# * factor)) and relative positions; EnCodec's extra padding (torch.ceil of a frame count)
# by reflection.
DYNAMIC_MODELS = {"deberta-v2": ({1: "S"}, (5, 12)), "encodec-encoder": ({2: "L"}, (50, 64))}


@pytest.mark.filterwarnings(COPY_WARNING)
@pytest.mark.parametrize("name", sorted(DYNAMIC_MODELS))
def test_transformers_model_dynamic(name: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    make, inputs, n = MODELS[name]
    axes, lengths = DYNAMIC_MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    target = TractNNEF.latest().with_dynamic_axes({"x": axes})
    path = export_and_check(model, (inputs(n),), tmp_path, target=target, input_names=["x"], atol=1e-4)
    artefact = TractArtefact.load(path)
    for length in lengths:
        x = inputs(length)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(torch.from_numpy(artefact.run([x])[0]), expected, atol=1e-4, rtol=1e-4)
