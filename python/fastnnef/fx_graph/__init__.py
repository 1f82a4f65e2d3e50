"""The ``torch.export`` front end: from an nn.Module to fastnnef's IR through an
``ExportedProgram`` (``front_end="export"`` of ``export_model_to_nnef``).

- ``capture.py``: the model run once for its outputs and exported once (non-strict,
  functionalized, decomposed with an empty table: every op kept as called);
- ``sizes.py``: torch's symbolic sizes (sympy) as ``DimExpr`` over the NNEF symbols;
- ``lower.py``: the FX graph as the IR the jit front end builds (``torch_graph/ir/data.py``),
  so that every op handler serves both front ends;
- ``fallback.py``: where ``front_end="auto"`` uses the jit tracer instead, and why.
"""

from fastnnef.fx_graph.capture import CapturedProgram, capture_program
from fastnnef.fx_graph.fallback import REFUSALS, declined_before_capture, refusal_reason
from fastnnef.fx_graph.lower import lower_program
from fastnnef.fx_graph.sizes import range_assertions

__all__ = [
    "REFUSALS",
    "CapturedProgram",
    "capture_program",
    "declined_before_capture",
    "lower_program",
    "range_assertions",
    "refusal_reason",
]
