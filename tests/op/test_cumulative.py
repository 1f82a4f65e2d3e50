"""Cumulative ops and the trapezoid rule (op/aten/cumulative.py) exported and run in tract,
compared with torch, along static and dynamic axes; cumsum's scan for tract before 0.23.9."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.exceptions import T2NErrorStrictNNEFSpec
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.utils import SemanticVersion
from tests.helpers import Fn, export_and_check
from tests.op._table import check

NAN, INF = float("nan"), float("inf")
OLD_TRACT = TractNNEF(SemanticVersion.from_str("0.22.1"))


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int, low: int = -4, high: int = 5) -> torch.Tensor:
    return torch.randint(low, high, shape)


X = lambda: (randn(3, 7),)  # noqa: E731 - table shorthand
X3 = lambda: (randn(2, 5, 3),)  # noqa: E731
TIES = lambda: (torch.tensor([[1.0, 3.0, 2.0, 3.0, 3.0, -1.0], [0.0, -1.0, 5.0, 5.0, NAN, 9.0]]),)  # noqa: E731
DYN_T = {0: {1: "T"}}

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("cumprod", lambda x: torch.cumprod(x, 1), X, None),
    ("cumprod_negative_dim_zeros", lambda x: torch.cumprod(x.round(), -2), X3, None),
    ("cumprod_int", lambda x: torch.cumprod(x, 0), lambda: (ints(5, 3),), None),
    ("cumprod_dtype_f16", lambda x: torch.cumprod(x.half(), 1), lambda: (torch.rand(3, 6) + 0.5,), None),
    ("cumprod_dyn", lambda x: torch.cumprod(x, 1), X, DYN_T),
    ("cummax", lambda x: torch.cummax(x, 1), X3, None),
    ("cummax_ties_nan", lambda x: torch.cummax(x, 1), TIES, None),
    ("cummin_ties_nan", lambda x: torch.cummin(x, -1), TIES, None),
    ("cummin_int_dim0", lambda x: torch.cummin(x, 0), lambda: (ints(6, 3),), None),
    ("cummax_values_f16", lambda x: torch.cummax(x.half(), 0)[0], X, None),
    ("cummax_dyn", lambda x: torch.cummax(x, 1), X, DYN_T),
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, 1), X, None),
    ("logcumsumexp_wide_spread", lambda x: torch.logcumsumexp(x, 0),
     lambda: (torch.tensor([-300.0, 0.0, -INF, 50.0, -INF, 200.0, 200.0]),), None),
    ("logcumsumexp_all_minus_inf", lambda x: torch.logcumsumexp(x, 1), lambda: (torch.full((2, 3), -INF),), None),
    ("logcumsumexp_dyn", lambda x: torch.logcumsumexp(x, -1), X, DYN_T),
    ("trapz", lambda y: torch.trapz(y), X, None),
    ("trapezoid_dx_dim", lambda y: torch.trapezoid(y, dx=0.5, dim=1), X3, None),
    ("trapezoid_x_1d", lambda y, x: torch.trapezoid(y, x, dim=1), lambda: (randn(2, 5, 3), torch.rand(5).cumsum(0)),
     None),
    ("trapz_x_broadcast", lambda y, x: torch.trapz(y, x), lambda: (randn(3, 7), torch.rand(3, 7).cumsum(1)), None),
    ("trapezoid_int", lambda y: torch.trapezoid(y), lambda: (ints(3, 4),), None),
    ("trapezoid_dyn", lambda y: torch.trapezoid(y, dx=2.0), X, DYN_T),
    ("cumulative_trapezoid", lambda y: torch.cumulative_trapezoid(y), X, None),
    ("cumulative_trapezoid_x", lambda y, x: torch.cumulative_trapezoid(y, x, dim=0),
     lambda: (randn(6, 2), torch.rand(6).cumsum(0)), None),
    ("cumulative_trapezoid_dyn", lambda y: torch.cumulative_trapezoid(y, dx=0.1, dim=1), X, DYN_T),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_cumulative(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                    tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    out = fn(*inputs)
    f16 = any(t.dtype == torch.float16 for t in (out if isinstance(out, tuple) else (out,)))
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4)


@pytest.mark.parametrize("fn, x", [
    (lambda x: torch.cumsum(x, 1), randn(3, 7)),
    (lambda x: torch.cumsum(x, 0), ints(5, 2)),
    (lambda x: torch.cumsum(x > 0, -1), randn(2, 6)),
    (lambda x: torch.cumulative_trapezoid(x), randn(3, 7)),
], ids=["f32", "int", "bool_to_int", "cumulative_trapezoid"])
def test_cumsum_scan_before_native_op(fn: Callable[..., Any], x: torch.Tensor, tmp_path: Any) -> None:
    """tract before 0.23.9 has no tract_core_cumsum: the sum is a scan, dynamic axis included."""
    target = OLD_TRACT.with_dynamic_axes({"x": {1: "T"}})
    path = export_and_check(Fn(fn), (x,), tmp_path, target=target, input_names=["x"], compression_level=None)
    text = (path / "graph.nnef").read_text()
    assert "tract_core_scan" in text and "tract_core_cumsum" not in text
    longer = (torch.randn(x.shape[0], x.shape[1] + 4) if x.is_floating_point()
              else torch.randint(-4, 5, (x.shape[0], x.shape[1] + 4)))
    export_and_check(Fn(fn), (x,), tmp_path, target=target, input_names=["x"], name="grown.nnef", run_inputs=[longer])


@pytest.mark.parametrize("fn", [lambda x: torch.cumprod(x, 0), lambda x: torch.cummin(x, 0)], ids=["cumprod", "cummin"])
def test_scan_is_refused_in_strict_nnef(fn: Callable[..., Any], tmp_path: Any) -> None:
    with pytest.raises(T2NErrorStrictNNEFSpec, match="a running reduction is a tract_core_scan, which strict NNEF"):
        export_and_check(Fn(fn), (randn(4),), tmp_path, target=KhronosNNEF.latest())
