"""Shared machinery of the per-family op tables: wrap a function as a module, export it
with optional dynamic axes, run it in tract at the traced sizes and at grown sizes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from fastnnef.inference_target import TractNNEF
from tests.helpers import Fn, export_and_check

Dyn = dict[int, dict[int, str]] | None




def _like(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    if t.dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if t.is_complex():
        return torch.randn(*shape, dtype=t.dtype)
    if t.is_floating_point():
        return torch.randn(*shape).to(t.dtype)
    return torch.randint(0, 3, shape, dtype=t.dtype)


def grown(inputs: tuple[torch.Tensor, ...], dyn: dict[int, dict[int, str]]) -> list[torch.Tensor]:
    """Fresh inputs with every dynamic axis 3 longer (one symbol, one size)."""
    out = []
    for k, t in enumerate(inputs):
        shape = list(t.shape)
        for d in dyn.get(k, {}):
            shape[d] += 3
        out.append(_like(t, shape))
    return out


def check(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], tmp_path: Path, dyn: Dyn = None,
          atol: float = 1e-4, rtol: float = 1e-4, kept_on_redraw: Mapping[int, str] | None = None,
          no_redraw: str | None = None) -> None:
    """Export ``fn`` and compare tract with torch, on the traced inputs and on freshly drawn
    ones (see ``export_and_check`` for the opt-outs); with ``dyn``, again on grown inputs."""
    names = [f"in{k}" for k in range(len(inputs))]
    target = TractNNEF.latest()
    if dyn:
        target = target.with_dynamic_axes({names[k]: axes for k, axes in dyn.items()})
    export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=names, atol=atol, rtol=rtol,
                     kept_on_redraw=kept_on_redraw, no_redraw=no_redraw)
    if dyn:
        export_and_check(Fn(fn), inputs, tmp_path, target=target, input_names=names, name="grown.nnef",
                         run_inputs=grown(inputs, dyn), atol=atol, rtol=rtol)
