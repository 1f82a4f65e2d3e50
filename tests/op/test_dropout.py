"""Every dropout flavour is the identity in eval mode, as torch computes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import export_and_check

DROPOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dropout": lambda x: F.dropout(x, 0.4, training=False),
    "dropout3d": lambda x: F.dropout3d(x, 0.4, training=False),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.4, training=False),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x, 0.4, training=False),
    "module_chain": lambda x: nn.Sequential(nn.Dropout(0.2), nn.AlphaDropout(0.2), nn.FeatureAlphaDropout(0.2),
                                            nn.Dropout3d(0.2)).eval()(x),
}


class Apply(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x) * 2.0 - 1.0


@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_dropout_is_identity_in_eval(name: str, tmp_path: Path) -> None:
    export_and_check(Apply(DROPOUTS[name]).eval(), (torch.randn(2, 3, 4, 5, 6),), tmp_path)
