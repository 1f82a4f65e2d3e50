"""Inference targets: what an export is for (tract, or strict Khronos NNEF) and how it is checked."""

from fastnnef.inference_target.base import InferenceTarget
from fastnnef.inference_target.khronos import KhronosNNEF
from fastnnef.inference_target.tract import TractNNEF

__all__ = ["InferenceTarget", "KhronosNNEF", "TractNNEF"]
