"""Drop-in only: the wing on top of fastnnef that code written for torch_to_nnef imports,
and that no fastnnef export path uses.

compat imports the core; nothing outside compat imports it but
``fastnnef/reference_names.py``, from inside a function, so ``import fastnnef`` and every
export run without it (tests/test_import_layers.py, tests/compat/test_compat_package.py). Its
names appear at the reference's module paths (``torch_to_nnef.x.y`` is ``fastnnef.x.y``)
through those modules' ``__getattr__``, which asks ``SERVED`` below, the one table of which
path serves which of compat's modules (every name of the module's ``__all__``):

- ``ir_names``: the reference's IR class names and ``TorchModuleTracer`` over fastnnef's IR;
  served at ``torch_graph``.
- ``jit_mutation``: the reference's standalone functionalization of writes through views
  (fastnnef's own is ``torch_graph/ir/functionalize.py``); served at ``torch_graph`` and
  ``torch_graph.jit_mutation``.
- ``op_helper``: ``IMPLICIT_CAST_SUPPORTED_OPS``, ``DTYPES_EXPECTED_IMPLICIT_CAST_ORDER``;
  served at ``op.helper``.
- ``extractors``: the reference's built-in module extractors that fastnnef does not need
  (recurrent layers, its own MoE modules); served at ``op.custom_extractors``.
- ``tract_downloader``: ``TractBinaryDownloader`` (finds a binary, never downloads),
  ``apply_dynamic_shape_in_nnef`` (refused); served at ``inference_target.tract``.
- ``empty_weights``: ``init_empty_weights`` (patches ``nn.Module`` registration
  process-wide); served at ``utils``.
- ``offload_loading``: ``ctx_maybe_load_from_disk_as_offloaded`` (patches ``torch.load``,
  safetensors and PEFT process-wide) and ``t2n_load_checkpoint_and_dispatch``; served at
  ``tensor.offload``.
- ``process_patch``: the one lock-and-count mechanism both process-wide patches go
  through (internal).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from fastnnef.compat import (
    empty_weights,
    extractors,
    ir_names,
    jit_mutation,
    offload_loading,
    op_helper,
    tract_downloader,
)

# The reference path -> the compat modules whose names it serves.
_SERVED_MODULES: dict[str, tuple[ModuleType, ...]] = {
    "fastnnef.utils": (empty_weights,),
    "fastnnef.torch_graph": (ir_names, jit_mutation),
    "fastnnef.torch_graph.jit_mutation": (jit_mutation,),
    "fastnnef.op.helper": (op_helper,),
    "fastnnef.op.custom_extractors": (extractors,),
    "fastnnef.inference_target.tract": (tract_downloader,),
    "fastnnef.tensor.offload": (offload_loading,),
}

SERVED: dict[str, dict[str, Any]] = {
    path: {name: getattr(module, name) for module in modules for name in module.__all__}
    for path, modules in _SERVED_MODULES.items()
}
"""The reference path -> the drop-in names compat serves there (read by
``fastnnef/reference_names.py``)."""
