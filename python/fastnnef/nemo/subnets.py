"""The subnets of a NeMo ASR model that fastnnef exports, and the model types it supports.

A model splits into artefacts as torch_to_nnef_nemo splits it: the preprocessor (waveform
and lengths -> log-mel features and frame counts), the encoder (features -> encoded frames
and their counts), then for a CTC model (``EncDecCTCModel`` and its BPE form) the CTC
decoder (encoded frames -> log-probabilities), for a transducer (``EncDecRNNTModel`` and
its subclasses) NeMo's ``decoder_joint`` (prediction network and joint, one step of a
greedy or beam search: frames, previous labels and LSTM states -> joint log-probabilities
and the next states). Each subnet's example inputs come from the one before it, run on a
seeded waveform, so every trace sees features of the shape and range real audio gives.

Multitask (AED), classification and other NeMo models are refused with an error that
names the type.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from nemo.collections.asr.models import ASRModel, EncDecCTCModel, EncDecRNNTModel
from nemo.collections.asr.modules.rnnt import RNNTDecoderJoint
from nemo.core.classes.common import typecheck
from nemo.core.classes.modelPT import ModelPT
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented

#: The subnets of each supported kind of model, in the order they run (and are exported).
CTC_SUBNETS = ("preprocessor", "encoder", "decoder")
RNNT_SUBNETS = ("preprocessor", "encoder", "decoder_joint")
#: Every subnet name a supported model may have.
SUBNET_NAMES = ("preprocessor", "encoder", "decoder", "decoder_joint")

#: Dynamic axis symbols: one artefact per subnet, so each names its own. ``U``: labels fed
#: to a transducer's prediction network.
BATCH, TIME, LABELS = "B", "T", "U"

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


def model_subnets(model: Any) -> tuple[str, ...]:
    """The subnets of ``model``; a clear error unless it is a NeMo ASR model fastnnef exports."""
    if not isinstance(model, ModelPT):
        raise T2NErrorInvalidArgument(
            f"asr_model must be a NeMo ASR model (EncDecCTCModel, EncDecRNNTModel), got a {type(model).__name__}"
        )
    if isinstance(model, EncDecCTCModel):
        return CTC_SUBNETS
    if isinstance(model, EncDecRNNTModel):
        return RNNT_SUBNETS
    raise T2NErrorNotImplemented(
        f"NeMo model type {type(model).__name__} is not supported: fastnnef exports CTC models "
        "(EncDecCTCModel, EncDecCTCModelBPE, e.g. FastConformer CTC) and transducers (EncDecRNNTModel and "
        "its subclasses); multitask (AED) and classification models are not exported yet"
    )


def subnet_names(model: Any, skip_preprocessor: bool, only_subnets: list[str] | None) -> list[str]:
    """The subnets of ``model`` to export, in order, after checking ``only_subnets``' names."""
    available = model_subnets(model)
    wanted = list(available) if only_subnets is None else list(only_subnets)
    if not wanted or any(n not in available for n in wanted):
        raise T2NErrorInvalidArgument(
            f"only_subnets={only_subnets!r}: a {type(model).__name__} has {', '.join(available)}"
        )
    return [n for n in available if n in wanted and not (skip_preprocessor and n == "preprocessor")]


