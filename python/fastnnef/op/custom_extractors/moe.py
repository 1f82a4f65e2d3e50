"""Routed experts of transformers' sparse MoE blocks as one ``tract_moe_ffn`` (tract >= 0.23.9).

What the op computes (tract-transformers 0.23.9, ``ops/moe_ffn.rs``, the authority): router
logits ``x @ wg.T (+ wg_bias)``; per token the ``k`` largest logits (ties: lower expert
first); gate weights by ``gate`` mode (``softmax_topk``: softmax over the k selected
logits; ``softmax_all``: softmax over every expert, then the k selected, no
renormalization; ``sigmoid``: sigmoid of each selected logit); each selected expert's
``w2 · (act(w1 · x) * (w3 · x))`` (biases added after each projection; ``act_limit`` makes
it gpt-oss's clamped SwiGLU) summed with the gate weights, accumulated in f32. Expert
weights are ``[E, H, D]`` (w1/w3) and ``[E, D, H]`` (w2) in the ``linear`` layout (each
expert an ``nn.Linear`` filter: what transformers stores untransposed) and their
transposes in the ``canonical`` one.

What is exported whole is the *experts* module (``MixtralExperts``, ``Qwen2MoeExperts``...,
called as ``experts(hidden_states [T, D], top_k_index, top_k_weights)``): the router's
traced ops feed only that call, so once the op routes by itself they are dead and
dropped; whatever the block adds around the experts (Qwen2-MoE's gated shared expert,
DeepSeek's shared experts, the residual) is traced as usual. The router's semantics come
from the block (``moe_ffn_plan``): a block whose routing the op cannot express gets a
reason instead of a plan, and stays in the traceable dense form (fastnnef/llm/moe.py).

Only experts modules planned inside :func:`routed_as_moe_ffn` are taken over: the
extractors registered here for transformers' experts classes decline every other instance,
so other exports of the same classes are unaffected.

Expert weights stay where they are: a parameter transformers composed from per-expert
checkpoint tensors (``ComposedOffloadedTensor``) is split into its gate and up groups
without reading anything; another offloaded parameter is sliced lazily (``OffloadedSlice``),
read when written, one at a time; a parameter in memory gives views.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.op.custom_extractors.base import ModuleInfoExtractor
from fastnnef.tensor.offload import ComposedOffloadedTensor, OffloadedTensor
from fastnnef.tensor.offload_slice import OffloadedSlice
from fastnnef.torch_graph.ir import TensorValue

MOE_FFN_OP = "tract_moe_ffn"
MOE_FFN_FEATURE = "moe_ffn"  # the capabilities gate (inference_target/capabilities.py)


@dataclass(frozen=True)
class MoEFFNPlan:
    """How one block's experts call becomes a ``tract_moe_ffn``: the router's weights and
    semantics (read from the block), the experts module it applies to."""

    experts: nn.Module
    router_weight: torch.Tensor  # [E, D]
    router_bias: torch.Tensor | None  # [E], added to the logits (gpt-oss)
    k: int
    gate: str  # softmax_topk | softmax_all | sigmoid
    output_scale: float = 1.0  # every gate weight times this (DeepSeek's routed_scaling_factor)


# --- routing: what each transformers router computes, as a gate mode ------------------------
def _softmax_renormalized(router: Any) -> tuple[str, float] | str:
    """Mixtral: softmax over all experts, top-k, renormalized = softmax over the top-k."""
    return "softmax_topk", 1.0


def _softmax_maybe_renormalized(router: Any) -> tuple[str, float] | str:
    """Qwen2/3-MoE, OLMoE: softmax over all experts, top-k, renormalized when norm_topk_prob."""
    return ("softmax_topk" if router.norm_topk_prob else "softmax_all"), 1.0


def _topk_then_softmax(router: Any) -> tuple[str, float] | str:
    """Granite-MoE, gpt-oss: top-k of the logits (with the router's bias), softmax over them."""
    return "softmax_topk", 1.0


def _deepseek_v2(router: Any) -> tuple[str, float] | str:
    """Softmax over all experts, top-k (group-limited: top-k within the best groups), times
    routed_scaling_factor."""
    limited = router.topk_method == "group_limited_greedy" and router.topk_group < router.num_group
    if router.topk_method not in ("greedy", "group_limited_greedy") or limited:
        return (f"topk_method {router.topk_method!r} with topk_group {router.topk_group} of {router.num_group} "
                "groups selects within groups, which tract_moe_ffn's gate modes do not express")
    return "softmax_all", float(router.routed_scaling_factor)


def _deepseek_v3(router: Any) -> tuple[str, float] | str:
    """Sigmoid scores, chosen by score + e_score_correction_bias within the best groups,
    normalized when norm_topk_prob, times routed_scaling_factor."""
    if router.norm_topk_prob:
        return "norm_topk_prob renormalizes sigmoid scores, which tract_moe_ffn's gate modes do not express"
    if router.num_group > 1 and router.topk_group < router.num_group:
        return (f"routing within the best {router.topk_group} of {router.num_group} expert groups is not "
                "expressed by tract_moe_ffn's gate modes")
    if bool(torch.any(router.e_score_correction_bias != 0)):
        return ("e_score_correction_bias changes which experts are chosen but not their weights "
                "(tract_moe_ffn has no such bias)")
    return "sigmoid", float(router.routed_scaling_factor)


# Router class (transformers) -> its routing as (gate mode, output scale), or why not.
ROUTINGS: dict[str, Callable[[nn.Module], tuple[str, float] | str]] = {
    "MixtralTopKRouter": _softmax_renormalized,
    "Qwen2MoeTopKRouter": _softmax_maybe_renormalized,
    "Qwen3MoeTopKRouter": _softmax_maybe_renormalized,
    "Qwen3NextTopKRouter": _softmax_maybe_renormalized,
    "Qwen3_5MoeTopKRouter": _softmax_renormalized,
    "Qwen3VLMoeTextTopKRouter": _softmax_renormalized,
    "OlmoeTopKRouter": _softmax_maybe_renormalized,
    "GraniteMoeTopKRouter": _topk_then_softmax,
    "GraniteMoeSharedTopKRouter": _topk_then_softmax,
    "GraniteMoeHybridTopKRouter": _topk_then_softmax,
    "GptOssTopKRouter": _topk_then_softmax,
    "DeepseekV2TopkRouter": _deepseek_v2,
    "DeepseekV3TopkRouter": _deepseek_v3,
}


def _router_of(block: nn.Module) -> nn.Module | None:
    for attr in ("gate", "router"):
        router = getattr(block, attr, None)
        if isinstance(router, nn.Module) and type(router).__name__ in ROUTINGS:
            return router
    return None


def is_experts(module: nn.Module) -> bool:
    """An experts module of transformers' ``use_experts_implementation`` family: 3-D
    stacked weights and the layout flags the decorator sets."""
    return (
        hasattr(module, "has_gate") and hasattr(module, "is_transposed") and hasattr(module, "num_experts")
        and isinstance(getattr(module, "down_proj", None), torch.Tensor)
    )


def moe_ffn_plan(block: nn.Module) -> MoEFFNPlan | str:
    """The plan for ``block`` (a module with a known router and an experts module), or
    why its experts cannot be one ``tract_moe_ffn``."""
    experts: Any = getattr(block, "experts", None)  # transformers modules: attributes set by their config
    router: Any = _router_of(block)
    if experts is None or router is None or not is_experts(experts):
        return f"{type(block).__name__} has no router and experts module that fastnnef knows"
    routing = ROUTINGS[type(router).__name__](router)
    if isinstance(routing, str):
        return routing
    gate, scale = routing
    if getattr(experts, "has_post_expert_norm", False):
        return "a norm after each expert is not part of tract_moe_ffn"
    try:
        _activation(experts)
    except T2NErrorNotImplemented as err:
        return str(err)
    if experts.has_bias and not experts.has_gate:
        return "biased experts without a gate projection are not expressed by tract_moe_ffn"
    bias = getattr(router, "bias", None)
    return MoEFFNPlan(experts, router.weight, bias if isinstance(bias, torch.Tensor) else None,
                      int(router.top_k), gate, scale)


# --- the experts' weights in the op's layout -----------------------------------------------
_ACTIVATIONS = {"SiLU": "silu", "SiLUActivation": "silu", "ReLU": "relu", "GELUTanh": "gelu",
                "PytorchGELUTanh": "gelu"}


def _activation(experts: nn.Module) -> str:
    """The op's activation name for the experts' gate activation (gpt-oss's own clamped
    SwiGLU is named by its parameters instead)."""
    if _clamped(experts):
        return "swiglu"
    act = getattr(experts, "act_fn", None)
    name = _ACTIVATIONS.get(type(act).__name__)
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        name = "gelu"
    if name is None:
        raise T2NErrorNotImplemented(
            f"expert activation {type(act).__name__} is not one of tract_moe_ffn's (SiLU, tanh-GELU, ReLU)"
        )
    return "swiglu" if name == "silu" and experts.has_gate else name


def _clamped(experts: nn.Module) -> bool:
    """gpt-oss's clamped SwiGLU (``alpha`` and ``limit``, ``(up + 1) * glu``)."""
    return hasattr(experts, "limit") and hasattr(experts, "alpha") and not hasattr(experts, "act_fn")


def _half(tensor: torch.Tensor, dim: int, part: int, interleaved: bool) -> torch.Tensor:
    """Gate (``part`` 0) or up (1) half of a fused gate/up tensor along ``dim``. A tensor
    transformers composed of the checkpoint's per-expert gate and up tensors splits into
    those groups, another offloaded one gives an ``OffloadedSlice`` (nothing read either
    way); one in memory a view."""
    dim = dim % tensor.dim()
    width = tensor.shape[dim] // 2
    start, stop, step = (part, tensor.shape[dim], 2) if interleaved else (part * width, (part + 1) * width, 1)
    if (not interleaved and isinstance(tensor, ComposedOffloadedTensor) and tensor.cat_dim == dim
            and len(tensor.groups) == 2 and tensor._widths[0] == tensor._widths[1]):
        return ComposedOffloadedTensor.compose([tensor.groups[part]], tensor.stack_dim, None, tensor.dtype,
                                               tensor.q4_0)
    if isinstance(tensor, OffloadedTensor):
        return OffloadedSlice.of(tensor, dim, start, stop, step)
    return tensor[(slice(None),) * dim + (slice(start, stop, step),)]


@dataclass(frozen=True)
class ExpertWeights:
    layout: str  # linear | canonical
    w1: torch.Tensor  # gate projection (or the only one, without a gate)
    w2: torch.Tensor  # down projection
    w3: torch.Tensor | None  # up projection
    biases: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # w1, w3, w2 biases


def expert_weights(experts: Any) -> ExpertWeights:
    """transformers stores gate_up_proj ``[E, 2H, D]`` and down_proj ``[E, D, H]`` (the op's
    linear layout), or their transposes with ``is_transposed`` (the canonical layout)."""
    transposed = bool(experts.is_transposed)
    interleaved = not getattr(experts, "is_concatenated", True)
    layout = "canonical" if transposed else "linear"
    hidden_dim = -1 if transposed else 1  # the axis of the gate/up halves
    if experts.has_gate:
        fused = experts.gate_up_proj
        w1, w3 = (_half(fused, hidden_dim, part, interleaved) for part in (0, 1))
    else:
        w1, w3 = experts.up_proj, None
    biases = None
    if experts.has_bias:
        fused_bias = experts.gate_up_proj_bias
        b1, b3 = (_half(fused_bias, -1, part, interleaved) for part in (0, 1))
        biases = (b1, b3, experts.down_proj_bias)
    return ExpertWeights(layout, w1, experts.down_proj, w3, biases)


# --- plans in force, and the extractor ----------------------------------------------------------
_active: dict[int, MoEFFNPlan] = {}  # id(experts module) -> its plan, inside routed_as_moe_ffn
_active_lock = threading.Lock()
_extractor_classes: dict[type, type[ModuleInfoExtractor]] = {}


@contextmanager
def routed_as_moe_ffn(plans: Sequence[MoEFFNPlan]) -> Iterator[None]:
    """Within this block, the experts modules of ``plans`` export as ``tract_moe_ffn``."""
    for plan in plans:
        _extractor_class(type(plan.experts))
    with _active_lock:
        clash = [p for p in plans if id(p.experts) in _active]
        if clash:
            raise T2NErrorNotImplemented(
                f"{type(clash[0].experts).__name__} is already being exported as tract_moe_ffn by "
                "another export: export one model at a time"
            )
        _active.update((id(p.experts), p) for p in plans)
    try:
        yield
    finally:
        with _active_lock:
            for plan in plans:
                _active.pop(id(plan.experts), None)


def _extractor_class(experts_class: type) -> type[ModuleInfoExtractor]:
    """The extractor of ``experts_class`` (created and registered on first use: transformers
    is not imported by fastnnef, its classes are found on the model)."""
    known = _extractor_classes.get(experts_class)
    if known is None:
        known = type(f"{experts_class.__name__}MoEFFNExtractor", (MoEFFNExpertsExtractor,),
                     {"MODULE_CLASS": experts_class})
        _extractor_classes[experts_class] = known
    return known


def _plan_of(module: nn.Module) -> MoEFFNPlan | None:
    with _active_lock:
        plan = _active.get(id(module))
    return plan if plan is not None and plan.experts is module else None


class MoEFFNExpertsExtractor(ModuleInfoExtractor):
    """A transformers experts module planned by :func:`routed_as_moe_ffn` as one
    ``tract_moe_ffn`` (subclassed per experts class by ``_extractor_class``)."""

    REGISTERED = False  # the base: each subclass registers its experts class

    def takes_over(self, module: nn.Module) -> bool:
        return _plan_of(module) is not None

    def output_dims(self, inputs: Any, output_ranks: Any) -> list[Any] | None:
        """The routed tokens' output has the hidden states' dims [T, D]."""
        return [inputs[0]] if inputs and list(output_ranks) == [len(inputs[0])] else None

    def convert_to_nnef(self, g: Any, node: Any, name_to_tensor: dict[str, Any], null_ref: Any, torch_graph: Any,
                        inference_target: Any, **kwargs: Any) -> list[str]:
        plan = _plan_of(node.module)
        if plan is None:
            raise T2NErrorNotImplemented(f"{node.where()}: this experts module was not planned as tract_moe_ffn")
        if not g.caps.supports(MOE_FFN_FEATURE):
            raise g.unsupported(
                f"{MOE_FFN_OP} needs tract >= {VERSION_GATES[MOE_FFN_FEATURE].first.to_str()}",
                "export with a newer TractNNEF version, or in the dense form (fastnnef.llm.moe.moe_export_forms)",
            )
        x = g.tensor(next(v for v in node.inputs if isinstance(v, TensorValue)))  # hidden_states [T, D]
        weights = expert_weights(plan.experts)
        scope = node.scope or "experts"

        def weight(tensor: torch.Tensor, name: str) -> Any:
            """A parameter as itself, a part of one (a gate or up half) under its own label."""
            if any(tensor is p for p in plan.experts.parameters(recurse=False)):
                return g.parameter(tensor)
            return g.constant(tensor, label=f"{scope}.{name}")

        args = [x, g.parameter(plan.router_weight), weight(weights.w1, "w1"), weight(weights.w2, "w2")]
        if weights.w3 is not None:
            args.append(weight(weights.w3, "w3"))
        attrs: dict[str, Any] = {"k": plan.k, "activation": _activation(plan.experts), "gate": plan.gate,
                                 "expert_layout": weights.layout}
        if plan.router_bias is not None:
            attrs["wg_bias"] = g.parameter(plan.router_bias)
        if weights.biases is not None:
            for name, bias in zip(("w1_bias", "w3_bias", "w2_bias"), weights.biases):
                attrs[name] = weight(bias, name)
        if _clamped(plan.experts):
            experts: Any = plan.experts
            attrs["act_alpha"] = float(experts.alpha)
            attrs["act_limit"] = float(experts.limit)
        packed = [(t, a) for t, a in zip((weights.w1, weights.w2, weights.w3), args[2:]) if t is not None]
        if weights.layout == "linear" and weights.biases is None and not _clamped(plan.experts) and all(
                g.is_packed(a) or getattr(t, "packed_format", None) is not None for t, a in packed):
            # With all three projections Q4_0 and no bias, tract 0.23.9 runs its direct Q4_0
            # plan, which computes one token at a time; a down-projection bias of zeros (the
            # same values) sends it to per-expert plans over its Q4_0 matrix products:
            # 2.4-2.5x faster on a prompt, 1.4x on one token (benches/bench_moe_ffn_layout.py).
            zeros = torch.zeros(weights.w2.shape[0], weights.w2.shape[1], dtype=plan.router_weight.dtype)
            attrs["w2_bias"] = g.constant(zeros, label=f"{scope}.w2_zero_bias")
        if plan.output_scale == 1.0:
            g.emit(MOE_FFN_OP, args, attrs, out=0)
        else:  # a common factor of every gate weight: the routed sum scales with it
            routed = g.tmp(MOE_FFN_OP, args, attrs, dtype=g.out_dtype(0), shape=g.out_shape(0), suffix="routed")
            g.emit("mul", [routed, plan.output_scale], out=0)
        return []
