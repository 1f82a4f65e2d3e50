"""Special functions (op/aten/special.py) exported and run in tract, compared with torch over
the ranges torch defines them on: negative and large arguments, poles, tails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fastnnef.inference_target import KhronosNNEF
from tests.helpers import Fn, export_and_check
from tests.op._table import check

INF, NAN = float("inf"), float("nan")


def grid(low: float, high: float, n: int = 97) -> torch.Tensor:
    """An odd-sized sweep of [low, high] as a [n] tensor."""
    return torch.linspace(low, high, n)


def values(*v: float) -> torch.Tensor:
    return torch.tensor(v)


GAMMA_ARGS = lambda: (torch.cat([  # noqa: E731 - table shorthand
    grid(-30.3, 30.7),
    values(0.0, -0.0, -1.0, -7.0, 1.0, 2.0, 1e-30, 1e-5, 0.5, 1e3, 1e5, 1e10, 1e30, -1e-5, -1e5 - 0.5),
]),)
DIGAMMA_ARGS = lambda: (torch.cat([  # noqa: E731
    grid(-20.2, 25.1), values(0.0, -0.0, -3.0, 1.4616321, 1e-6, 1e4, 1e20, -1e4 - 0.25),
]),)
WIDE = lambda: (torch.cat([  # noqa: E731
    grid(-12.0, 12.0), values(0.0, -0.0, 3.75, -3.75, 50.0, 88.0, 89.5, -90.0, 200.0, INF, -INF),
]),)
UNIT_OPEN = lambda: (torch.cat([grid(-0.999, 0.999), values(0.0, 1e-7, -1e-7, 0.9999999, 1.0, -1.0, 1.5)]),)  # noqa: E731
PROBS = lambda: (torch.cat([  # noqa: E731
    grid(0.001, 0.999), values(1e-38, 1e-30, 1e-20, 1e-10, 3e-8, 1e-5, 0.5, 1 - 1e-7, 0.0, 1.0),
]),)
NORMAL = lambda: (torch.cat([grid(-40.0, 12.0), values(0.0, -0.0, 1e-8, INF, -INF)]),)  # noqa: E731
X = lambda: (torch.randn(3, 5),)  # noqa: E731
XY = lambda: (torch.randn(3, 5), torch.randn(5).abs())  # noqa: E731

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("lgamma_wide", torch.lgamma, GAMMA_ARGS, None),
    ("lgamma_f16", lambda x: torch.lgamma(x.half()), lambda: (grid(-8.3, 40.0, 33),), None),
    ("lgamma_f64", lambda x: torch.lgamma(x.double()), GAMMA_ARGS, None),
    ("digamma_f64", lambda x: torch.digamma(x.double()), DIGAMMA_ARGS, None),
    ("erfinv_f64", lambda x: torch.erfinv(x.double()), UNIT_OPEN, None),
    ("lgamma_int", torch.lgamma, lambda: (torch.arange(-3, 30),), None),
    ("gammaln_dyn", torch.special.gammaln, X, {0: {0: "B"}}),
    ("digamma_wide", torch.digamma, DIGAMMA_ARGS, None),
    ("psi_f16", lambda x: torch.special.psi(x.half()), lambda: (grid(0.1, 30.0, 31),), None),
    ("mvlgamma_p1", lambda x: torch.mvlgamma(x, 1), lambda: (grid(0.1, 50.0, 21),), None),
    ("mvlgamma_p3_batched", lambda x: torch.special.multigammaln(x, 3), lambda: (torch.rand(2, 3, 5) * 20 + 1.01,),
     None),
    ("erfc_wide", torch.erfc, lambda: (torch.cat([grid(-6.0, 12.0), values(0.0, INF, -INF, 9.5)]),), None),
    ("erfc_f16", lambda x: torch.special.erfc(x.half()), lambda: (grid(-3.0, 4.0, 29),), None),
    ("erfcx", torch.special.erfcx, lambda: (torch.cat([grid(-9.0, 60.0), values(0.0, 1e4)]),), None),
    ("erfinv", torch.erfinv, UNIT_OPEN, None),
    ("erfinv_f16", lambda x: torch.special.erfinv(x.half()), lambda: (grid(-0.99, 0.99, 23),), None),
    ("ndtr", torch.special.ndtr, NORMAL, None),
    ("log_ndtr", torch.special.log_ndtr, NORMAL, None),
    ("ndtri", torch.special.ndtri, PROBS, None),
    ("i0", torch.i0, WIDE, None),
    ("special_i0_int", torch.special.i0, lambda: (torch.arange(-10, 11),), None),
    ("i0e", torch.special.i0e, WIDE, None),
    ("i1", torch.special.i1, WIDE, None),
    ("i1e", torch.special.i1e, WIDE, None),
    ("i0e_f16_dyn", lambda x: torch.special.i0e(x.half()), X, {0: {1: "T"}}),
    ("sinc", torch.sinc, lambda: (torch.cat([grid(-7.3, 7.3), values(0.0, 1.0, -2.0, 1e4 + 0.5)]),), None),
    ("logit", torch.logit, lambda: (torch.cat([grid(0.001, 0.999), values(0.0, 1.0)]),), None),
    ("logit_eps", lambda x: torch.special.logit(x, 1e-3), lambda: (torch.rand(3, 5) * 1.2 - 0.1,), None),
    ("entr", torch.special.entr, lambda: (torch.cat([grid(-1.0, 5.0), values(0.0, 1e-30, NAN)]),), None),
    ("xlogy", torch.xlogy, lambda: (values(0.0, 0.0, 1.0, 2.5, -3.0, 0.0), values(NAN, 0.0, 0.0, 4.0, 0.5, 3.0)), None),
    ("xlogy_broadcast", torch.special.xlogy, XY, None),
    ("xlogy_scalar_self", lambda y: torch.xlogy(2.0, y), lambda: (torch.rand(3, 5) + 0.1,), None),
    ("xlogy_scalar_other", lambda x: torch.xlogy(x, 3.0), X, None),
    ("xlog1py", torch.special.xlog1py, lambda: (values(0.0, 0.0, 1.0, 2.5, 1.0), values(NAN, -1.0, 1e-7, 4.0, -0.5)),
     None),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_special(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any, tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    f16 = fn(*inputs).dtype == torch.float16
    check(fn, inputs, tmp_path, dyn, atol=1e-2 if f16 else 1e-4, rtol=5e-3 if f16 else 5e-4)


@pytest.mark.parametrize("fn", [torch.lgamma, torch.digamma, torch.erfc, torch.special.i0e, torch.special.log_ndtr,
                                torch.sinc],
                         ids=["lgamma", "digamma", "erfc", "i0e", "log_ndtr", "sinc"])
def test_strict_nnef(fn: Callable[..., Any], tmp_path: Any) -> None:
    """Plain NNEF operators only: the strict (Khronos) export needs no tract extension."""
    x = torch.cat([grid(-9.7, 9.9, 21), values(0.0, -3.0)]) if fn is not torch.special.log_ndtr else grid(-30.0, 9.0,
                                                                                                          21)
    path = export_and_check(Fn(fn), (x,), tmp_path, target=KhronosNNEF.latest(), compression_level=None, atol=1e-4,
                            rtol=5e-4)
    assert "tract_" not in (path / "graph.nnef").read_text()
