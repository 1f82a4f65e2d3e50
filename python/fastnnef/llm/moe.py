"""Mixture-of-experts blocks in a form tracing can follow.

transformers' expert modules (``MixtralExperts``, ``Qwen2MoeExperts``, ...) loop over the
experts the current batch routes to: ``torch.jit.trace`` would freeze that loop to the
example's routing. Its ``batched_mm`` implementation gathers one weight matrix per
(token, expert) pair, which a long prompt cannot afford in memory.

The dense form computed here is exact and shape-static: every expert runs on every
token, and the outputs are summed with each token's routing weights (zero for the
experts the router did not pick). It costs ``num_experts / top_k`` times the expert
FLOPs of the sparse form.

``dense_experts(model)`` swaps it in per module instance (an instance attribute shadows
the class's ``forward``) and restores the modules on exit: no class or global registry
of transformers is touched, so other models and threads are unaffected.

LongCat-Flash's experts module (``zero_expert_num``) adds zero-computation experts that
return the token unchanged: its dense form (``zero_experts_dense_forward``) weights the
token itself by their routing weights. DBRX's (``DbrxExperts``) keeps its experts' weights
as three 2-D matrices, one row block per expert (``dbrx_experts_dense_forward``). JetMoE's
experts (its MLP and its attention heads) route inside their own modules: llm/jetmoe.py.

``moe_export_forms(model, caps)`` chooses the form of each block for an export: where
the target has ``tract_moe_ffn`` (tract >= 0.23.9) and the op expresses the block's
routing (op/custom_extractors/moe.py ``moe_ffn_plan``), its experts call becomes that one
op, which runs only the routed experts; every other block, and every block for an older
target, keeps the dense form.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fastnnef.compress import quantize_weights_min_max_Q4_0
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.llm import jetmoe
from fastnnef.llm.jetmoe import is_jetmoe_moa, is_jetmoe_moe
from fastnnef.log import get_logger
from fastnnef.op.custom_extractors.moe import MOE_FFN_FEATURE, MoEFFNPlan, is_experts, moe_ffn_plan, routed_as_moe_ffn
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.quant.qtract import Q4_0_GROUP

log = get_logger("fastnnef.llm")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: Any, transposed: bool) -> torch.Tensor:
    """Each expert's linear: ``x [E or 1, T, in]`` (1: the same tokens for every expert),
    stacked ``weight [E, out, in]`` (``[E, in, out]`` when transposed) -> ``[E, T, out]``."""
    out = x @ (weight if transposed else weight.transpose(1, 2))
    return out if bias is None else out + bias[:, None, :]


def dense_experts_forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """``hidden_states [T, H]``, the router's ``top_k_index``/``top_k_weights [T, k]`` ->
    ``[T, H]``, the weighted sum of the routed experts' outputs (see the module docstring)."""
    experts = torch.arange(self.num_experts)
    # [T, E]: the routing weight of each expert for each token (0 when not routed).
    routing = ((top_k_index[..., None] == experts).to(top_k_weights.dtype) * top_k_weights[..., None]).sum(1)
    bias = self.has_bias
    if self.has_gate:
        up = _linear(hidden_states[None], self.gate_up_proj, self.gate_up_proj_bias if bias else None,
                     self.is_transposed)
        inner = self._apply_gate(up)
    else:
        up = _linear(hidden_states[None], self.up_proj, self.up_proj_bias if bias else None, self.is_transposed)
        inner = self.act_fn(up)
    out = _linear(inner, self.down_proj, self.down_proj_bias if bias else None, self.is_transposed)
    if getattr(self, "has_post_expert_norm", False):  # an attribute older 5.x experts lack
        out = self.post_expert_norm(out)
    weighted = out * routing.transpose(0, 1)[..., None].to(out.dtype)  # [E, T, H]
    return weighted.sum(0).to(hidden_states.dtype)


def is_zero_experts(module: nn.Module) -> bool:
    """LongCat-Flash's experts module: routed experts followed by zero-computation ones."""
    return isinstance(getattr(module, "identity_expert", None), nn.Identity) and hasattr(module, "zero_expert_num")


