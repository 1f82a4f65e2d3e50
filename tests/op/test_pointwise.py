"""Elementwise math beyond arithmetic (op/aten/pointwise.py) exported and run in tract,
compared with torch: broadcasting, scalars, integer and f16 inputs, infinities, NaN, -0.0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.inference_target import KhronosNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check

INF, NAN = float("inf"), float("nan")


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int, low: int = -9, high: int = 10) -> torch.Tensor:
    return torch.randint(low, high, shape)


def values(*v: float) -> torch.Tensor:
    return torch.tensor(v)


SPECIAL = values(0.0, -0.0, 1.5, -2.5, INF, -INF, NAN, 1e-40, 3.0)
XY = lambda: (randn(3, 5), randn(3, 5))  # noqa: E731 - table shorthand
XB = lambda: (randn(2, 3, 5), randn(5))  # noqa: E731 - broadcast from a lower rank
X = lambda: (randn(3, 5) * 4,)  # noqa: E731
F16 = lambda: (randn(3, 5).half() * 4,)  # noqa: E731
POS = lambda: (torch.rand(3, 5) * 10 + 0.01,)  # noqa: E731

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=-0.5), lambda: (randn(3, 5), randn(5), randn(2, 1, 5)),
     None),
    ("addcmul_int", lambda a, b, c: torch.addcmul(a, b, c, value=3), lambda: (ints(3, 5), ints(3, 5), ints(5)), None),
    ("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=2.0),
     lambda: (randn(3, 5), randn(3, 5), torch.rand(5) + 0.5), None),
    ("addcdiv_f16_dyn", lambda a, b, c: torch.addcdiv(a, b, c),
     lambda: (randn(3, 5).half(), randn(3, 5).half(), (torch.rand(3, 5) + 0.5).half()),
     {0: {0: "B"}, 1: {0: "B"}, 2: {0: "B"}}),
    ("lerp_scalar_low", lambda a, b: torch.lerp(a, b, 0.25), XB, None),
    ("lerp_scalar_high", lambda a, b: torch.lerp(a, b, 0.9), XY, None),
    ("lerp_tensor", lambda a, b, w: torch.lerp(a, b, w), lambda: (randn(3, 5), randn(3, 5), torch.rand(5) * 2 - 0.5),
     None),
    ("atan2", torch.atan2, XB, None),
    ("atan2_signed_zeros", torch.atan2,
     lambda: (values(0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 2.0, -3.0), values(0.0, 0.0, -0.0, -0.0, 0.0, -0.0, -1.0, -1.0)),
     None),
    ("arctan2_ints", torch.arctan2, lambda: (ints(3, 5), ints(3, 5)), None),
    ("hypot", torch.hypot, XB, None),
    ("hypot_extremes", torch.hypot, lambda: (values(3e30, 1e-30, INF, 0.0, 4.0), values(4e30, 0.0, INF, 0.0, -3.0)),
     None),
    ("hypot_f16_large", torch.hypot, lambda: (randn(3, 5).half() * 500, randn(3, 5).half() * 500), None),
    ("copysign", torch.copysign, lambda: (randn(9), SPECIAL), None),
    ("copysign_scalar_neg_zero", lambda a: torch.copysign(a, -0.0), X, None),
    ("copysign_ints", torch.copysign, lambda: (ints(3, 5), ints(5)), None),
    ("deg2rad", torch.deg2rad, X, None),
    ("rad2deg_f16", torch.rad2deg, F16, None),
    ("sgn", torch.sgn, lambda: (SPECIAL[:6],), None),
    ("sgn_int", torch.sgn, lambda: (ints(3, 5),), None),
    ("positive", torch.positive, X, None),
    ("trunc", torch.trunc, lambda: (torch.cat([randn(20) * 5, SPECIAL]),), None),
    ("fix_int", torch.fix, lambda: (ints(3, 5),), None),
    ("frac", torch.frac, lambda: (torch.cat([randn(20) * 5, values(-2.5, 2.5, 0.0)]),), None),
    ("fmod", torch.fmod, lambda: (randn(3, 5) * 10, torch.rand(5) * 3 + 0.2), None),
    ("fmod_negative_divisor", torch.fmod, lambda: (randn(3, 5) * 10, -torch.rand(3, 5) - 0.5), None),
    ("fmod_inexact_quotient", torch.fmod, lambda: (values(0.3, -0.3, 1.0, 7.5), values(0.1, 0.1, 0.1, -2.5)), None),
    ("fmod_scalar", lambda a: torch.fmod(a, -1.5), X, None),
    ("fmod_ints", torch.fmod, lambda: (ints(3, 5, low=-20, high=20), values(3, -3, 7, -1, 2).long()), None),
    ("exp2", torch.exp2, X, None),
    ("exp2_int", torch.special.exp2, lambda: (ints(3, 5),), None),
    ("log10", torch.log10, POS, None),
    ("log10_f16", torch.log10, lambda: ((torch.rand(3, 5) * 100 + 0.1).half(),), None),
    ("logaddexp", torch.logaddexp, lambda: (randn(3, 5) * 30, randn(5) * 30), None),
    ("logaddexp_infinities", torch.logaddexp, lambda: (values(-INF, INF, -INF, 1.0, 100.0), values(-INF, INF, 2.0, -INF,
                                                                                                   -100.0)), None),
    ("logaddexp2", torch.logaddexp2, XB, None),
    ("float_power", torch.float_power, lambda: (torch.rand(3, 5) + 0.1, randn(3, 5)), None),
    ("float_power_scalar", lambda a: torch.float_power(a, 3), X, None),
    ("float_power_int_base", lambda a: torch.float_power(2, a), lambda: (ints(3, 5),), None),
    ("ldexp", torch.ldexp, lambda: (randn(3, 5), ints(5, low=-20, high=20)), None),
    ("frexp", torch.frexp, lambda: (torch.cat([randn(20) * 100, values(0.0, -0.0, 8.0, -0.5, 1.0, 3.0, 1e-40, 1e30, INF,
                                                                       -INF, NAN)]),), None),
    ("frexp_f16_dyn", torch.frexp, lambda: (randn(3, 5).half() * 50,), {0: {0: "B"}}),
    ("heaviside", torch.heaviside, lambda: (values(-1.0, 0.0, 2.0, NAN, -0.0), values(0.5, 0.5, 0.5, 0.5, 7.0)), None),
    ("heaviside_ints", torch.heaviside, lambda: (ints(3, 5, low=-2, high=3), ints(5)), None),
    ("isnan", torch.isnan, lambda: (SPECIAL,), None),
    ("isnan_int", torch.isnan, lambda: (ints(3, 5),), None),
    ("isinf", torch.isinf, lambda: (SPECIAL,), None),
    ("isposinf", torch.isposinf, lambda: (SPECIAL,), None),
    ("isneginf_f16", torch.isneginf, lambda: (SPECIAL.half(),), None),
    ("isfinite", torch.isfinite, lambda: (SPECIAL,), None),
    ("isfinite_int", torch.isfinite, lambda: (ints(3, 5),), None),
    ("isinf_bool", torch.isinf, lambda: (randn(3, 5) > 0,), None),
    ("isfinite_bool", torch.isfinite, lambda: (randn(3, 5) > 0,), None),
    ("signbit", torch.signbit, lambda: (SPECIAL[:7],), None),
    ("signbit_int", torch.signbit, lambda: (ints(3, 5),), None),
    ("isclose", lambda a, b: torch.isclose(a, b, rtol=1e-2, atol=1e-3),
     lambda: (values(1.0, 1.0, 0.0, INF, INF, NAN, 100.0), values(1.005, 1.1, 0.0005, INF, -INF, NAN, 101.5)), None),
    ("isclose_equal_nan", lambda a, b: torch.isclose(a, b, equal_nan=True),
     lambda: (values(NAN, NAN, 1.0), values(NAN, 1.0, 1.0)), None),
    ("isclose_exact", lambda a, b: torch.isclose(a, b, rtol=0, atol=0), XY, None),
    ("isclose_ints", lambda a, b: torch.isclose(a, b, rtol=0.1, atol=1), lambda: (ints(3, 5), ints(3, 5)), None),
    ("nan_to_num", torch.nan_to_num, lambda: (SPECIAL,), None),
    ("nan_to_num_values", lambda a: torch.nan_to_num(a, nan=-1.0, posinf=9.0, neginf=-9.0), lambda: (SPECIAL,), None),
    ("nan_to_num_f16", torch.nan_to_num, lambda: (SPECIAL.half(),), None),
    ("nan_to_num_int", torch.nan_to_num, lambda: (ints(3, 5),), None),
    ("tanhshrink", torch.nn.functional.tanhshrink, X, None),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_pointwise(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                   tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    out = fn(*inputs)
    f16 = any(t.dtype == torch.float16 for t in (out if isinstance(out, tuple) else (out,)))
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4)


@pytest.mark.parametrize("fn", [torch.atan2, torch.hypot, torch.copysign, torch.isclose,
                                lambda a, b: torch.isnan(a / b) | torch.isinf(a / b)],
                         ids=["atan2", "hypot", "copysign", "isclose", "isnan_isinf"])
def test_strict_nnef(fn: Callable[..., Any], tmp_path: Any) -> None:
    """Plain NNEF operators only: the strict (Khronos) export needs no tract extension."""
    a, b = values(1.0, -1.0, 0.0, 0.0, 3.0, INF), values(0.0, 0.0, 0.0, -2.0, 3.0000001, 1.0)
    path = export_and_check(Fn(fn), (a, b), tmp_path, target=KhronosNNEF.latest(), compression_level=None)
    assert "tract_" not in (path / "graph.nnef").read_text()
