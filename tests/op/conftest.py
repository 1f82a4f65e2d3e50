"""Fixtures shared by the op tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

# The quantized engines whose default qconfig quantizes weights per tensor and per channel.
PER_TENSOR, PER_CHANNEL = "qnnpack", "x86"


@pytest.fixture(params=[PER_TENSOR, PER_CHANNEL], ids=["per-tensor", "per-channel"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The quantized engine (a process-wide torch setting), restored afterwards."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = request.param
    yield request.param
    torch.backends.quantized.engine = previous
