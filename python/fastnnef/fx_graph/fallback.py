"""When ``front_end="auto"`` leaves ``torch.export`` for the jit tracer, and why.

``"auto"`` exports with ``torch.export`` and uses the tracer (deprecated upstream) only
where this front end cannot serve the model, decided before anything is written:

- before capture: a TorchScript module (only the tracer runs it);
- after: ``torch.export`` cannot capture the model, or lowering it or converting its IR
  refuses it (an FX node this front end does not read, a size torch cannot express...).

A refusal is one of ``REFUSALS``; any other error (the model fails on its inputs, a bad
argument, a file that cannot be written) is the user's to see, and a ``check_io``
mismatch comes after the artefact is written: neither is a reason to trace again.
"""

from __future__ import annotations

import torch
from torch import nn

from fastnnef.exceptions import (
    T2NErrorConsistency,
    T2NErrorDataNodeValue,
    T2NErrorIR,
    T2NErrorNotImplemented,
    T2NErrorTorchGraphExtraction,
)

# What capture, lowering and conversion raise for a program they cannot serve (the
# handlers' refusals included: a size the lowering wrote otherwise than the tracer would).
REFUSALS: tuple[type[Exception], ...] = (
    T2NErrorTorchGraphExtraction,  # T2NErrorTorchExportFailed: capture or lowering
    T2NErrorNotImplemented,  # an op, argument or size a handler does not export
    T2NErrorIR,
    T2NErrorConsistency,
    T2NErrorDataNodeValue,
)


def declined_before_capture(model: nn.Module) -> str | None:
    """Why ``"auto"`` does not try ``torch.export`` on ``model`` at all (``None``: it does)."""
    if isinstance(model, torch.jit.ScriptModule):
        return f"{type(model).__name__} is a TorchScript module, which only the tracer runs"
    return None


def refusal_reason(err: Exception) -> str:
    """The one line logged for a refusal: the error's kind and its first line."""
    first = str(err).strip().splitlines()
    return f"{type(err).__name__}: {first[0] if first else ''}"
