"""Quantized weights (torch_to_nnef's ``tensor.quant``): schemes and ``QTensor`` in
``base``, tract's Q4_0 in ``qtract``."""

from fastnnef.tensor.quant.base import (
    QTENSOR_UNSUPPORTED,
    QTENSOR_UNSUPPORTED_MSG,
    QScalePerGroupF16,
    QScheme,
    QTensor,
    U8Compressor,
    check_percentile,
    qscale_per_group_f16_min_max_calibration,
)
from fastnnef.tensor.quant.qtract import (
    Q4_0_BLOCK_BYTES,
    Q4_0_GROUP,
    QTensorTract,
    QTensorTractScaleOnly,
    check_q4_0_shape,
    fp_to_tract_q4_0_with_min_max_calibration,
    q4_0_encoding,
)

__all__ = [
    "Q4_0_BLOCK_BYTES",
    "Q4_0_GROUP",
    "QTENSOR_UNSUPPORTED",
    "QTENSOR_UNSUPPORTED_MSG",
    "QScalePerGroupF16",
    "QScheme",
    "QTensor",
    "QTensorTract",
    "QTensorTractScaleOnly",
    "U8Compressor",
    "check_percentile",
    "check_q4_0_shape",
    "fp_to_tract_q4_0_with_min_max_calibration",
    "q4_0_encoding",
    "qscale_per_group_f16_min_max_calibration",
]
