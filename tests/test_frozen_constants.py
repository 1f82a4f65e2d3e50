"""The shared test helper catches values frozen into constants: ``export_and_check``
runs every artefact once more on inputs drawn like the traced ones (tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import TRACER_ALLOWED, Fn, export_and_check, redrawn


class MeanAsPythonFloat(torch.nn.Module):
    """``float(x.mean())`` is a Python number to the tracer: the traced graph holds the
    mean of the traced input as a constant, right on that input only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + float(x.mean())


@TRACER_ALLOWED  # the tracer's freezing is what this test shows
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_frozen_value_fails_on_the_fresh_draw(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    with pytest.raises(AssertionError, match="Mismatched elements"):
        export_and_check(MeanAsPythonFloat(), (x,), tmp_path, front_end="jit")
    # The traced input alone would not have caught it:
    export_and_check(MeanAsPythonFloat(), (x,), tmp_path, name="same.nnef", front_end="jit",
                     no_redraw="shows that the traced input alone misses the frozen mean")


def test_an_input_kept_on_the_redraw_stays_as_traced(tmp_path: Path) -> None:
    torch.manual_seed(0)
    export_and_check(Fn(lambda x, i: x.index_select(0, i)), (torch.randn(5, 3), torch.tensor([4, 0])), tmp_path,
                     kept_on_redraw={1: "exercises the opt-out"})


@pytest.mark.parametrize("make", [
    pytest.param(lambda: torch.rand(50) * 0.98 + 0.01, id="in (0, 1)"),
    pytest.param(lambda: torch.tensor([0.0, -0.0, 1.5, float("inf"), float("nan"), -2.0]), id="specials"),
    pytest.param(lambda: torch.tensor([3, -3, 7, -1, 2]), id="ints-without-zero"),
    pytest.param(lambda: torch.randperm(12).reshape(3, 4), id="distinct-ints"),
    pytest.param(lambda: torch.randn(4, 6).sort(-1).values, id="sorted"),
    pytest.param(lambda: torch.randn(3, 2, dtype=torch.complex64), id="complex"),
    pytest.param(lambda: torch.rand(4, 5) > 0.5, id="bool"),
    pytest.param(lambda: torch.randn(2, 3).half(), id="f16"),
])
def test_redrawn_is_new_and_like_the_original(make: object) -> None:
    torch.manual_seed(0)
    t = make()  # type: ignore[operator]
    fresh = redrawn(t)
    assert fresh.shape == t.shape and fresh.dtype == t.dtype
    assert not torch.equal(fresh, t)
    if t.dtype == torch.bool or t.is_complex():
        return
    finite = t.isfinite() if t.is_floating_point() else torch.ones_like(t, dtype=torch.bool)
    assert torch.equal(fresh[~finite].isnan(), t[~finite].isnan())  # inf and nan stay in place
    assert torch.equal(fresh[~finite & ~t.isnan()], t[~finite & ~t.isnan()])
    assert fresh[finite].min() >= t[finite].min() and fresh[finite].max() <= t[finite].max()
    if not (t == 0).any():
        assert not (fresh == 0).any()
    if t.unique().numel() == t.numel() and not t.is_floating_point():
        assert fresh.unique().numel() == fresh.numel()
    if bool((t[..., 1:] >= t[..., :-1]).all()):
        assert bool((fresh[..., 1:] >= fresh[..., :-1]).all())


# Known bug of the jit front end (torch_graph, not the op handlers): torch.jit.trace records
# a tensor turned into a Python number (``.item()``, ``float(t)``, ``int(t)``) as a
# constant, warning with a TracerWarning that the export does not act on (and that
# pyproject's filterwarnings ignores). An input-derived number is thus frozen at its traced
# value; the redraw shows the bug. The torch.export front end (issue 25) keeps ``.item()``
# in the graph (its unbacked symbol is the 0-d tensor, read at run time) and refuses
# ``float(t)`` naming the line (torch.export cannot guard on a data-dependent float).
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("front_end", [
    pytest.param("jit", marks=[TRACER_ALLOWED, pytest.mark.xfail(
        strict=True, raises=AssertionError,
        reason="BUG: tensor-to-Python-number conversions of inputs are frozen by the trace")]),
    "export",
])
@pytest.mark.parametrize("fn", [
    pytest.param(lambda x, s: x * s.item(), id="item"),
    pytest.param(lambda x, s: x * float(s), id="float"),
    pytest.param(lambda x, s: x.clamp(max=s.item()), id="clamp-bound"),
    pytest.param(lambda x, s: torch.nn.functional.pad(x, (1, 1), value=float(s)), id="pad-value"),
])
def test_input_turned_into_a_python_number_is_refused_or_kept(fn: object, front_end: str, tmp_path: Path) -> None:
    from fastnnef.exceptions import T2NError

    torch.manual_seed(0)
    try:
        export_and_check(Fn(fn), (torch.linspace(-3, 3, 7), torch.tensor(0.5)), tmp_path,  # type: ignore[arg-type]
                         front_end=front_end)
    except T2NError:
        pass  # refused: what the fix may do instead of keeping the value in the graph
