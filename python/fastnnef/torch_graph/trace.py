"""Trace a model once with ``torch.jit.trace``, with structured IO flattened.

The model runs exactly once: the outputs of the tracing run are kept as the reference
outputs for check_io (no separate eager forward, no re-execution for shapes).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIoQuantity,
    T2NErrorTorchJitTraceFailed,
)
from fastnnef.log import get_logger
from fastnnef.torch_graph import size_watch
from fastnnef.torch_graph.module_calls import ModuleCall, kept_whole
from fastnnef.torch_graph.script_state import attributes_kept
from fastnnef.torch_graph.size_watch import SizeConversion

log = get_logger(__name__)

# Prefix of the user's model inside the flattening wrapper; stripped from every path.
WRAPPED = "model"


@dataclass
class TracedModel:
    """The result of tracing: the inlined graph and what is needed to read it."""

    graph: torch._C.Graph
    wrapper: FlatIO
    flat_inputs: list[torch.Tensor]
    flat_outputs: list[torch.Tensor]
    input_names: list[str]
    output_names: list[str]
    has_self: bool = True  # graph input 0 is the wrapper module (False for TorchScript)
    names_from: nn.Module | None = None  # where parameter names come from
    module_calls: dict[int, ModuleCall] = field(default_factory=dict)  # kept whole for extractors
    # Sizes the model turned into Python numbers while traced (size_watch.py).
    size_conversions: list[SizeConversion] = field(default_factory=list)


class FlatIO(nn.Module):
    """Calls the user's model with structured args rebuilt from flat tensors, and returns
    its outputs flattened. Holds the model by reference: the user's model is untouched."""

    model: nn.Module

    def __init__(self, model: nn.Module, leaves: list[Any], spec: Any, tensor_slots: list[int]):
        super().__init__()
        self.model = model
        self._leaves = leaves
        self._spec = spec
        self._tensor_slots = tensor_slots
        self.captured: list[torch.Tensor] | None = None
        self.out_spec: Any = None
        self.conversions: size_watch.ConversionLog | None = None  # sizes frozen (size_watch.py)
        self.frozen: list[SizeConversion] = []

    def call_model(self, *args: Any) -> Any:
        return self.model(*args)

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = list(self._leaves)
        for slot, tensor in zip(self._tensor_slots, flat):
            leaves[slot] = tensor
        args = pytree.tree_unflatten(leaves, self._spec)
        out = self.call_model(*args)
        out_leaves, self.out_spec = pytree.tree_flatten(out)
        not_tensors = [type(o).__name__ for o in out_leaves if not isinstance(o, torch.Tensor)]
        if not_tensors:
            raise T2NErrorInvalidArgument(
                f"the model returns non-tensor values ({', '.join(not_tensors)}): NNEF graphs "
                "output tensors only; return tensors (or wrap the model to drop the rest)"
            )
        self.captured = [o.detach() for o in out_leaves]
        if self.conversions is not None:
            self.frozen = self.conversions.conversions()
        return tuple(out_leaves)


class _ScriptCall(FlatIO):
    """For TorchScript models: runs the script's graph in the interpreter, so that a
    function trace records its aten ops (a ScriptModule cannot be traced as a submodule).
    Weights appear as constants; the IR names them after the parameters they view."""

    def call_model(self, *args: Any) -> Any:
        script = self.model
        # torch's stubs lack the private torch._C._jit_interpret_graph
        return torch._C._jit_interpret_graph(script.graph, (script._c, *args))  # type: ignore[attr-defined]


def normalize_args(args: Any) -> tuple[Any, ...]:
    """The reference's rule: a lone tensor/number/dict becomes a 1-tuple."""
    if isinstance(args, (torch.Tensor, int, float, bool, dict)):
        return (args,)
    if isinstance(args, type({}.values())):
        return tuple(args)
    if isinstance(args, (list, tuple)):
        return tuple(args)
    raise T2NErrorInvalidArgument(
        f"args must be a tensor or a tuple/list of the forward's arguments, got {type(args).__name__}"
    )


def expand_io_names(
    names: Sequence[str] | None, top_level: Sequence[Any], n_flat: int, prefix: str, what: str
) -> list[str]:
    """Names for the flat IO: as given, or derived per top-level item (``name_0``, dict keys)."""
    if names is None:
        return [f"{prefix}_{i}" for i in range(n_flat)]
    names = list(names)
    if len(names) == n_flat:
        return names
    if len(names) == len(top_level):
        # One name per top-level item: nested items get the key path appended
        # (``rest_p``, ``rest_q_0``), as dict keys or positions.
        out: list[str] = []
        for name, item in zip(names, top_level):
            for path, leaf in pytree.tree_flatten_with_path(item)[0]:
                if isinstance(leaf, torch.Tensor):
                    keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
                    out.append("_".join([name, *keys]))
        if len(out) == n_flat:
            return out
    raise T2NErrorIoQuantity(
        f"{len(names)} {what} names were given but the model has {n_flat} flat {what}s "
        f"(after flattening tuples, lists and dicts): give exactly {n_flat} names"
    )


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode and restore each one's own flag afterwards."""
    # Frozen ScriptModules have no training flag at all: nothing to switch there.
    flags = [(m, m.training) for m in model.modules() if hasattr(m, "training")]
    try:
        for module, _ in flags:
            module.training = False
        yield
    finally:
        for module, training in flags:
            module.training = training


