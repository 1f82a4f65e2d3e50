"""Drop-in only: surfaces kept so that code written for torch_to_nnef keeps importing and
running, and that no fastnnef export path uses.

Each module here is re-exported at the reference's module path (``torch_to_nnef.x.y`` is
``fastnnef.x.y``); this package is never imported under its own name by fastnnef's own
code, so what is here can be read apart from the export path:

- ``ir_names``: the reference's IR class names and ``TorchModuleTracer`` over fastnnef's IR;
  served at ``torch_graph``.
- ``jit_mutation``: the reference's standalone functionalization of writes through views
  (fastnnef's own is ``torch_graph/functionalize.py``); served at ``torch_graph`` and
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
  safetensors and PEFT process-wide); served at ``tensor.offload``.
- ``process_patch``: the one lock-and-count mechanism both process-wide patches go
  through (internal).

This ``__init__`` imports nothing: each module is loaded by the reference path that serves it.
"""
