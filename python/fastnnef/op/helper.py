"""torch_to_nnef's ``op.helper`` path: the names test harnesses import from it, drop-in
only (fastnnef/compat/op_helper.py)."""

from fastnnef.compat.op_helper import DTYPES_EXPECTED_IMPLICIT_CAST_ORDER, IMPLICIT_CAST_SUPPORTED_OPS

__all__ = ["DTYPES_EXPECTED_IMPLICIT_CAST_ORDER", "IMPLICIT_CAST_SUPPORTED_OPS"]
