"""The sample media the exporter traces and verifies with: deterministic, made here (never
downloaded). Two images of different sizes and aspect ratios, so that the encoder is
checked at two of the sizes the processor produces, and the decoder sees a prompt with
two images."""

from __future__ import annotations

import numpy as np

IMAGE_SIZES = ((20, 28), (12, 32))  # (height, width) before the processor resizes them


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
