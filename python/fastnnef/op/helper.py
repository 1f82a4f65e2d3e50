"""torch_to_nnef's ``op.helper`` path: the names test harnesses import from it, drop-in
only, served here by fastnnef/compat/op_helper.py on first use."""

from typing import Any

from fastnnef.reference_names import reference_name

__all__ = ["DTYPES_EXPECTED_IMPLICIT_CAST_ORDER", "IMPLICIT_CAST_SUPPORTED_OPS"]  # noqa: F822 - served by __getattr__


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
