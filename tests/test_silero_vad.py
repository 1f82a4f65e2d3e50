"""A real TorchScript artefact with no Python source: Silero VAD's ``silero_vad.jit``, as the
silero-vad wheel ships it, exported and run in tract against the model itself on audio
chunks (a deterministic speech-like signal: silence, onset, voiced frames, decay).

Two exports:
- the wheel's model as users call it (``model(chunk, 16000)``): a stateful module whose
  forward changes its attributes (``_state``, ``_context``, ``_last_sr``...). The artefact
  must compute the call the user asked for, from the state the model has, and its check must
  compare with that call's output; the model is left as it was;
- the reference's showcase: the inner ``_model`` with its state as an explicit input and
  output (``x`` = 64 samples of context + the 512-sample chunk), run in tract chunk after
  chunk with the state carried from one call to the next, as a streaming VAD runs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_with_result
from fastnnef.inference_target import TractNNEF
from tests.helpers import TRACER_ALLOWED

# A TorchScript artefact: only the tracer exports it ("auto" falls back), its notice allowed.
pytestmark = TRACER_ALLOWED

SAMPLE_RATE = 16000
CHUNK = 512  # the model's chunk at 16 kHz
CONTEXT = 64  # samples of the previous chunk the model prepends at 16 kHz
ATOL = 1e-4


def _silero_jit() -> Path:
    """The wheel's ``silero_vad.jit``, found through the installed distribution's files:
    importing ``silero_vad`` would set torch's thread count for the whole process."""
    files = importlib.metadata.files("silero-vad") or []
    return Path(next(f for f in files if f.name == "silero_vad.jit").locate())


def load() -> torch.jit.ScriptModule:
    """A fresh instance of the model, in the state the wheel ships it."""
    return torch.jit.load(str(_silero_jit())).eval()


def speech_like(seconds: float = 2.0) -> torch.Tensor:
    """A deterministic voiced signal: harmonics of a gliding pitch shaped by three vowel
    formants, syllables at 4 Hz, between 0.5 s and 1.6 s, over faint noise (the model
    rates it from ~0.01 in the noise to ~0.9 in the voiced part)."""
    t = torch.arange(int(seconds * SAMPLE_RATE), dtype=torch.float64) / SAMPLE_RATE
    f0 = 140 + 30 * torch.sin(2 * math.pi * 0.7 * t)
    phase = 2 * math.pi * torch.cumsum(f0, 0) / SAMPLE_RATE
    voiced = torch.zeros_like(t)
    for k in range(1, 40):
        weight = sum(torch.exp(-(((k * f0) - f) / (2 * bw)) ** 2) for f, bw in ((700, 130), (1220, 70), (2600, 160)))
        voiced += weight / math.sqrt(k) * torch.sin(k * phase)
    syllables = 0.5 - 0.5 * torch.cos(2 * math.pi * 4 * t)
    gate = ((t > 0.5) & (t < 1.6)).double()
    noise = 0.003 * torch.randn(t.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return (0.3 * voiced / voiced.abs().max() * syllables * gate + noise).float()


@functools.cache
def chunks() -> tuple[torch.Tensor, ...]:
    audio = speech_like()
    return tuple(audio[i:i + CHUNK][None] for i in range(0, audio.numel() - CHUNK + 1, CHUNK))


# From a fresh state: a chunk of noise, the voiced part's onset, its middle.
PICKED = (6, 18, 36)
# Streamed: noise, the onset at 0.5 s, voiced frames (each call is ~0.1 s of TorchScript).
STREAMED = slice(10, 34)


def _attributes(model: torch.jit.ScriptModule) -> dict[str, object]:
    return {n: model._c.getattr(n) for n in ("_state", "_context", "_last_sr", "_last_batch_size")}


def test_chunks_cover_speech_and_silence() -> None:
    """The picked chunks span the model's range (a test on outputs near one value only
    would not tell a wrong state from a right one)."""
    with torch.no_grad():
        fresh = [load()(chunks()[i], SAMPLE_RATE).item() for i in PICKED]
        model = load()
        streamed = [model(chunk, SAMPLE_RATE).item() for chunk in chunks()[STREAMED]]
    assert min(fresh) < 0.2 and max(fresh) > 0.7, fresh
    assert min(streamed) < 0.05 and max(streamed) > 0.8, streamed


@pytest.mark.parametrize("index", PICKED)
def test_stateful_model_from_a_fresh_state(tmp_path: Path, index: int) -> None:
    """``model(chunk, 16000)`` from the state the wheel ships: the artefact computes that
    call (check_io compares with it), and the model is left in that state."""
    chunk = chunks()[index]
    with torch.no_grad():
        fresh = load()(chunk, SAMPLE_RATE)
    model = load()
    before = _attributes(model)
    result = export_model_with_result(
        model, (chunk, SAMPLE_RATE), tmp_path / "vad.nnef.tgz", TractNNEF.latest(),
        input_names=["x"], output_names=["prob"],
    )
    assert result.checks == ("io_quantity", "check_io")
    torch.testing.assert_close(result.traced_outputs[0], fresh, rtol=0, atol=0)  # the check's reference
    (got,) = TractArtefact.load(result.path).run([chunk])
    np.testing.assert_allclose(got, fresh.numpy(), atol=ATOL, rtol=0)
    after = _attributes(model)
    assert all(after[n] is before[n] for n in before), "the export changed the model's state"
    with torch.no_grad():
        torch.testing.assert_close(model(chunk, SAMPLE_RATE), fresh, rtol=0, atol=0)


def test_stateful_model_from_its_current_state(tmp_path: Path) -> None:
    """A model that already heard the chunks before: the artefact computes its next call,
    from the state it has (not a fresh one, nor one some calls later)."""
    audio = chunks()
    heard, model = load(), load()
    with torch.no_grad():
        for chunk in audio[14:17]:
            heard(chunk, SAMPLE_RATE)
            model(chunk, SAMPLE_RATE)
        expected = heard(audio[17], SAMPLE_RATE)
    path = export_model_with_result(
        model, (audio[17], SAMPLE_RATE), tmp_path / "vad.nnef.tgz", TractNNEF.latest(),
    ).path
    (got,) = TractArtefact.load(path).run([audio[17]])
    np.testing.assert_allclose(got, expected.numpy(), atol=ATOL, rtol=0)


def test_showcase_streams_with_its_state_carried(tmp_path: Path) -> None:
    """The reference's showcase: ``_model(x, state)`` exported once, then the chunks run
    in tract one after the other with the state and context carried across calls, against
    the wheel's model called on the same chunks in the same order."""
    audio = chunks()
    zero_state = torch.zeros(2, 1, 128)
    x0 = torch.cat([torch.zeros(1, CONTEXT), audio[STREAMED.start]], dim=1)
    path = export_model_with_result(
        load()._model, (x0, zero_state), tmp_path / "silero_vad.nnef.tgz", TractNNEF.latest(),
        input_names=["x", "state"], output_names=["prob", "new_state"],
    ).path
    artefact = TractArtefact.load(path)
    streaming = load()
    state, context = zero_state.numpy(), np.zeros((1, CONTEXT), dtype=np.float32)
    for chunk in audio[STREAMED]:
        x = np.concatenate([context, chunk.numpy()], axis=1)
        prob, state = artefact.run([x, state])
        context = x[:, -CONTEXT:]
        with torch.no_grad():
            expected = streaming(chunk, SAMPLE_RATE)
        np.testing.assert_allclose(prob, expected.numpy(), atol=ATOL, rtol=0)
