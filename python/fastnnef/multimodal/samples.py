"""The sample media the exporter traces and verifies with: deterministic, made here (never
downloaded). Two images of different sizes and aspect ratios (two audio clips of different
lengths), so that the encoder is checked at two of the sizes the processor produces, and
the decoder sees a prompt with two of them."""

from __future__ import annotations

import numpy as np

IMAGE_SIZES = ((20, 28), (12, 32))  # (height, width) before the processor resizes them
AUDIO_SECONDS = (0.37, 0.81)  # clip lengths: shorter than the tiny test model's 1 s window
SAMPLING_RATE = 16000


def sample_images() -> list[np.ndarray]:
    """RGB ``uint8 [H, W, 3]`` images: smooth gradients plus seeded noise (a flat image
    would give every patch the same embedding, a weak test)."""
    images = []
    for index, (height, width) in enumerate(IMAGE_SIZES):
        rng = np.random.default_rng(index)
        rows = np.linspace(0, 255, height)[:, None, None]
        cols = np.linspace(255, 0, width)[None, :, None]
        base = (rows * np.array([1.0, 0.3, 0.6]) + cols * np.array([0.2, 0.9, 0.4])) / 1.5
        noise = rng.normal(0, 30, (height, width, 3))
        images.append(np.clip(base + noise, 0, 255).astype(np.uint8))
    return images


def sample_audio(sampling_rate: int = SAMPLING_RATE) -> list[np.ndarray]:
    """Mono float32 clips: a chirp plus seeded noise, one per ``AUDIO_SECONDS``."""
    clips = []
    for index, seconds in enumerate(AUDIO_SECONDS):
        t = np.arange(int(seconds * sampling_rate)) / sampling_rate
        chirp = np.sin(2 * np.pi * (200 + 900 * t) * t) * 0.5
        clips.append((chirp + np.random.default_rng(index).normal(0, 0.05, t.shape)).astype(np.float32))
    return clips
