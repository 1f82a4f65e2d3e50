"""Shared test helper: export through the public API, let check_io run the artefact in
the linked tract, then compare tract's outputs with torch's once more, independently, on
the traced inputs and on freshly drawn ones (a value frozen into a constant at export
matches torch on the traced inputs only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.export import export_model_to_nnef
from fastnnef.inference_target import TractNNEF

# The front end of every export here: pytest's --front-end option (tests/conftest.py).
FRONT_END = "auto"
# torch's deprecation notice on every torch.jit.trace / torch.jit.script, as a pytest
# filterwarnings entry: pyproject.toml makes warnings errors, and a test that traces or
# scripts on purpose ignores this one notice (``TRACER_ALLOWED``), nothing else.
JIT_DEPRECATION_FILTER = r"ignore:`torch\.jit\.\w+` is deprecated:FutureWarning"
TRACER_ALLOWED = pytest.mark.filterwarnings(JIT_DEPRECATION_FILTER)


class Fn(torch.nn.Module):
    """Wraps a function of the inputs (the op under test) as a module."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def as_tuple(args: Any) -> tuple[Any, ...]:
    return args if isinstance(args, tuple) else (args,)


def redrawn(t: torch.Tensor) -> torch.Tensor:
    """A fresh tensor of ``t``'s shape and dtype, drawn like ``t``: floats normal with its
    mean and spread, within its range (an op defined on an interval, such as log or acos,
    stays in its domain), inf and nan kept in place; integers uniform in its range (indices
    stay valid), without zeros if it has none (divisors), distinct if its values are
    (no ties); bools uniform. A ``t`` sorted along its last axis (boundaries, sorted
    sequences) stays sorted."""
    fresh = _drawn_like(t)
    if t.dim() > 0 and t.shape[-1] > 1 and t.dtype != torch.bool and not t.is_complex():
        if bool((t[..., 1:] >= t[..., :-1]).all()):
            fresh = fresh.sort(-1).values
    return fresh


def _drawn_like(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return torch.rand(t.shape) > 0.5
    if t.is_complex():
        real = _drawn_like(torch.view_as_real(t.detach()))
        return torch.view_as_complex(real.contiguous()).to(t.dtype)
    if t.numel() == 0:
        return t.clone()
    if t.is_floating_point():
        x = t.detach().double()
        finite = x.isfinite()
        if not finite.any():
            return t.clone()
        lo, hi = x[finite].min(), x[finite].max()
        if lo == hi:  # one value (or one element): scale it, which keeps its sign
            fresh = x * (0.5 + torch.rand(t.shape, dtype=torch.float64))
        else:
            fresh = torch.randn(t.shape, dtype=torch.float64) * x[finite].std() + x[finite].mean()
            # Out of range: uniform in it instead of clipped (clipping would make ties).
            fresh = torch.where((fresh < lo) | (fresh > hi), lo + (hi - lo) * torch.rand(t.shape, dtype=torch.float64),
                                fresh)
        return torch.where(finite, fresh, x).to(t.dtype)  # inf and nan stay where they were
    lo, hi = int(t.min()), int(t.max())
    if hi - lo > 1 << 20:  # a wide range: ties and zeros are unlikely in a uniform draw
        return torch.randint(lo, hi, t.shape, dtype=torch.int64).to(t.dtype)
    values = torch.arange(lo, hi + 1)
    if not bool((t == 0).any()):  # a divisor without zeros stays without
        values = values[values != 0]
    if t.numel() > 1 and t.unique().numel() == t.numel():  # distinct values stay distinct (no ties)
        picks = torch.randperm(values.numel())[: t.numel()]
    else:
        picks = torch.randint(0, values.numel(), t.shape)
    return values[picks].reshape(t.shape).to(t.dtype)


def assert_outputs_match(expected: Any, got: Sequence[np.ndarray], atol: float, rtol: float) -> None:
    """Tract's outputs ``got`` equal torch's ``expected``: exactly for integers and bools,
    within ``atol``/``rtol`` for floats; complex values compare as (re, im) pairs."""
    expected_list = [expected] if isinstance(expected, torch.Tensor) else list(expected)
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


def export_and_check(
    model: torch.nn.Module,
    args: Any,
    tmp_path: Path,
    *,
    target: Any | None = None,
    name: str = "model.nnef",
    compression_level: int | None = 0,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    run_inputs: Sequence[torch.Tensor] | None = None,
    kept_on_redraw: Mapping[int, str] | None = None,
    no_redraw: str | None = None,
    **export_kwargs: Any,
) -> Path:
    """Export ``model`` (check_io on by default), reload the artefact with tract, run it
    on ``run_inputs`` (default: the export inputs) and assert it matches torch.

    Without ``run_inputs``, the artefact then runs once more on inputs freshly drawn like
    the export inputs (:func:`redrawn`), so that a value frozen into a constant at export
    fails. A test opts out only with a reason: ``kept_on_redraw`` maps the positions of
    inputs kept as traced (indices, sorted boundaries: a fresh draw would be invalid) to
    why; ``no_redraw`` says why the whole second run is skipped."""
    target = target if target is not None else TractNNEF.latest()
    export_kwargs.setdefault("front_end", FRONT_END)
    path = export_model_to_nnef(
        model, args, tmp_path / name, target, compression_level=compression_level, **export_kwargs
    )
    inputs = list(run_inputs) if run_inputs is not None else [
        a for a in as_tuple(args) if isinstance(a, torch.Tensor)
    ]
    artefact = TractArtefact.load(path)
    with torch.no_grad():
        expected = model(*inputs)
    assert_outputs_match(expected, artefact.run(inputs), atol, rtol)
    if run_inputs is None and no_redraw is None and inputs:
        fresh = [t if k in (kept_on_redraw or {}) else redrawn(t) for k, t in enumerate(inputs)]
        with torch.no_grad():
            expected = model(*fresh)
        assert_outputs_match(expected, artefact.run(fresh), atol, rtol)
    return path


def needs_handler(kind: str) -> pytest.MarkDecorator:
    """Strict xfail while no handler for ``kind`` is registered (a family not merged yet);
    turns into a normal test, and an XPASS failure reminds to drop it, once it is."""
    from fastnnef.op.families import load_handlers

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


def run_carrying_states(artefact: TractArtefact, model: torch.nn.Module, states: Sequence[torch.Tensor], width: int,
                        lengths: Sequence[int] = (9, 1, 1)) -> None:
    """Run ``model(x, *states)`` and the artefact on inputs of ``lengths`` new steps each,
    feeding each run's output states (every output after the first) into the next, and
    compare every output at 1e-5: one artefact serves a prompt and the steps after it."""
    states = list(states)
    for new in lengths:
        x = torch.randn(1, new, width)
        with torch.no_grad():
            expected = model(x, *states)
        got = artefact.run([x.numpy(), *(s.numpy() for s in states)])
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(torch.from_numpy(a), b, atol=1e-5, rtol=1e-5)
        states = list(expected[1:])
