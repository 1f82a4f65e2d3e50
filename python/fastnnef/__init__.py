"""fastnnef: export PyTorch models to NNEF for the tract inference engine.

A drop-in replacement for ``torch_to_nnef``: the same public module paths, names,
signatures and defaults, with a Rust core (``fastnnef._native``) that writes tensors and
archives and runs the exported artefact in a linked tract for check_io. The reference's
names that only drop-in users need live in a wing on top (``fastnnef/compat/``), loaded
the first time one of them is used (``compat_wing``).
"""

from types import ModuleType

from fastnnef.export import (
    export_model_to_nnef,
    export_tensors_from_disk_to_nnef,
    export_tensors_to_nnef,
)
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.utils import SemanticVersion
from fastnnef.version import __version__

__author__ = "fastnnef developers"
__email__ = "dev@fastnnef.local"
VERSION = SemanticVersion.from_str(__version__)


def compat_wing() -> ModuleType:
    """The drop-in wing (``fastnnef/compat/``: what only code written for torch_to_nnef uses),
    loaded on first use: ``import fastnnef`` does not load it (fastnnef/reference_names.py)."""
    from fastnnef import compat  # the wing imports the core: loaded here, on demand

    return compat

__all__ = [
    "VERSION",
    "KhronosNNEF",
    "TractNNEF",
    "export_model_to_nnef",
    "export_tensors_from_disk_to_nnef",
    "export_tensors_to_nnef",
    "harden_jit_for_export",
]