# The dicts of a module that hold its parameters, buffers (restored entry by entry) and
# submodules; everything else in its __dict__ is an attribute, restored by identity.
_MODULE_DICTS = frozenset({"_parameters", "_buffers", "_modules"})


def _attributes_of(module: nn.Module) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items() if k not in _MODULE_DICTS}


def _restore(held: dict[str, Any], before: dict[str, Any]) -> None:
    """``held`` made the same mapping to the same objects as ``before``."""
    if held.keys() != before.keys() or any(held[k] is not v for k, v in before.items()):
        held.clear()
        held.update(before)


@contextlib.contextmanager
def state_kept(model: nn.Module) -> Iterator[None]:
    """A forward may change the model: write into its buffers (a cache, a counter), rebind
    them (``self.state = self.state + x``) or other attributes (``self.calls += 1``). After
    the trace, every module gets its buffers, parameters and attributes back (the same
    objects; a buffer written in place its values), so the export leaves the model as it was
    and the graph's weights, read from the model after the trace, are those the traced call
    read. A write into a weight is refused: keeping a copy of every weight to undo one would
    double the memory of an export."""
    buffers = [(b, b._version, b.detach().clone()) for b in model.buffers() if type(b) is torch.Tensor]
    params = [(name, p, p._version) for name, p in model.named_parameters()]
    bindings = [(m, dict(m._parameters), dict(m._buffers), _attributes_of(m)) for m in model.modules()]
    try:
        yield
    finally:
        for module, module_params, module_buffers, attributes in bindings:
            _restore(module._parameters, module_params)
            _restore(module._buffers, module_buffers)
            for name in _attributes_of(module).keys() - attributes.keys():
                delattr(module, name)  # added by the forward
            for name, value in attributes.items():
                if vars(module).get(name) is not value:
                    object.__setattr__(module, name, value)
        for buffer, version, saved in buffers:
            if buffer._version != version:
                buffer.copy_(saved)
    written = [name for name, p, version in params if p._version != version]
    if written:
        raise T2NErrorInvalidArgument(
            f"the forward writes in place into the weights {written} (so each call changes "
            "the model, and the trace's call did): fastnnef cannot export them as they were "
            "before. Write into a copy in forward (w = self.w.clone()) or keep the values in "
            "a buffer"
        )


@dataclass
class FlatInputs:
    """A call's arguments flattened: every leaf, where the tensors are, and their names."""

    leaves: list[Any]
    spec: Any
    tensor_slots: list[int]  # positions of the tensor leaves (the graph's inputs)
    tensors: list[torch.Tensor]
    names: list[str]


def flatten_inputs(args: Any, input_names: Sequence[str] | None) -> FlatInputs:
    """``args`` flattened (tuples, lists, dicts) into the graph's tensor inputs, with their
    names; non-tensor leaves are baked into the graph, said once. Both front ends
    (``trace_model``, ``fx_graph/capture.py``) read their inputs through it."""
    top_level = normalize_args(args)
    leaves, spec = pytree.tree_flatten(top_level)
    tensor_slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    baked = [type(leaf).__name__ for leaf in leaves if not isinstance(leaf, torch.Tensor)]
    if baked:
        log.warning("non-tensor inputs are baked into the graph as constants: %s", ", ".join(baked))
    flat_inputs = [leaves[i] for i in tensor_slots]
    for i, t in enumerate(flat_inputs):
        if t.device.type != "cpu":
            raise T2NErrorInvalidArgument(
                f"input {i} is on {t.device}: the trace needs its values on CPU (export_model_to_nnef "
                "copies tensors of other devices there; a meta tensor has no values): pass a tensor with values"
            )
    in_names = expand_io_names(input_names, top_level, len(flat_inputs), "input", "input")
    return FlatInputs(leaves, spec, tensor_slots, flat_inputs, in_names)


# jit.trace's state is process-global in some torch versions; serializing traces keeps
# concurrent exports safe without patching anything.
_TRACE_LOCK = threading.Lock()


