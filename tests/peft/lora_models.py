"""Shared by the PEFT tests: a tiny base model, LoRA adapters made by the ``peft``
library on it (B made non-zero: peft starts B at zero, which would make every adapter a
no-op), and the base artefact exported once per test."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

# Skipped without peft; asked by a submodule, as this folder (tests/peft/) would pass for a
# namespace package named peft where the library is absent.
pytest.importorskip("peft.tuners")
import peft  # noqa: E402

from fastnnef.export import export_model_to_nnef  # noqa: E402
from fastnnef.inference_target import TractNNEF  # noqa: E402

RANK = 4
ALPHA = 8
# save_pretrained's key layout: the adapter name dropped, no base weights in the file.
SAVED_PATTERNS = [r"base_model\.model\.(?P<name>.*)\.lora_A\.weight$",
                  r"base_model\.model\.(?P<name>.*)\.lora_B\.weight$"]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def make_mlp() -> MLP:
    torch.manual_seed(0)
    return MLP().eval()


def lora_model(base: nn.Module, targets: list[str], seed: int) -> nn.Module:
    """A PeftModel with LoRA on ``targets`` of a copy of ``base``, every A and B random."""
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets, lora_dropout=0.0)
    model = peft.get_peft_model(copy.deepcopy(base), config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return model


def scaling() -> float:
    return ALPHA / RANK  # peft's LoRA scaling, no rslora


def export_base(model: nn.Module, example: torch.Tensor, path: Path, **kwargs: object) -> Path:
    return export_model_to_nnef(model, example, path, TractNNEF.latest(), **kwargs)
