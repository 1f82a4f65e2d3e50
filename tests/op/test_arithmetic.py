"""Elementwise math, comparisons and logic (op/aten/arithmetic.py) exported and run in
tract, compared with torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.op._table import check


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ints(*shape: int, low: int = -7, high: int = 8) -> torch.Tensor:
    return torch.randint(low, high, shape)


def positive(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) + 0.5


XY = lambda: (randn(3, 4), randn(3, 4))  # noqa: E731 - table shorthand
XB = lambda: (randn(2, 3, 4), randn(4))  # noqa: E731 - broadcast from a lower rank
X = lambda: (randn(3, 4),)  # noqa: E731
IJ = lambda: (ints(3, 4), ints(3, 4, low=1))  # noqa: E731 - divisor never 0
UNIT = lambda: (torch.rand(3, 4) * 1.8 - 0.9,)  # noqa: E731 - inside (-1, 1)
BOOLS = lambda: (torch.rand(3, 4) > 0.5, torch.rand(4) > 0.5)  # noqa: E731

# (id, fn, inputs factory, dynamic axes or None)
CASES = [
    ("add", lambda a, b: a + b, XY, None),
    ("add_broadcast_rank", lambda a, b: a + b, XB, None),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), XY, None),
    ("add_scalar", lambda a: a + 3, X, None),
    ("add_int_float_scalar", lambda a: a + 0.5, lambda: (ints(3, 4),), None),
    ("add_int_float_tensor", lambda a, b: a + b, lambda: (ints(3, 4), randn(4)), None),
    ("add_dyn", lambda a, b: a + b, XB, {0: {1: "S"}}),
    ("sub", lambda a, b: a - b, XB, None),
    ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3), IJ, None),
    ("rsub", lambda a: 1 - a, X, None),
    ("mul", lambda a, b: a * b, XB, None),
    ("mul_scalar_f16", lambda a: a.half() * 0.5, X, None),
    ("div", lambda a, b: a / b, lambda: (randn(3, 4), positive(3, 4)), None),
    ("div_ints_true", lambda a, b: a / b, IJ, None),
    ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda: (randn(3, 4) * 5, positive(3, 4)), None),
    ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda: (randn(3, 4) * 5, positive(3, 4)), None),
    ("div_floor_ints", lambda a, b: torch.div(a, b, rounding_mode="floor"), IJ, None),
    ("div_trunc_ints", lambda a, b: torch.div(a, b, rounding_mode="trunc"), IJ, None),
    ("floor_divide", lambda a, b: a // b, IJ, None),
    ("floor_divide_float", lambda a: a // 0.7, X, None),
    ("remainder", lambda a, b: a % b, IJ, None),
    ("remainder_float_negative_divisor", lambda a: torch.remainder(a, -1.5), X, None),
    ("pow_tensor", lambda a, b: a ** b, lambda: (positive(3, 4), randn(3, 4)), None),
    ("pow_2", lambda a: a ** 2, X, None),
    ("pow_half", lambda a: a ** 0.5, lambda: (positive(3, 4),), None),
    ("pow_3", lambda a: torch.pow(a, 3), X, None),
    ("rpow", lambda a: 2 ** a, X, None),
    ("pow_int8_wraps", lambda a, b: a.to(torch.int8) ** b.to(torch.int8),
     lambda: (ints(3, 4, low=-6, high=7), ints(4, low=0, high=6)), None),
    ("pow_uint8_scalar_exponent", lambda a: a.to(torch.uint8) ** 3, lambda: (ints(2, 3, 4, low=0, high=9),), None),
    ("pow_int16_scalar_base", lambda a: 3 ** a.to(torch.int16), lambda: (ints(3, 4, low=0, high=12),), {0: {1: "S"}}),
    ("maximum", lambda a, b: torch.maximum(a, b), XB, None),
    ("minimum", lambda a, b: torch.minimum(a, b), XY, None),
    ("fmax", lambda a, b: torch.fmax(a, b), XY, None),
    ("eq", lambda a, b: a == b, lambda: (ints(3, 4, low=0, high=3), ints(4, low=0, high=3)), None),
    ("ne_scalar", lambda a: a != 0, lambda: (ints(3, 4, low=0, high=3),), None),
    ("lt", lambda a, b: a < b, XB, None),
    ("gt_scalar", lambda a: a > 0.25, X, None),
    ("le_mixed_dtypes", lambda a, b: a <= b, lambda: (randn(3, 4), ints(3, 4, low=-1, high=2)), None),
    ("ge", lambda a, b: torch.ge(a, b), XY, None),
    ("logical_and", lambda a, b: a & b, BOOLS, None),
    ("logical_or", lambda a, b: torch.logical_or(a, b), BOOLS, None),
    ("logical_xor", lambda a, b: a ^ b, BOOLS, None),
    ("logical_not", lambda a, b: ~a, BOOLS, None),
    ("add_bools_is_or_broadcast", lambda a, b: a + b, BOOLS, None),
    ("mul_bools_is_and_broadcast", lambda a, b: b * a, BOOLS, None),
    ("add_bool_scalar", lambda a, b: torch.add(a, True) & b, BOOLS, None),
    ("mul_bools_dyn", lambda a, b: a * b, BOOLS, {0: {0: "B"}}),
    ("eq_ne_bools", lambda a, b: (a == b, a != b), BOOLS, None),
    ("order_bools", lambda a, b: (a < b, a > b, a <= b, a >= b), BOOLS, None),
    ("eq_bool_tensor_scalar", lambda a, b: a == torch.tensor(True), BOOLS, None),
    ("eq_bool_int", lambda a, b: a == b.long(), BOOLS, None),
    ("minimum_maximum_bools_dyn", lambda a, b: (torch.minimum(a, b), torch.fmax(a, b)), BOOLS, {0: {0: "B"}}),
    ("logical_and_floats", lambda a, b: torch.logical_and(a, b), lambda: (randn(3, 4).relu(), randn(3, 4).relu()),
     None),
    ("logical_not_float", lambda a: torch.logical_not(a.relu()), X, None),
    ("bitwise_and_ints", lambda a, b: a & b, IJ, None),
    ("bitwise_and_broadcast_scalar", lambda a: torch.bitwise_and(a, 6), lambda: (ints(2, 3, 4),), None),
    ("bitwise_or_int32", lambda a, b: torch.bitwise_or(a.int(), b.int()), IJ, None),
    ("bitwise_xor_mixed_widths", lambda a, b: a.to(torch.int16) ^ b, lambda: (ints(3, 4), ints(4)), None),
    ("bitwise_not_ints", lambda a: ~a, lambda: (ints(3, 4),), None),
    ("bitwise_not_uint8", lambda a: torch.bitwise_not(a.to(torch.uint8)), lambda: (ints(3, 4, low=0, high=255),), None),
    ("lshift", lambda a, b: a << b, lambda: (ints(3, 4), ints(3, 4, low=0, high=9)), None),
    ("rshift_negative_values", lambda a, b: a >> b, lambda: (ints(3, 4, low=-300, high=300), ints(4, low=0, high=5)),
     None),
    ("bitwise_left_shift_scalar", lambda a: torch.bitwise_left_shift(a, 3), lambda: (ints(3, 4),), None),
    ("bitwise_right_shift_int32_dyn", lambda a, b: torch.bitwise_right_shift(a.int(), b.int()),
     lambda: (ints(3, 4, low=-99, high=99), ints(3, 4, low=0, high=4)), {0: {0: "B"}, 1: {0: "B"}}),
    ("neg", lambda a: -a, X, None),
    ("abs", lambda a: a.abs(), X, None),
    ("exp", lambda a: a.exp(), X, None),
    ("log", lambda a: a.log(), lambda: (positive(3, 4),), None),
    ("sqrt", lambda a: a.sqrt(), lambda: (positive(3, 4),), None),
    ("rsqrt", lambda a: a.rsqrt(), lambda: (positive(3, 4),), None),
    ("sin", lambda a: a.sin(), X, None),
    ("cos", lambda a: a.cos(), X, None),
    ("tan", lambda a: a.tan(), UNIT, None),
    ("asin", lambda a: a.asin(), UNIT, None),
    ("acos", lambda a: a.acos(), UNIT, None),
    ("atan", lambda a: a.atan(), X, None),
    ("sinh", lambda a: a.sinh(), X, None),
    ("cosh", lambda a: a.cosh(), X, None),
    ("asinh", lambda a: a.asinh(), X, None),
    ("acosh", lambda a: (a + 1).acosh(), lambda: (positive(3, 4),), None),
    ("atanh", lambda a: a.atanh(), UNIT, None),
    ("floor", lambda a: (a * 3).floor(), X, None),
    ("ceil", lambda a: (a * 3).ceil(), X, None),
    ("round_half_even", lambda a: a.round(), lambda: (torch.tensor([0.5, 1.5, 2.5, -0.5, -1.7, 2.2]),), None),
    ("sign", lambda a: a.sign(), lambda: (torch.tensor([-2.0, 0.0, 3.0]),), None),
    ("reciprocal", lambda a: a.reciprocal(), lambda: (positive(3, 4),), None),
    ("square", lambda a: a.square(), X, None),
    ("erf", lambda a: torch.erf(a), X, None),
    ("log2", lambda a: a.log2(), lambda: (positive(3, 4),), None),
    ("log1p", lambda a: a.log1p(), lambda: (positive(3, 4),), None),
    ("expm1", lambda a: a.expm1(), X, None),
    ("exp_int_promotes", lambda a: a.exp(), lambda: (ints(3, 4, low=-2, high=3),), None),
    ("unary_dyn", lambda a: a.exp() * math.pi, X, {0: {0: "B"}}),
]


@pytest.mark.parametrize("fn, make, dyn", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_arithmetic(fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], dyn: Any,
                    tmp_path: Any) -> None:
    torch.manual_seed(0)
    inputs = make()
    check(fn, inputs, tmp_path, dyn, atol=2e-3, rtol=2e-3)


def test_integer_squares(tmp_path: Any) -> None:
    """tract has no integer square kernel (and rewrites x * x into one): exact through f64."""
    check(lambda a: a * a + a**2 + a.square(), (torch.randint(-1000, 1000, (3, 5)),), tmp_path, atol=0, rtol=0)


def test_log1p_expm1_keep_relative_precision_near_zero(tmp_path: Any) -> None:
    x = torch.tensor([[1e-7, -1e-7, 3e-5, 1e-3, 0.5, 10.0, 0.0, -0.9]])
    check(lambda a: torch.log1p(a) / torch.where(a == 0, 1.0, a), (x,), tmp_path, atol=1e-6, rtol=1e-6)
    check(lambda a: torch.expm1(a) / torch.where(a == 0, 1.0, a), (x,), tmp_path, atol=1e-6, rtol=1e-6)