def trace_model(
    model: nn.Module,
    args: Any,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    names_from: nn.Module | None = None,
    extractor_of: Callable[[nn.Module], Any | None] | None = None,
    watch_sizes: bool = False,
) -> TracedModel:
    """Trace ``model(*args)`` once; return the inlined graph and the flat IO.
    ``names_from``: the module whose parameter names label the weights (for a frozen
    TorchScript model, the module before freezing). ``extractor_of``: the module extractor
    of a submodule, or None; submodules that have one are kept whole (module_calls.py).
    ``watch_sizes``: record the sizes the model turns into Python numbers (size_watch.py;
    asked for exports with dynamic axes, where those are frozen at the traced length)."""
    flat = flatten_inputs(args, input_names)
    leaves, spec, tensor_slots = flat.leaves, flat.spec, flat.tensor_slots
    flat_inputs, in_names = flat.tensors, flat.names
    is_script = isinstance(model, torch.jit.ScriptModule)
    wrapper = (_ScriptCall if is_script else FlatIO)(model, leaves, spec, tensor_slots)
    keep = extractor_of if extractor_of is not None and not is_script else (lambda _m: None)
    conversions = size_watch.ConversionLog() if watch_sizes else None
    # What the forward changes in the model (its state) is given back after the trace.
    kept = attributes_kept(model._c) if isinstance(model, torch.jit.ScriptModule) else state_kept(model)
    try:
        with _TRACE_LOCK, torch.no_grad(), eval_mode(model), kept, \
                kept_whole(model, keep) as module_calls, warnings.catch_warnings():
            # jit.trace probes every attribute of every submodule (module_has_exports), which
            # fires transformers' deprecated-property FutureWarnings (is_gradient_checkpointing)
            # although nothing uses them. Filters are process-wide: the trace lock serializes this.
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
            if conversions is not None:  # every conversion the tracer warns about, even one shown before
                warnings.simplefilter("always", torch.jit.TracerWarning)
                wrapper.conversions = warnings.showwarning = conversions
            # The model may write into its inputs: trace on copies, keep the user's tensors.
            trace_inputs = tuple(t.clone() for t in flat_inputs)
            try:
                if is_script:
                    # A function trace (a bound method would be traced as its module).
                    def run_script(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
                        return wrapper(*flat)

                    traced = torch.jit.trace(run_script, trace_inputs, check_trace=False, strict=False)
                else:
                    traced = torch.jit.trace(wrapper, trace_inputs, check_trace=False, strict=False)
            except (T2NErrorInvalidArgument, T2NErrorIoQuantity):
                raise
            except Exception as err:  # torch raises many kinds; keep its message whole
                raise T2NErrorTorchJitTraceFailed(
                    f"torch.jit.trace failed on {type(model).__name__}: {err}. fastnnef exports "
                    "what tracing records: data-dependent Python control flow, non-tensor "
                    "outputs and in-place ops on inputs are the usual causes"
                ) from err
    finally:
        wrapper.conversions = None
        if conversions is not None:  # under the caller's filters again
            conversions.show_again()
    frozen, wrapper.frozen = wrapper.frozen, []
    assert wrapper.captured is not None
    flat_outputs = wrapper.captured
    wrapper.captured = None
    top_out = pytree.tree_unflatten(list(flat_outputs), wrapper.out_spec)
    top_out_items = top_out if isinstance(top_out, (tuple, list)) else (top_out,)
    out_names = expand_io_names(output_names, top_out_items, len(flat_outputs), "output", "output")
    graph = traced.graph if is_script else traced.inlined_graph
    inline_autograd_functions(graph)
    return TracedModel(
        graph=graph,
        has_self=not is_script,
        names_from=names_from if names_from is not None else model,
        wrapper=wrapper,
        flat_inputs=flat_inputs,
        flat_outputs=list(flat_outputs),
        input_names=in_names,
        output_names=out_names,
        module_calls=module_calls,
        size_conversions=frozen,
    )


def inline_autograd_functions(graph: torch._C.Graph) -> None:
    """Replace each custom ``torch.autograd.Function`` call (``prim::PythonOp``, a
    hand-written GELU...) by the ops of its ``forward``, which tracing records as the
    node's subgraph: only the forward is exported, its backward is not needed."""
    changed = True
    while changed:  # a forward may call another Function
        changed = False
        for node in list(graph.nodes()):
            if node.kind() != "prim::PythonOp" or not node.hasAttribute("Subgraph"):
                continue
            body = node.g("Subgraph")
            inputs = list(node.inputs())
            if len(list(body.inputs())) != len(inputs) or len(list(body.outputs())) != node.outputsSize():
                continue  # left for the IR builder to refuse, naming it
            with graph.insert_point_guard(node):
                results = graph.insertGraph(body, inputs)
            for old, new in zip(node.outputs(), results):
                new.setType(old.type())
                old.replaceAllUsesWith(new)
            node.destroy()
            changed = True
