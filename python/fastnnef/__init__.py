"""fastnnef: export PyTorch models to NNEF for the tract inference engine.

A drop-in replacement for ``torch_to_nnef``: the same public module paths, names,
signatures and defaults, with a Rust core (``fastnnef._native``) that writes tensors and
archives and runs the exported artefact in a linked tract for check_io.
"""

from fastnnef.export import (
    export_model_to_nnef,
    export_tensors_from_disk_to_nnef,
    export_tensors_to_nnef,
)
from fastnnef.inference_target import KhronosNNEF, TractNNEF
from fastnnef.torch_graph.harden import harden_jit_for_export
from fastnnef.utils import SemanticVersion

__version__ = "0.1.0"
__author__ = "fastnnef developers"
__email__ = "dev@fastnnef.local"
VERSION = SemanticVersion.from_str(__version__)

__all__ = [
    "VERSION",
    "KhronosNNEF",
    "TractNNEF",
    "export_model_to_nnef",
    "export_tensors_from_disk_to_nnef",
    "export_tensors_to_nnef",
    "harden_jit_for_export",
]
