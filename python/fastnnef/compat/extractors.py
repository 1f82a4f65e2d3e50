"""torch_to_nnef's built-in module extractors that fastnnef does not need, kept so that
their names import (served at ``fastnnef.op.custom_extractors``; drop-in only).

None is registered (``REGISTERED = False``): ``torch.jit.trace`` already records
``nn.LSTM``/``nn.GRU``/``nn.RNN`` as one ``aten::lstm``/``gru``/``rnn_*`` op, which
op/aten/recurrent.py exports whole, and ``nn.LSTMCell`` traces into ops that export as they
are; the reference's own MoE modules do not exist here (transformers' MoE blocks export
through ``op/custom_extractors/moe.py``).
"""

from __future__ import annotations

from torch import nn

from fastnnef.op.custom_extractors.base import ModuleInfoExtractor

__all__ = [
    "GRUExtractor", "Gemma4RoutedExpertsExtractor", "LSTMCellExtractor", "LSTMExtractor", "MoEFFNExtractor",
    "RNNExtractor",
]


class LSTMExtractor(ModuleInfoExtractor):
    """Kept for import compatibility: ``nn.LSTM`` exports through ``aten::lstm`` (see above)."""

    MODULE_CLASS = nn.LSTM
    REGISTERED = False


class GRUExtractor(ModuleInfoExtractor):
    """Kept for import compatibility: ``nn.GRU`` exports through ``aten::gru``."""

    MODULE_CLASS = nn.GRU
    REGISTERED = False


class RNNExtractor(ModuleInfoExtractor):
    """Kept for import compatibility: ``nn.RNN`` exports through ``aten::rnn_tanh``/``rnn_relu``."""

    MODULE_CLASS = nn.RNN
    REGISTERED = False


class LSTMCellExtractor(ModuleInfoExtractor):
    """Kept for import compatibility: ``nn.LSTMCell`` is traced into linear, chunk,
    sigmoid and tanh ops, which export as they are."""

    MODULE_CLASS = nn.LSTMCell
    REGISTERED = False


class MoEFFNExtractor(ModuleInfoExtractor):
    """Kept for import compatibility: the reference's own ``MoEFFN`` module does not exist
    here. transformers' sparse MoE blocks export as ``tract_moe_ffn`` through
    ``fastnnef.op.custom_extractors.moe`` (chosen per block by fastnnef/llm/moe.py)."""

    REGISTERED = False


class Gemma4RoutedExpertsExtractor(ModuleInfoExtractor):
    """Kept for import compatibility (see ``MoEFFNExtractor``)."""

    REGISTERED = False
