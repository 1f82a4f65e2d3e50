"""Module extractors: take over the NNEF export of a whole ``nn.Module`` class.

Mirrors ``torch_to_nnef.op.custom_extractors``. While the model is traced, a submodule whose
exact class has an extractor is not traced through: its call is recorded whole
(torch_graph/module_calls.py) and becomes one IR op of kind
``CUSTOMOP_KIND + MODULE_CLASS.__name__``, which its extractor's ``convert_to_nnef`` writes.

``convert_to_nnef(g, node, name_to_tensor, null_ref, torch_graph, inference_target)``
receives fastnnef's graph builder for that call as ``g`` (an ``OpContext``):

- ``g.tensor_inputs()`` (or ``name_to_tensor``, by IR name) are the module's tensor
  arguments, flattened in call order (a tuple argument contributes its tensors);
- ``node.module`` is the module instance; ``g.parameter(node.module.weight)`` declares one
  of its weights under its parameter name;
- ``g.emit(kind, args, attrs, out=i)`` produces the module's i-th output tensor (flattened
  the same way), ``g.tmp(...)`` intermediate ops, ``g.fragment(name, text)`` fragments,
  ``g.caps`` what the target supports;
- it returns the names of the fragments it used (possibly empty), as in the reference.

Extractors shipped: ``moe.py`` (transformers' experts modules as ``tract_moe_ffn``, only
those planned for an export) and ``gdn.py`` (the gated delta net's two modules as
``tract_transformers_causal_conv1d_update`` and ``tract_transformers_gdn_recurrent``).

The built-in recurrent layers do not need this mechanism: ``torch.jit.trace`` already
records ``nn.LSTM``/``nn.GRU``/``nn.RNN`` as one ``aten::lstm``/``gru``/``rnn_*`` op, which
op/aten/recurrent.py exports whole (one ``tract_core_scan`` per layer and direction); that
handler also covers functional calls and TorchScript models, which a module extractor
would miss. ``LSTMExtractor`` and its kin exist for import compatibility only (served here
by fastnnef/compat/extractors.py on first use). The mechanism itself is ``base.py``.
"""

from __future__ import annotations

from typing import Any

from fastnnef.op.custom_extractors.base import CUSTOMOP_KIND, ModuleInfoExtractor
from fastnnef.op.custom_extractors.base import find_extractor as find_extractor
from fastnnef.op.custom_extractors.gdn import (
    CausalConvUpdateExtractor,
    CausalConvUpdateReified,
    GatedDeltaNetRecurrentExtractor,
    GatedDeltaNetRecurrentReified,
)
from fastnnef.reference_names import reference_name

__all__ = [
    "CUSTOMOP_KIND", "CausalConvUpdateExtractor", "CausalConvUpdateReified", "GRUExtractor",
    "GatedDeltaNetRecurrentExtractor", "GatedDeltaNetRecurrentReified", "Gemma4RoutedExpertsExtractor",
    "LSTMCellExtractor", "LSTMExtractor", "MoEFFNExtractor", "ModuleInfoExtractor", "RNNExtractor",
]


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
