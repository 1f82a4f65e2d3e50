"""Shared test helper: export through the public API, let check_io run the artefact in
the linked tract, then compare tract's outputs with torch's once more, independently."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF


class Fn(torch.nn.Module):
    """Wraps a function of the inputs (the op under test) as a module."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def as_tuple(args: Any) -> tuple[Any, ...]:
    return args if isinstance(args, tuple) else (args,)


def export_and_check(
    model: torch.nn.Module,
    args: Any,
    tmp_path: Path,
    *,
    target: Optional[Any] = None,
    name: str = "model.nnef",
    compression_level: Optional[int] = 0,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    run_inputs: Optional[Sequence[torch.Tensor]] = None,
    **export_kwargs: Any,
) -> Path:
    """Export ``model`` (check_io on by default), reload the artefact with tract, run it
    on ``run_inputs`` (default: the export inputs) and assert it matches torch."""
    target = target if target is not None else TractNNEF.latest()
    path = export_model_to_nnef(
        model, args, tmp_path / name, target, compression_level=compression_level, **export_kwargs
    )
    inputs = list(run_inputs) if run_inputs is not None else [
        a for a in as_tuple(args) if isinstance(a, torch.Tensor)
    ]
    with torch.no_grad():
        expected = model(*inputs)
    expected_list = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    got = TractArtefact.load(path).run(inputs)
    assert len(got) == len(expected_list)
    for e, g in zip(expected_list, got):
        if e.is_complex():  # the graph holds complex values as (re, im) pairs
            e = torch.view_as_real(e.resolve_conj())
        e_np = e.float().numpy() if e.dtype == torch.bfloat16 else e.numpy()
        assert g.shape == e_np.shape, (g.shape, e_np.shape)
        if e_np.dtype == np.bool_ or np.issubdtype(e_np.dtype, np.integer):
            np.testing.assert_array_equal(g, e_np)
        else:
            np.testing.assert_allclose(g.astype(np.float64), e_np.astype(np.float64), atol=atol, rtol=rtol)
    return path


def needs_handler(kind: str) -> pytest.MarkDecorator:
    """Strict xfail while no handler for ``kind`` is registered (a family not merged yet);
    turns into a normal test, and an XPASS failure reminds to drop it, once it is."""
    from fastnnef.op.registry import load_handlers

    missing = load_handlers().lookup(kind, TractNNEF.latest().version) is None
    return pytest.mark.xfail(missing, strict=True, reason=f"no handler for {kind} yet")


def assert_gil_released(native_call: Callable[[], object]) -> None:
    """Run ``native_call`` in a thread while this thread keeps executing Python: with the
    GIL held for the whole native call, this thread would stall for all of it."""
    import threading
    import time

    window: list[float] = []

    def worker() -> None:
        window.append(time.perf_counter())
        native_call()
        window.append(time.perf_counter())

    thread = threading.Thread(target=worker)
    ticks: list[float] = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = window
    inside = [t for t in ticks if start <= t <= end]
    longest_pause = max(b - a for a, b in zip([start, *inside], [*inside, end]))
    assert end - start > 0.05 and longest_pause < (end - start) / 2, (end - start, longest_pause)
