"""A tiny keyword-spotting style audio net: 1-D convolutions over time, a GELU MLP head.

Small (about 22 k parameters) but real: batch norm folded at export, a dynamic time axis,
and the op families an on-device audio model uses.
"""

from __future__ import annotations

import torch
from torch import nn

N_MELS = 40
N_CLASSES = 12


class TinyKWS(nn.Module):
    def __init__(self, n_mels: int = N_MELS, channels: int = 64, n_classes: int = N_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(n_mels, channels, kernel_size=5, padding=2),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=3, padding=2, dilation=2, groups=channels),
            nn.Conv1d(channels, channels, kernel_size=1),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Linear(channels, channels), nn.GELU(), nn.Linear(channels, n_classes))

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """mels: [batch, n_mels, time] -> per-frame class log-probabilities [batch, time, classes]."""
        x = self.features(mels).transpose(1, 2)
        return torch.log_softmax(self.head(x), dim=-1)


def build(seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model in eval mode, with non-trivial batch-norm statistics, and an example input."""
    torch.manual_seed(seed)
    model = TinyKWS()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d):
                assert module.running_mean is not None and module.running_var is not None  # tracked stats
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model.eval(), (torch.randn(1, N_MELS, 50),)
