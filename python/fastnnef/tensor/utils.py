"""Drop-in: torch_to_nnef's ``tensor.utils``, the named parameters and buffers of a module.
The reference patches ``nn.Module`` for torch < 2.0 here; fastnnef needs torch >= 2.1, whose
``named_parameters``/``named_buffers`` take ``remove_duplicate``, so these only call them."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


def get_named_parameters(mod: nn.Module, remove_duplicate: bool = True) -> Iterator[tuple[str, nn.Parameter]]:
    """``mod.named_parameters(remove_duplicate=...)``: a tied parameter once, or under every name."""
    return mod.named_parameters(remove_duplicate=remove_duplicate)


def get_named_buffers(mod: nn.Module, remove_duplicate: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """``mod.named_buffers(remove_duplicate=...)``."""
    return mod.named_buffers(remove_duplicate=remove_duplicate)
