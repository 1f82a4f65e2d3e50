"""Names of torch_to_nnef's ``op.helper`` that test harnesses import (served at
``fastnnef.op.helper``; drop-in only).

``IMPLICIT_CAST_SUPPORTED_OPS``: the binary torch functions (``getattr(torch, name)(a, b)``)
that export with operands of different dtypes, promoted as torch does (``torch.result_type``)
before the NNEF op. ``DTYPES_EXPECTED_IMPLICIT_CAST_ORDER``: the dtypes such harnesses
combine, in the reference's order. fastnnef's promotion itself is
``fastnnef.op.aten._common.promote``.
"""

from __future__ import annotations

import torch

__all__ = ["DTYPES_EXPECTED_IMPLICIT_CAST_ORDER", "IMPLICIT_CAST_SUPPORTED_OPS"]

IMPLICIT_CAST_SUPPORTED_OPS = ("mul", "div", "add", "sub", "rsub", "pow")

DTYPES_EXPECTED_IMPLICIT_CAST_ORDER = (
    torch.float64,
    torch.float16,
    torch.float32,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)
