"""Every aten handler family (one module per family under ``op/aten/``), in the order they
register, and ``load_handlers``, which imports them once into op/registry.py's
``DEFAULT_REGISTRY``.

Apart from the registry: every family imports the registry for its ``handler`` decorator,
so the registry imports none of them back (by name or otherwise)."""

from __future__ import annotations

import importlib

from fastnnef.exceptions import T2NErrorConsistency
from fastnnef.op.registry import DEFAULT_REGISTRY, OpRegistry

# Every handler family, imported by name in this order (a new one is appended here).
FAMILIES = (
    "fastnnef.op.aten.activation",
    "fastnnef.op.aten.arithmetic",
    "fastnnef.op.aten.linalg",
    "fastnnef.op.aten.conv",
    "fastnnef.op.aten.pool",
    "fastnnef.op.aten.norm",
    "fastnnef.op.aten.shape",
    "fastnnef.op.aten.indexing",
    "fastnnef.op.aten.reduce",
    "fastnnef.op.aten.creation",
    "fastnnef.op.aten.attention",
    "fastnnef.op.aten.resize",
    "fastnnef.op.aten.recurrent",
    "fastnnef.op.aten.pointwise",
    "fastnnef.op.aten.special",
    "fastnnef.op.aten.cumulative",
    "fastnnef.op.aten.distance",
    "fastnnef.op.aten.loss",
    "fastnnef.op.aten.layout",
    "fastnnef.op.aten.diagonal",
    "fastnnef.op.aten.scatter",
    "fastnnef.op.aten.lookup",
    "fastnnef.op.aten.transformer",
    "fastnnef.op.aten.quantized",
    "fastnnef.op.aten.complex",
    "fastnnef.op.aten.spectral",
    "fastnnef.op.aten.sampling",
    "fastnnef.op.aten.inplace",
    "fastnnef.op.aten.sorting",
)
_loaded = False


def load_handlers() -> OpRegistry:
    """Import every family once; an empty registry is an error, not a silent no-op."""
    global _loaded
    if not _loaded:
        for module in FAMILIES:
            importlib.import_module(module)
        _loaded = True
        if not DEFAULT_REGISTRY.kinds():
            raise T2NErrorConsistency("no op handler is registered")
    return DEFAULT_REGISTRY