def example_waveform(model: ASRModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Two seeded clips of ``EXAMPLE_SECONDS`` at the model's sample rate, the second 3/4
    long (its tail is padding), and their lengths."""
    samples = int(model.preprocessor._sample_rate * EXAMPLE_SECONDS)
    generator = torch.Generator().manual_seed(0)
    audio = torch.randn(2, samples, generator=generator) * 0.1
    lengths = torch.tensor([samples, samples * 3 // 4])
    audio[1, lengths[1]:] = 0.0
    return audio, lengths


#: Attributes NeMo's own export sets (``_prepare_for_export``), by the module that has them:
#: the featurizer without dither (noise) and pad_to (padding to a multiple); a transducer's
#: prediction network without its start-of-sequence step (each call takes the last emitted
#: labels) and its joint without the fused loss (which needs transcripts).
EXPORT_SETTINGS = (("featurizer", "dither", 0), ("featurizer", "pad_to", 0),
                   ("decoder", "_rnnt_export", True), ("joint", "_fuse_loss_wer", False))


@contextmanager
def inference_settings(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode with ``EXPORT_SETTINGS`` and NeMo's type checks off (they
    refuse traced values). Everything is put back on exit (NeMo models cannot be
    deep-copied: wrapt proxies)."""
    modes = [(m, m.training) for m in model.modules()]
    owners = {"featurizer": getattr(getattr(model, "preprocessor", None), "featurizer", None),
              "decoder": getattr(model, "decoder", None), "joint": getattr(model, "joint", None)}
    saved = [(owners[o], attr, getattr(owners[o], attr), value)
             for o, attr, value in EXPORT_SETTINGS if hasattr(owners[o], attr)]
    try:
        model.eval()
        for owner, attr, _, value in saved:
            setattr(owner, attr, value)
        with typecheck.disable_checks():
            yield
    finally:
        for owner, attr, before, _ in saved:
            setattr(owner, attr, before)
        for module, training in modes:
            module.training = training


def export_subnets(model: ASRModel, names: list[str]) -> list[Subnet]:
    """The subnets named in ``names`` of ``model``, under ``inference_settings``."""
    audio, audio_len = example_waveform(model)
    with torch.no_grad():
        features, frames = model.preprocessor(input_signal=audio, length=audio_len)
        encoded, _ = KeywordCall(model.encoder, ["audio_signal", "length"])(features, frames)
    builders = {
        "preprocessor": lambda: Subnet(
            "preprocessor", KeywordCall(model.preprocessor, ["input_signal", "length"]), (audio, audio_len),
            ["input_signal", "length"], ["processed_signal", "processed_length"],
            {"input_signal": {0: BATCH, 1: TIME}, "length": {0: BATCH}},
        ),
        "encoder": lambda: Subnet(
            "encoder", KeywordCall(model.encoder, ["audio_signal", "length"]), (features, frames),
            ["audio_signal", "length"], ["outputs", "encoded_lengths"],
            {"audio_signal": {0: BATCH, 2: TIME}, "length": {0: BATCH}},
            _encoder_assertions(model.encoder),
        ),
        "decoder": lambda: Subnet(
            "decoder", KeywordCall(model.decoder, ["encoder_output"]), (encoded,),
            ["encoder_output"], ["logprobs"], {"encoder_output": {0: BATCH, 2: TIME}},
        ),
        "decoder_joint": lambda: _decoder_joint(model, encoded),
    }
    return [builders[n]() for n in names]


def _decoder_joint(model: ASRModel, encoded: torch.Tensor) -> Subnet:
    """NeMo's ``RNNTDecoderJoint`` (its export subnet) over every encoded frame and two
    seeded labels per clip (int32, as NeMo's example), from seeded LSTM states."""
    module = RNNTDecoderJoint(model.decoder, model.joint)
    names = ["encoder_outputs", "targets", "target_length", "input_states_1", "input_states_2"]
    batch = encoded.shape[0]
    generator = torch.Generator().manual_seed(0)
    blank = model.decoder.blank_idx
    targets = torch.randint(0, blank, (batch, 2), generator=generator, dtype=torch.int32)
    target_length = torch.full((batch,), 2, dtype=torch.int32)
    *_, (state_1, state_2) = model.decoder.input_example(max_batch=batch)
    states = [torch.randn(s.shape, generator=generator) * 0.1 for s in (state_1, state_2)]
    return Subnet(
        "decoder_joint", KeywordCall(module, names), (encoded, targets, target_length, *states), names,
        ["outputs", "prednet_lengths", "output_states_1", "output_states_2"],
        {"encoder_outputs": {0: BATCH, 2: TIME}, "targets": {0: BATCH, 1: LABELS}, "target_length": {0: BATCH},
         "input_states_1": {1: BATCH}, "input_states_2": {1: BATCH}},
    )


def _encoder_assertions(encoder: nn.Module) -> list[str]:
    """A FastConformer's relative positions are precomputed for ``max_audio_length`` encoded
    frames; the traced graph does not extend them, so tract is told the longest input
    (frames after subsampling: ceil(T / factor), at most that length iff T <= factor * it)."""
    max_len = getattr(encoder, "max_audio_length", None)
    factor = getattr(encoder, "subsampling_factor", None)
    if isinstance(max_len, int) and isinstance(factor, int):
        return [f"tract_assert {TIME} <= {max_len * factor}"]
    return []
