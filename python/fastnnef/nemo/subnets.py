"""The subnets of a NeMo ASR model that fastnnef exports, and the model types it supports.

A CTC model (``EncDecCTCModel`` and its BPE form, FastConformer or other encoders) splits
into three artefacts, as torch_to_nnef_nemo splits it: the preprocessor (waveform and
lengths -> log-mel features and frame counts), the encoder (features -> encoded frames and
their counts) and the CTC decoder (encoded frames -> log-probabilities). Each subnet's
example inputs come from the one before it, run on a seeded waveform, so every trace sees
features of the shape and range real audio gives.

Transducer (RNNT, TDT, hybrid) and multitask (AED) models are refused with an error that
names the type: their decoders and joints are not exported yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from nemo.collections.asr.models import EncDecCTCModel
from nemo.core.classes.common import typecheck
from nemo.core.classes.modelPT import ModelPT
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented

#: Every subnet a supported model has, in the order they run (and are exported).
SUBNET_NAMES = ("preprocessor", "encoder", "decoder")

#: Dynamic axis symbols: one artefact per subnet, so each names its own.
BATCH, TIME = "B", "T"

#: The example waveform: two clips (the second shorter, so padding is traced too).
EXAMPLE_SECONDS = 1.0


@dataclass(frozen=True)
class Subnet:
    """One exported artefact: the traced module, its example inputs and IO."""

    name: str
    module: nn.Module
    example: tuple[torch.Tensor, ...]
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    extensions: list[str] = field(default_factory=list)


class KeywordCall(nn.Module):
    """A NeMo module called the way its export calls it: ``forward_for_export`` where it has
    one (the FastConformer encoder drops its streaming caches there), with keyword arguments
    (NeMo's typed ``forward`` refuses positional ones), returning a tuple."""

    def __init__(self, module: nn.Module, input_names: list[str]):
        super().__init__()
        self.module = module
        self.input_names = input_names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kwargs = dict(zip(self.input_names, args))
        export_forward = getattr(self.module, "forward_for_export", None)
        out = export_forward(**kwargs) if export_forward is not None else self.module(**kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def check_supported(model: Any) -> None:
    """Raise a clear error unless ``model`` is a NeMo CTC ASR model fastnnef exports."""
    if not isinstance(model, ModelPT):
        raise T2NErrorInvalidArgument(
            f"asr_model must be a NeMo ASR model (an EncDecCTCModel), got a {type(model).__name__}"
        )
    if not isinstance(model, EncDecCTCModel):
        raise T2NErrorNotImplemented(
            f"NeMo model type {type(model).__name__} is not supported: fastnnef exports CTC models "
            "(EncDecCTCModel, EncDecCTCModelBPE, e.g. FastConformer CTC); transducer (RNNT, TDT, hybrid) "
            "and multitask models are not exported yet"
        )


def subnet_names(skip_preprocessor: bool, only_subnets: list[str] | None) -> list[str]:
    """The subnets to export, in order, after checking ``only_subnets``' names."""
    wanted = list(SUBNET_NAMES) if only_subnets is None else list(only_subnets)
    unknown = [n for n in wanted if n not in SUBNET_NAMES]
    if unknown or not wanted:
        raise T2NErrorInvalidArgument(
            f"only_subnets={only_subnets!r}: choose among {', '.join(SUBNET_NAMES)}"
        )
    return [n for n in SUBNET_NAMES if n in wanted and not (skip_preprocessor and n == "preprocessor")]


def example_waveform(model: EncDecCTCModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Two seeded clips of ``EXAMPLE_SECONDS`` at the model's sample rate, the second 3/4
    long (its tail is padding), and their lengths."""
    samples = int(model.preprocessor._sample_rate * EXAMPLE_SECONDS)
    generator = torch.Generator().manual_seed(0)
    audio = torch.randn(2, samples, generator=generator) * 0.1
    lengths = torch.tensor([samples, samples * 3 // 4])
    audio[1, lengths[1]:] = 0.0
    return audio, lengths


@contextmanager
def inference_settings(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode, its featurizer without dither (noise) and pad_to (padding to
    a multiple), NeMo's type checks off (they refuse traced values): what inference runs.
    Every setting is put back on exit (NeMo models cannot be deep-copied: wrapt proxies)."""
    modes = [(m, m.training) for m in model.modules()]
    featurizer = getattr(getattr(model, "preprocessor", None), "featurizer", None)
    saved = {a: getattr(featurizer, a) for a in ("dither", "pad_to") if hasattr(featurizer, a)}
    try:
        model.eval()
        for attr in saved:
            setattr(featurizer, attr, 0)
        with typecheck.disable_checks():
            yield
    finally:
        for attr, value in saved.items():
            setattr(featurizer, attr, value)
        for module, training in modes:
            module.training = training


def ctc_subnets(model: EncDecCTCModel, names: list[str]) -> list[Subnet]:
    """The subnets named in ``names`` of a CTC ``model``, under ``inference_settings``."""
    audio, audio_len = example_waveform(model)
    with torch.no_grad():
        features, frames = model.preprocessor(input_signal=audio, length=audio_len)
        encoded, _ = KeywordCall(model.encoder, ["audio_signal", "length"])(features, frames)

    subnets = {
        "preprocessor": Subnet(
            "preprocessor", KeywordCall(model.preprocessor, ["input_signal", "length"]), (audio, audio_len),
            ["input_signal", "length"], ["processed_signal", "processed_length"],
            {"input_signal": {0: BATCH, 1: TIME}, "length": {0: BATCH}},
        ),
        "encoder": Subnet(
            "encoder", KeywordCall(model.encoder, ["audio_signal", "length"]), (features, frames),
            ["audio_signal", "length"], ["outputs", "encoded_lengths"],
            {"audio_signal": {0: BATCH, 2: TIME}, "length": {0: BATCH}},
            _encoder_assertions(model.encoder),
        ),
        "decoder": Subnet(
            "decoder", KeywordCall(model.decoder, ["encoder_output"]), (encoded,),
            ["encoder_output"], ["logprobs"], {"encoder_output": {0: BATCH, 2: TIME}},
        ),
    }
    return [subnets[n] for n in names]


def _encoder_assertions(encoder: nn.Module) -> list[str]:
    """A FastConformer's relative positions are precomputed for ``max_audio_length`` encoded
    frames; the traced graph does not extend them, so tract is told the longest input
    (frames after subsampling: ceil(T / factor), at most that length iff T <= factor * it)."""
    max_len = getattr(encoder, "max_audio_length", None)
    factor = getattr(encoder, "subsampling_factor", None)
    if isinstance(max_len, int) and isinstance(factor, int):
        return [f"tract_assert {TIME} <= {max_len * factor}"]
    return []