def zero_experts_dense_forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """``dense_experts_forward`` for ``is_zero_experts`` modules: experts from
    ``num_routed_experts`` on return the token itself (the module docstring)."""
    routed = self.num_routed_experts
    experts = torch.arange(self.total_experts)
    routing = ((top_k_index[..., None] == experts).to(top_k_weights.dtype) * top_k_weights[..., None]).sum(1)
    # The zero-computation experts' weights, summed: [T, 1].
    out = hidden_states * routing[:, routed:].sum(-1, keepdim=True).to(hidden_states.dtype)
    if routed:
        gate, up = _linear(hidden_states[None], self.gate_up_proj[:routed], None, False).chunk(2, dim=-1)
        expert_out = _linear(self.act_fn(gate) * up, self.down_proj, None, False)  # [E, T, H]
        out = out + (expert_out * routing[:, :routed].transpose(0, 1)[..., None].to(expert_out.dtype)).sum(0)
    return out.to(hidden_states.dtype)


def is_dbrx_experts(module: nn.Module) -> bool:
    """DBRX's experts module: a GLU whose ``w1``, ``v1``, ``w2`` stack the experts' rows."""
    mlp = getattr(module, "mlp", None)
    weights = ("w1", "v1", "w2")
    return (isinstance(mlp, nn.Module) and all(isinstance(getattr(mlp, w, None), torch.Tensor) for w in weights)
            and hasattr(module, "ffn_hidden_size") and hasattr(module, "num_experts"))


def dbrx_experts_dense_forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """``dense_experts_forward`` for ``is_dbrx_experts`` modules: ``hidden_states [B, S, H]``
    -> ``[B, S, H]``; expert e's gate, up and down matrices are rows ``e*F .. (e+1)*F`` of
    ``w1``, ``v1``, ``w2`` (``[E*F, H]`` each, ``w2`` applied untransposed)."""
    batch, hidden = hidden_states.shape[0], self.hidden_size
    tokens = hidden_states.reshape(-1, hidden)
    experts = torch.arange(self.num_experts)
    routing = ((top_k_index[..., None] == experts).to(top_k_weights.dtype) * top_k_weights[..., None]).sum(1)
    shape = (self.num_experts, self.ffn_hidden_size, hidden)
    mlp = self.mlp
    gate = _linear(tokens[None], mlp.w1.reshape(shape), None, False)  # [E, T, F]
    up = _linear(tokens[None], mlp.v1.reshape(shape), None, False)
    out = _linear(mlp.activation_fn(gate) * up, mlp.w2.reshape(shape), None, True)  # [E, T, H]
    weighted = (out * routing.transpose(0, 1)[..., None].to(out.dtype)).sum(0)
    return weighted.reshape(batch, -1, hidden).to(hidden_states.dtype)


def _dense_methods(module: nn.Module) -> dict[str, Callable[..., Any]]:
    """The methods of ``module`` that compute its dense form (JetMoE's attention experts:
    ``map`` and ``reduce``; every other experts module: ``forward``)."""
    if is_jetmoe_moa(module):
        return {"map": jetmoe.moa_map, "reduce": jetmoe.moa_reduce}
    if is_jetmoe_moe(module):
        return {"forward": jetmoe.moe_forward}
    if is_zero_experts(module):
        return {"forward": zero_experts_dense_forward}
    return {"forward": dbrx_experts_dense_forward if is_dbrx_experts(module) else dense_experts_forward}


def _has_experts(module: nn.Module) -> bool:
    """An experts module that has a dense form here."""
    return (is_experts(module) or is_zero_experts(module) or is_dbrx_experts(module) or is_jetmoe_moe(module)
            or is_jetmoe_moa(module))


@contextmanager
def dense_experts(model: nn.Module) -> Iterator[int]:
    """Within the block, every experts module of ``model`` computes the dense form; yields
    how many modules were switched."""
    with _dense([m for m in model.modules() if _has_experts(m)]) as switched:
        yield switched


