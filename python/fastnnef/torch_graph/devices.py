"""Models and inputs that live on an accelerator (``cuda:0``, ``mps``...) are exported from
a CPU stand-in: the trace, the weights written and the check's references are all on CPU,
where tract runs, and the user's model is never moved.

``on_cpu(model, args)`` returns ``(model, args)`` themselves when every tensor is on CPU;
otherwise a stand-in of the model whose parameters, buffers and tensor attributes are CPU
copies of the user's (an ``nn.Module``'s one tensor at a time, so the accelerator's memory
does not grow; tensors already on CPU are shared, tied weights stay tied) and the arguments with
their tensors copied to CPU. The stand-in computes what the model computes (on CPU's
kernels), so the check compares tract with the model's own arithmetic for the inputs given.

A ``meta`` tensor has no values to copy: it is left as it is, for the trace to refuse.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.torch_graph.script_state import script_attributes

_CPU = torch.device("cpu")


def _elsewhere(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds values on a device other than the CPU."""
    return tensor.device.type not in ("cpu", "meta")


def _module_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    """Every parameter, buffer and other tensor attribute (held alone or in a list, tuple
    or dict: a cache) of ``model``'s modules."""
    if isinstance(model, torch.jit.ScriptModule):
        for _owner, _name, _path, value in script_attributes(model._c):
            if isinstance(value, torch.Tensor):
                yield value
        return
    for module in model.modules():
        yield from (t for t in module._parameters.values() if t is not None)
        yield from (t for t in module._buffers.values() if t is not None)
        for key, value in vars(module).items():
            if key not in ("_parameters", "_buffers", "_modules"):
                yield from (leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor))


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on CPU (itself when it is there), a parameter staying a parameter."""
    if not _elsewhere(tensor):
        return tensor
    copied = tensor.detach().to(_CPU)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(copied, requires_grad=tensor.requires_grad)
    return copied


def _script_stand_in(model: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """A copy of a ScriptModule with every tensor attribute (weights, buffers, state) on CPU.
    TorchScript copies a module's tensors with it, on their device: a scripted model needs
    room for a second copy there while this runs (JIT-only models are small ones)."""
    clone = copy.deepcopy(model)
    for owner, name, _path, value in script_attributes(clone._c):
        if isinstance(value, torch.Tensor) and _elsewhere(value):
            owner.setattr(name, _cpu_copy(value))
    return clone


def _module_stand_in(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose tensors are CPU copies of the model's: the memo hands
    ``copy.deepcopy`` each tensor's copy, so no tensor is duplicated on its device."""
    memo: dict[int, Any] = {}
    for tensor in _module_tensors(model):
        if id(tensor) not in memo:
            memo[id(tensor)] = _cpu_copy(tensor)
    return copy.deepcopy(model, memo)


def on_cpu(model: nn.Module, args: Any) -> tuple[nn.Module, Any]:
    """``(model, args)`` when all their tensors are on CPU, else a CPU stand-in of the model
    and the arguments with their tensors on CPU (the user's model and tensors untouched)."""
    leaves = pytree.tree_leaves(args)
    inputs_elsewhere = any(isinstance(leaf, torch.Tensor) and _elsewhere(leaf) for leaf in leaves)
    model_elsewhere = any(_elsewhere(t) for t in _module_tensors(model))
    if not (inputs_elsewhere or model_elsewhere):
        return model, args
    if model_elsewhere:
        try:
            model = _script_stand_in(model) if isinstance(model, torch.jit.ScriptModule) else _module_stand_in(model)
        except Exception as err:  # deepcopy raises what the model's attributes raise
            raise T2NErrorInvalidArgument(
                f"the model lives on an accelerator and copying it to CPU for the export failed "
                f"({type(err).__name__}: {err}): export a CPU copy of it (model.to('cpu') on a copy)"
            ) from err
    args = pytree.tree_map(lambda leaf: _cpu_copy(leaf) if isinstance(leaf, torch.Tensor) else leaf, args)
    return model, args
