"""``harden_jit_for_export``: specialize a TorchScript-only model for its example inputs
(torch_to_nnef's ``torch_graph.harden``).

Two stages, as in the reference:

1. resolve calls: ``torch.jit.freeze`` (inlines every submodule call, folds attributes;
   the module must be in eval mode), or, with ``freeze=False`` or when freezing fails,
   ``jit_inline.inline_unresolvable_submodules`` (only the calls of classes no import
   resolves);
2. specialize: the passes of ``jit_passes.SPECIALIZATION_PASSES``, in order (size queries
   that only steer control flow, constant scalar arithmetic, constant Ifs, tuples built then
   taken apart, ``.data``, assertion Ifs, then every remaining If for the example inputs).

The passes rewrite the forward graph of the module returned, never the user's: freezing
makes a new module, and the unfrozen path works on a copy with its own classes (TorchScript
keeps method graphs on the class) that shares the user's weights. The passes that run the
graph on the example inputs run it on copies of them, and give a stateful module's
attributes back after each run (``script_state.py``): the module returned has the user's
state, and so has the user's.

fastnnef's exporter would not need stage 2: it runs the graph in TorchScript's interpreter
under a function trace, which records the branches the example inputs take anyway. The
chain is there for the reference's users and for graphs handed to other tools.
"""

from __future__ import annotations

import functools
import itertools
import typing as T

import torch
from torch.jit._recursive import wrap_cpp_module

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.log import get_logger
from fastnnef.torch_graph.jit_inline import inline_unresolvable_submodules
from fastnnef.torch_graph.jit_passes import SPECIALIZATION_PASSES

log = get_logger(__name__)


def harden_jit_for_export(
    model: torch.jit.ScriptModule,
    args: T.Sequence[T.Any] | torch.Tensor,
    *,
    freeze: bool = True,
    diagnostics: dict[str, T.Any] | None = None,
) -> torch.jit.ScriptModule:
    """Return ``model`` specialized for ``args`` (its forward's arguments, without
    ``self``; a lone tensor means ``(tensor,)``). ``diagnostics``, when a dict, receives one
    count per pass (keyed by pass name), ``froze`` and, when the manual inline ran,
    ``inline_unresolvable_submodules``."""
    if not isinstance(model, torch.jit.ScriptModule):
        raise T2NErrorInvalidArgument(
            f"harden_jit_for_export takes a torch.jit.ScriptModule, got {type(model).__name__}"
        )
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    counts: dict[str, T.Any] = {"froze": False}
    if freeze:
        if model.training:
            log.warning("harden_jit_for_export: freezing needs eval mode (call model.eval()); inlining instead")
        else:
            try:
                model = torch.jit.freeze(model)
                counts["froze"] = True
            except RuntimeError as err:
                log.warning("torch.jit.freeze failed (%s); inlining unresolvable submodules instead", err)
    if not counts["froze"]:
        model = _own_copy(model)
        counts[inline_unresolvable_submodules.__name__] = inline_unresolvable_submodules(model.graph, model)
    graph = model.graph
    example_inputs = (model._c, *args)
    for run_pass, takes_inputs in SPECIALIZATION_PASSES:
        counts[run_pass.__name__] = run_pass(graph, example_inputs) if takes_inputs else run_pass(graph)
    torch._C._jit_pass_dce(graph)  # the tuples and constants the passes left unused
    if diagnostics is not None:
        diagnostics.update(counts)
    return model


def _own_copy(model: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """``model`` with its own classes (so rewriting its graphs leaves the user's model
    alone), holding the user's weights and buffers: the same storage, detached (an export
    records them as constants, which must not require grad)."""
    # torch's only binding that clones a module together with its classes.
    # torch's stubs lack this private torch._C API
    clone = wrap_cpp_module(torch._C._hack_do_not_use_clone_module_with_class(model._c, [], []))  # type: ignore[attr-defined]
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        *path, attr = name.split(".")
        owner = functools.reduce(getattr, path, clone)
        owner._c.setattr(attr, tensor.detach())
    return clone
