"""The selective scan of state-space layers (Mamba, Mamba2 and the hybrids built on them) as
one ``tract_core_scan`` over the time axis.

transformers computes a Mamba layer's state update with a Python loop over the sequence
(or, for Mamba2 prompts, a chunked form whose padding depends on the length): traced,
either would freeze the graph to the example's length. ``SelectiveScanReified`` computes S
steps, any S, from a given state, and its extractor writes it as one ``tract_core_scan``
whose body is one step of the recurrence (a ``fastnnef_ssm_step_`` fragment), symbolic in S:

``SelectiveScanReified()(dt, x, B, C, A, state)`` -> ``(y, final_state)``. Every tensor has
the same rank R; axis 1 is time (length S for dt, x, B, C; 1 for A and the state), and per
step the operands broadcast to the state's shape::

    state = exp(dt * A) * state + (dt * x) @ B        (an outer product: x's last axis is 1)
    y     = state @ C^T                               (C's time axis is 1: the last axis dropped)

``y`` is ``[b, S, ...]`` (the state's dims after time, less the last); ``final_state`` has
the state's shape. Mamba's diagonal state ``[b, 1, D, N]`` takes ``dt, x [b, S, D, 1]``,
``B, C [b, S, 1, N]``, ``A [1, 1, D, N]``; Mamba2's per-head state ``[b, 1, G, H/G, P, N]``
takes ``dt [b, S, G, H/G, 1, 1]``, ``x [b, S, G, H/G, P, 1]``, ``B, C [b, S, G, 1, 1, N]`` and
``A [1, 1, G, H/G, 1, 1]``. The skip connection (``D``), the gate and the norms are the
caller's. The PyTorch forward computes the same steps in f32 (the trace's example and the
test bundles are what tract computes); the extractor casts nothing: pass f32 tensors.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented, T2NErrorStrictNNEFSpec
from fastnnef.nnef.graph import Tuple
from fastnnef.op.custom_extractors import ModuleInfoExtractor

SCAN_OP = "tract_core_scan"
STEP_PREFIX = "fastnnef_ssm_step_"  # declared in nnef/op_table.py FRAGMENTS
_PARAMS = ("dt", "x", "b", "c", "a", "h")  # the fragment's parameters, in the module's argument order


class SelectiveScanReified(nn.Module):
    """The selective scan over S steps from a given state (module docstring)."""

    def forward(self, dt: torch.Tensor, x: torch.Tensor, B: torch.Tensor, C: torch.Tensor, A: torch.Tensor,
                state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ranks = {t.dim() for t in (dt, x, B, C, A, state)}
        if len(ranks) != 1 or state.shape[1] != 1:
            raise T2NErrorNotImplemented(
                "SelectiveScanReified takes six tensors of one rank, time on axis 1 (1 for A and the state); got "
                f"shapes {[tuple(t.shape) for t in (dt, x, B, C, A, state)]}"
            )
        outputs = []
        for step in range(dt.shape[1]):
            at = slice(step, step + 1)
            dt_t = dt[:, at]
            state = torch.exp(dt_t * A) * state + (dt_t * x[:, at]) @ B[:, at]
            outputs.append((state @ C[:, at].transpose(-1, -2))[..., 0])
        return torch.cat(outputs, dim=1), state


def _step_fragment(rank: int) -> tuple[str, str]:
    """The scan body for tensors of ``rank``: its name (a hash of its text) and text."""
    last = rank - 1
    params = ", ".join(f"{p}: tensor<scalar>" for p in _PARAMS)
    # Products as matmuls (an outer product, a product with C): in tract about 2x faster
    # per step than broadcast multiplications and a sum, on a Mamba2 state of [32, 64, 128].
    rest = (f"({params}) -> (y: tensor<scalar>, h_next: tensor<scalar>)\n{{\n"
            "  h_next = add(mul(exp(mul(dt, a)), h), matmul(mul(dt, x), b));\n"
            f"  y = squeeze(matmul(h_next, c, transposeB = true), axes = [{last}]);\n}}")
    name = f"{STEP_PREFIX}{hashlib.sha1(rest.encode()).hexdigest()[:10]}"
    return name, f"fragment {name}{rest}"


class SelectiveScanExtractor(ModuleInfoExtractor):
    """``SelectiveScanReified`` as one ``tract_core_scan`` (module docstring)."""

    MODULE_CLASS = SelectiveScanReified

    def output_dims(self, inputs: Any, output_ranks: Any) -> list[Any] | None:
        if len(inputs) != len(_PARAMS):
            return None
        return [inputs[1][:-1], inputs[5]]  # y: x's dims less the last; the state keeps its dims

    def fake_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """One step on fake tensors of one time step, ``y`` widened to the S steps: the
        forward's loop over S would fix S to its traced size under ``torch.export``."""
        dt, x, b, c, a, state = args
        dt1, x1, b1, c1 = (t.new_empty((t.shape[0], 1, *t.shape[2:])) for t in (dt, x, b, c))
        y, final = SelectiveScanReified.forward(module, dt1, x1, b1, c1, a, state)  # type: ignore[arg-type]
        return y.new_empty((y.shape[0], dt.shape[1], *y.shape[2:])), final

    def convert_to_nnef(self, g: Any, node: Any, name_to_tensor: dict[str, Any], null_ref: Any, torch_graph: Any,
                        inference_target: Any, **kwargs: Any) -> list[str]:
        if g.strict:
            raise T2NErrorStrictNNEFSpec(
                f"{node.where()}: a selective scan is a {SCAN_OP}, which strict NNEF (KhronosNNEF) does not have: "
                "export with TractNNEF instead"
            )
        inputs = g.tensor_inputs()
        if len(inputs) != len(_PARAMS) or len({t.rank for t in inputs}) != 1:
            raise T2NErrorNotImplemented(
                f"{node.where()}: SelectiveScanReified takes {len(_PARAMS)} tensors of one rank, got "
                f"{[t.rank for t in inputs]}"
            )
        dt, x, b, c, a, state = inputs
        body = g.fragment(*_step_fragment(state.rank))
        g.emit_multi(SCAN_OP, [], {
            "body": body,
            "scan": [Tuple((name, t, 1, 1)) for name, t in zip(_PARAMS, (dt, x, b, c))],
            "full": [Tuple(("a", a))],
            "state": [Tuple(("h", state, "h_next"))],
            "output": [Tuple(("y", "full", 1, 1)), Tuple(("h_next", "last", 0, 1))],
        }, outs=[0, 1])
        return [body]
