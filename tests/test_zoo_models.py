"""Model-zoo architectures of issue 25's corpus, tiny and random (built from transformers
configs: no network), exported the way their users call them and checked in tract against
torch: Whisper's decoder step (token ids + the encoder's hidden states) and the whole model
(log-mel features + decoder ids), and an EnCodec round trip (waveform -> codes -> waveform)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from fastnnef.inference_target import TractNNEF
from tests.helpers import TRACER_ALLOWED, export_and_check

MEL_BINS, FRAMES, D_MODEL = 8, 20, 16  # the encoder halves FRAMES: 10 positions


def _whisper() -> nn.Module:
    config = transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=MEL_BINS, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, d_model=D_MODEL,
        max_source_positions=FRAMES // 2, max_target_positions=16, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1,
    )
    return transformers.WhisperForConditionalGeneration(config).eval()


class WhisperStep(nn.Module):
    """One decoder step: ``(decoder ids, encoder hidden states) -> logits`` (no cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.whisper = _whisper()

    def forward(self, ids: torch.Tensor, encoder_states: torch.Tensor) -> torch.Tensor:
        return self.whisper(encoder_outputs=(encoder_states,), decoder_input_ids=ids, use_cache=False).logits


class WhisperFull(nn.Module):
    """The whole model: ``(log-mel features, decoder ids) -> logits``."""

    def __init__(self) -> None:
        super().__init__()
        self.whisper = _whisper()

    def forward(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.whisper(input_features=features, decoder_input_ids=ids, use_cache=False).logits


def _ids(n: int) -> torch.Tensor:
    return torch.randint(3, 64, (1, n))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-tokens"])
def test_whisper_decoder_step(dynamic: bool, tmp_path: Path) -> None:
    """Causal self-attention over the ids (``is_causal``), cross-attention over the encoder's
    states; with a dynamic token count, run at other counts."""
    torch.manual_seed(0)
    target = TractNNEF.latest().with_dynamic_axes({"ids": {1: "T"}} if dynamic else None)
    states = torch.randn(1, FRAMES // 2, D_MODEL)
    run = (_ids(1), states) if dynamic else None
    export_and_check(WhisperStep(), (_ids(3), states), tmp_path, target=target,
                     input_names=["ids", "encoder_states"], run_inputs=run, atol=1e-4,
                     kept_on_redraw={0: "token ids: a fresh draw of normal values is no id"})


def test_whisper_full(tmp_path: Path) -> None:
    torch.manual_seed(0)
    export_and_check(WhisperFull(), (torch.randn(1, MEL_BINS, FRAMES), _ids(3)), tmp_path,
                     input_names=["features", "ids"], atol=1e-4,
                     kept_on_redraw={1: "token ids: a fresh draw of normal values is no id"})


class EncodecRoundTrip(nn.Module):
    """``waveform -> audio_values``: encode to codes, decode them."""

    def __init__(self, **config: object) -> None:
        super().__init__()
        self.encodec = transformers.EncodecModel(transformers.EncodecConfig(
            hidden_size=8, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2], codebook_size=16,
            codebook_dim=8, num_lstm_layers=1, **config,
        )).eval()

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return self.encodec(waveform).audio_values


# torch.export cannot capture EncodecModel (JIT_ONLY in tests/conftest.py says why): "auto" traces.
@TRACER_ALLOWED
@pytest.mark.parametrize("config", [
    pytest.param({}, id="causal"),
    pytest.param({"normalize": True, "use_causal_conv": False, "norm_type": "time_group_norm"}, id="normalized"),
])
def test_encodec_round_trip(config: dict[str, object], tmp_path: Path) -> None:
    """Its padding amounts are 0-d tensors (buffers, and sizes computed from the length with
    them), folded in a static export."""
    torch.manual_seed(0)
    export_and_check(EncodecRoundTrip(**config), (torch.randn(1, 1, 160),), tmp_path, input_names=["waveform"],
                     atol=1e-4)