@dataclass
class MoEForms:
    """How the MoE blocks of one export are written: module paths as ``tract_moe_ffn``,
    and the dense ones with the reason."""

    moe_ffn: list[str] = field(default_factory=list)
    dense: dict[str, str] = field(default_factory=dict)


@contextmanager
def moe_export_forms(model: nn.Module, caps: TargetCapabilities) -> Iterator[MoEForms]:
    """Within the block, an export of ``model`` for a target with ``caps`` writes each
    MoE block's experts as one ``tract_moe_ffn`` where it can, in the dense form
    otherwise (see the module docstring); yields which block went which way."""
    forms = MoEForms()
    plans: list[MoEFFNPlan] = []
    for path, block in model.named_modules():
        experts = getattr(block, "experts", None)
        if not isinstance(experts, nn.Module) or not _has_experts(experts):
            continue
        if is_zero_experts(experts):
            plan: MoEFFNPlan | str = "zero-computation experts are not part of tract_moe_ffn"
        elif caps.supports(MOE_FFN_FEATURE):
            plan = moe_ffn_plan(block)
        else:
            plan = "the target tract has no tract_moe_ffn (< 0.23.9)"
        if isinstance(plan, str):
            forms.dense[path] = plan
        else:
            plans.append(plan)
            forms.moe_ffn.append(path)
    planned = {id(p.experts) for p in plans}
    if forms.moe_ffn:
        log.info("%d MoE blocks as tract_moe_ffn (only the routed experts run)", len(forms.moe_ffn))
    if forms.dense:
        reasons = sorted(set(forms.dense.values()))
        log.info("%d MoE blocks in the dense form (every expert runs for every token): %s",
                 len(forms.dense), "; ".join(reasons))
    with routed_as_moe_ffn(plans), _dense([m for m in model.modules() if _has_experts(m) and id(m) not in planned]):
        yield forms


@contextmanager
def _dense(modules: Sequence[nn.Module]) -> Iterator[int]:
    """``modules`` compute the dense form within the block; yields how many."""
    switched = {module: _dense_methods(module) for module in modules}
    for module, methods in switched.items():
        for name, method in methods.items():
            setattr(module, name, types.MethodType(method, module))
    try:
        yield len(switched)
    finally:
        for module, methods in switched.items():
            for name in methods:
                delattr(module, name)  # back to the class's method


def quantize_experts_min_max_q4_0(model: nn.Module) -> int:
    """Mark the expert weights of every block that exports as ``tract_moe_ffn`` in tract's
    packed Q4_0 path (linear layout, no expert biases, no clamped activation, rows a
    multiple of 32) to be written as Q4_0, min-max per block of 32, quantized by the Rust
    writer as it streams them; torch then computes with the same Q4_0 values. In place;
    returns how many experts modules were marked. Other weights are left as they are
    (``fastnnef.compress`` quantizes the linear layers)."""
    marked = 0
    for block in model.modules():
        plan = moe_ffn_plan(block) if isinstance(getattr(block, "experts", None), nn.Module) else None
        if not isinstance(plan, MoEFFNPlan):
            continue
        experts: Any = plan.experts
        names = ["gate_up_proj" if experts.has_gate else "up_proj", "down_proj"]
        tensors = [getattr(experts, n) for n in names]
        if (experts.is_transposed or experts.has_bias or not all(isinstance(t, OffloadedTensor) for t in tensors)
                or any(t.shape[-1] % Q4_0_GROUP for t in tensors)):
            continue
        for name, tensor in zip(names, tensors):
            experts._parameters[name] = nn.Parameter(tensor.as_q4_0(), requires_grad=False)
        marked += 1
    return marked


def _q4_0_with_experts(model: nn.Module) -> nn.Module:
    quantize_weights_min_max_Q4_0(model)
    quantize_experts_min_max_q4_0(model)
    return model


# A compression registry for dump_llm / fastnnef-llm (``compression_registry=
# "fastnnef.llm.moe.MOE_COMPRESSION"``): the linear layers and the routed experts as Q4_0.
MOE_COMPRESSION = {"min_max_q4_0_with_experts": _q4_0_with_experts}
