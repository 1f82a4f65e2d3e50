"""Every op that has a plain-NNEF form exports to KhronosNNEF without any tract extension,
and the strict artefact runs in tract and matches torch (issue: typed target capabilities;
op coverage: strict targets get plain forms)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.inference_target import KhronosNNEF
from tests.helpers import Fn, export_and_check


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _pos(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) + 0.1


def _idx(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(-high, high, shape, dtype=torch.int64)


# (name, function or module, inputs)
CASES: list[tuple[str, Any, tuple[torch.Tensor, ...]]] = [
    # elementwise math
    *[(name, getattr(torch, name), (_r(2, 5),)) for name in (
        "neg", "abs", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "floor", "ceil", "sign",
        "square", "erf", "atan", "sinh", "cosh", "asinh")],
    *[(name, getattr(torch, name), (_pos(2, 5),)) for name in ("log", "sqrt", "rsqrt", "reciprocal")],
    ("round_halves", torch.round, (torch.tensor([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6]]),)),
    ("round_decimals", lambda x: torch.round(x, decimals=1), (_r(3, 4),)),
    ("add_broadcast", lambda a, b: a + 2 * b, (_r(2, 3, 4), _r(4))),
    ("sub_mul_div", lambda a, b: (a - b) * a / (b.abs() + 1), (_r(3, 4), _r(1, 4))),
    ("pow", lambda a: torch.pow(a.abs() + 0.5, 1.7), (_r(3, 4),)),
    ("max_min", lambda a, b: torch.maximum(a, b) - torch.minimum(a, 0.2 * b), (_r(3, 4), _r(3, 4))),
    ("compare_where", lambda a, b: torch.where(a > b, a, b * 2), (_r(3, 4), _r(3, 4))),
    ("masked_fill", lambda a: a.masked_fill(a < 0, -1.0), (_r(3, 4),)),
    # activations
    *[(f"{m.__class__.__name__.lower()}", m, (_r(2, 6),)) for m in (
        nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.Hardswish(), nn.Hardsigmoid(), nn.ELU(), nn.SELU(),
        nn.LeakyReLU(0.2), nn.Softplus(), nn.Mish(), nn.ReLU6(), nn.Hardtanh(-0.5, 0.5), nn.PReLU(6),
        nn.Softmax(-1), nn.LogSoftmax(1), nn.Softsign())],
    # reductions
    ("sum_mean", lambda a: a.sum(1) + a.mean(1, keepdim=True).squeeze(1), (_r(2, 5, 3),)),
    ("amax_amin", lambda a: a.amax(0) - a.amin(-1, keepdim=True), (_r(4, 5),)),
    ("argmax", lambda a: a.argmax(1), (_r(3, 7),)),
    ("var_std", lambda a: a.var(1) + a.std(0).sum(), (_r(4, 5),)),
    ("norm", lambda a: torch.linalg.vector_norm(a, dim=-1), (_r(3, 5),)),
    ("logsumexp", lambda a: torch.logsumexp(a, dim=1), (_r(3, 5),)),
    # shapes
    ("reshape_permute", lambda a: a.reshape(2, 3, 4).permute(2, 0, 1).flatten(1), (_r(6, 4),)),
    ("transpose_squeeze", lambda a: a.transpose(0, 1).unsqueeze(0).squeeze(0), (_r(3, 5),)),
    ("cat_stack", lambda a, b: torch.stack([torch.cat([a, b], 1), torch.cat([b, a], 1)]), (_r(2, 3), _r(2, 3))),
    ("split_chunk", lambda a: torch.chunk(a, 3, 1)[1] + a.split(2, 1)[0], (_r(2, 6),)),
    ("expand_repeat", lambda a: a[:, :1].expand(3, 4) + a.repeat(1, 2)[:, :4], (_r(3, 2),)),
    # indexing
    ("slice_select_narrow", lambda a: a[1:, ::2] + a[0, ::2] + a.narrow(1, 1, 3)[1:], (_r(4, 6),)),
    ("index_select", lambda a, i: a.index_select(1, i), (_r(3, 5), torch.tensor([4, 0, 2, 2]))),
    ("index_axis0", lambda a, i: a[i], (_r(6, 3), _idx(6, 5))),
    ("embedding", nn.Embedding(11, 4), (torch.randint(0, 11, (2, 3)),)),
    ("tril_triu", lambda a: torch.tril(a, -1) + torch.triu(a, 1) * 2, (_r(4, 5),)),
    # creation
    ("zeros_ones_full", lambda a: a + torch.zeros(3, 4) + torch.ones(1, 4) * torch.full((3, 1), 2.5), (_r(3, 4),)),
    ("like", lambda a: torch.ones_like(a) - torch.zeros_like(a) + torch.full_like(a, 0.5), (_r(2, 3),)),
    ("arange", lambda a: a * torch.arange(4) + torch.arange(0.0, 2.0, 0.5), (_r(2, 4),)),
    # linear algebra, convolutions, pools, norms, padding, attention
    ("linear", nn.Linear(5, 3), (_r(2, 5),)),
    ("matmul_bmm", lambda a, b: torch.bmm(a, b) + a @ b, (_r(2, 3, 4), _r(2, 4, 5))),
    ("addmm", lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (_r(3, 4), _r(4, 2), _r(2))),
    ("conv1d", nn.Conv1d(3, 4, 3, padding=1, dilation=1), (_r(1, 3, 9),)),
    ("conv2d_groups", nn.Conv2d(4, 6, 3, stride=2, groups=2), (_r(1, 4, 9, 9),)),
    ("conv_transpose2d", nn.ConvTranspose2d(3, 2, 3, stride=2), (_r(1, 3, 5, 5),)),
    ("max_pool2d", nn.MaxPool2d(3, 2, padding=1), (_r(1, 2, 8, 8),)),
    ("avg_pool2d", nn.AvgPool2d(2), (_r(1, 2, 8, 8),)),
    ("batch_norm", nn.BatchNorm2d(3).eval(), (_r(2, 3, 4, 4),)),
    ("layer_norm", nn.LayerNorm(6), (_r(2, 3, 6),)),
    ("group_norm", nn.GroupNorm(2, 4), (_r(2, 4, 5),)),
    ("pad_modes", lambda a: F.pad(a, (1, 2), value=0.5) + F.pad(a, (2, 1), mode="reflect")
     + F.pad(a, (0, 3), mode="replicate"), (_r(1, 2, 6),)),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (_r(1, 2, 5, 8), _r(1, 2, 7, 8), _r(1, 2, 7, 8))),
    ("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     (_r(1, 2, 5, 8), _r(1, 2, 5, 8), _r(1, 2, 5, 8))),
]


@pytest.mark.parametrize("name, fn, inputs", CASES, ids=[c[0] for c in CASES])
def test_plain_nnef_form(name: str, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = (fn if isinstance(fn, nn.Module) else Fn(fn)).eval()
    path = export_and_check(model, inputs, tmp_path, target=KhronosNNEF.latest(), compression_level=None,
                            atol=1e-4, rtol=1e-4)
    text = (path / "graph.nnef").read_text()
    assert "tract_" not in text, [line for line in text.splitlines() if "tract_" in line][:5]
