"""Gated delta net (linear attention of Qwen3-Next, Qwen3.5) as two tract ops (tract >= 0.23.5).

transformers computes a gated-delta-net layer's core with Python loops over the sequence
(``torch_recurrent_gated_delta_rule``, or the chunked ``torch_chunk_gated_delta_rule`` for
prompts) and its short convolution with one branch for prompts and one for single tokens:
traced, either would freeze the graph to the example's sequence length. The two modules
here compute S steps, any S, from a given state, and are exported whole (one op each,
symbolic in S) by their extractors. Their names and call signatures are the reference's
(``torch_to_nnef.op.custom_extractors.gdn``):

- ``CausalConvUpdateReified()(hidden_states [b, C, S], conv_state [b, C, k], weight [C, k])``
  -> ``(output [b, C, S], final_state [b, C, k])``: ``full = concat(conv_state, hidden_states)``
  on the time axis, ``output[t] = silu(sum_j weight[:, j] * full[:, t + 1 + j])`` for the S
  new positions, ``final_state = full[:, :, -k:]``; as ``tract_transformers_causal_conv1d_update
  (input, weight, initial_state)``.
- ``GatedDeltaNetRecurrentReified()(query, key [b, S, hk, w], value [b, S, hv, w], g, beta
  [b, S, hv], initial_state [b, hv, w, w])`` -> ``(output [b, S, hv, w], final_state)``: q and
  k L2-normalized (eps 1e-6), q scaled by ``1/sqrt(w)``, value head h reading query/key head
  ``h // (hv / hk)``; per step ``state *= exp(g)``, ``delta = (v - k . state) * beta``,
  ``state += k (x) delta``, ``out = q . state``; as ``tract_transformers_gdn_recurrent``.
  Pass the six tensors in this order (positionally or as keywords in this order): the
  extractor writes the module's tensor arguments in call order.

Semantics and argument order are tract-transformers 0.23.9's (``ops/causal_conv1d_update.rs``,
``ops/gdn_recurrent.rs``, the authority). The PyTorch forwards compute the same in f32, step
by step, so the traced example and the test bundles are what tract computes. A prompt starts
from zero states: the convolution's zero left context and the rule's zero initial state are
what transformers' prompt path assumes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.op.custom_extractors.base import ModuleInfoExtractor

GATED_DELTA_NET_FEATURE = "gated_delta_net"  # the capabilities gate (inference_target/capabilities.py)
GDN_RECURRENT_OP = "tract_transformers_gdn_recurrent"
CAUSAL_CONV_OP = "tract_transformers_causal_conv1d_update"
_NORM_EPS = 1e-6  # tract's and transformers' l2norm epsilon


class CausalConvUpdateReified(nn.Module):
    """Depthwise causal convolution with SiLU over S new positions, from a ``k``-wide state
    (module docstring)."""

    def forward(
        self, hidden_states: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        channels, width = weight.shape
        new = hidden_states.shape[-1]
        full = torch.cat([conv_state.to(torch.float32), hidden_states.to(torch.float32)], dim=-1)
        # Without padding, the convolution of k + S positions gives S + 1: the last S are the new ones.
        out = F.conv1d(full, weight.to(torch.float32)[:, None], groups=channels)[..., -new:]
        return F.silu(out).to(hidden_states.dtype), full[..., -width:].to(conv_state.dtype)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + _NORM_EPS)


class GatedDeltaNetRecurrentReified(nn.Module):
    """The gated delta rule over S steps from a given state (module docstring). The
    keywords after ``initial_state`` are the transformers rule's; the op always returns
    the final state and always L2-normalizes q and k."""

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
        initial_state: torch.Tensor | None = None, output_final_state: bool = True,
        use_qk_l2norm_in_kernel: bool = True, **_kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if initial_state is None or not use_qk_l2norm_in_kernel:
            raise T2NErrorNotImplemented(
                f"{GDN_RECURRENT_OP} takes an initial state and L2-normalizes query and key: pass "
                "initial_state (zeros for an empty past) and use_qk_l2norm_in_kernel=True"
            )
        groups = value.shape[2] // query.shape[2]
        # [b, S, h, w] -> [b, h, S, w] in f32; each query/key head serves `groups` value heads.
        q, k = (_l2norm(x.to(torch.float32)).repeat_interleave(groups, dim=2).transpose(1, 2) for x in (query, key))
        q = q / q.shape[-1] ** 0.5
        v = value.to(torch.float32).transpose(1, 2)
        decay = g.to(torch.float32).transpose(1, 2).exp()   # [b, hv, S]
        gain = beta.to(torch.float32).transpose(1, 2)       # [b, hv, S]
        state = initial_state.to(torch.float32)             # [b, hv, w (key), w (value)]
        outputs = []
        for step in range(v.shape[2]):
            state = state * decay[:, :, step, None, None]
            k_t = k[:, :, step, :, None]
            delta = (v[:, :, step] - (state * k_t).sum(-2)) * gain[:, :, step, None]
            state = state + k_t * delta[:, :, None, :]
            outputs.append((state * q[:, :, step, :, None]).sum(-2))
        return torch.stack(outputs, dim=1).to(query.dtype), state.to(initial_state.dtype)


class _TractOpExtractor(ModuleInfoExtractor):
    """One module call as one tract op of two outputs; ``ORDER`` maps the op's arguments
    to the module's tensor arguments (in call order)."""

    REGISTERED = False
    OP = ""
    ORDER: tuple[int, ...] = ()
    OUTPUTS_LIKE: tuple[int, int] = (0, 0)  # the module's tensor arguments whose dims each output has

    def output_dims(self, inputs: Any, output_ranks: Any) -> list[Any] | None:
        if len(inputs) != len(self.ORDER):
            return None
        return [inputs[i] for i in self.OUTPUTS_LIKE]

    def fake_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """Each output like its ``OUTPUTS_LIKE`` argument (sizes and dtype): the forwards'
        loops over S would fix S to its traced size under ``torch.export``."""
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        if len(tensors) != len(self.ORDER):  # the forward's own error names what is missing
            return type(module).forward(module, *args, **kwargs)
        return tuple(torch.empty_like(tensors[i]) for i in self.OUTPUTS_LIKE)

    def convert_to_nnef(self, g: Any, node: Any, name_to_tensor: dict[str, Any], null_ref: Any, torch_graph: Any,
                        inference_target: Any, **kwargs: Any) -> list[str]:
        if not g.caps.supports(GATED_DELTA_NET_FEATURE):
            raise g.unsupported(
                f"{self.OP} needs tract >= {VERSION_GATES[GATED_DELTA_NET_FEATURE].first.to_str()}",
                "export gated-delta-net models (Qwen3-Next, Qwen3.5) for tract "
                f"{VERSION_GATES[GATED_DELTA_NET_FEATURE].first.to_str()} or newer",
            )
        inputs = g.tensor_inputs()
        if len(inputs) != len(self.ORDER):
            raise T2NErrorNotImplemented(
                f"{node.where()}: {type(node.module).__name__} takes {len(self.ORDER)} tensors, got {len(inputs)}"
            )
        g.emit_multi(self.OP, [inputs[i] for i in self.ORDER], {}, outs=[0, 1])
        return []


class CausalConvUpdateExtractor(_TractOpExtractor):
    """``CausalConvUpdateReified`` as ``tract_transformers_causal_conv1d_update``."""

    MODULE_CLASS = CausalConvUpdateReified
    ORDER = (0, 2, 1)  # (input, weight, initial_state) from (hidden_states, conv_state, weight)
    OUTPUTS_LIKE = (0, 1)  # output like hidden_states, final state like conv_state
    OP = CAUSAL_CONV_OP


class GatedDeltaNetRecurrentExtractor(_TractOpExtractor):
    """``GatedDeltaNetRecurrentReified`` as ``tract_transformers_gdn_recurrent``."""

    MODULE_CLASS = GatedDeltaNetRecurrentReified
    ORDER = (0, 1, 2, 3, 4, 5)
    OUTPUTS_LIKE = (2, 5)  # output like value, final state like initial_state
    OP = GDN_RECURRENT_OP
