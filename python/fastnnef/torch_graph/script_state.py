"""The state of a TorchScript module, kept across the runs an export makes of its graph.

A stateful ScriptModule (Silero VAD's ``VADRNNJITMerge``: ``self._state``,
``self._context``, ``self._last_sr``...) changes its attributes each time its forward runs:
it rebinds them (``prim::SetAttr``) or writes into them. An export runs the graph more than
once (``harden_jit_for_export``'s passes evaluate it on the example inputs, then the trace
runs it), and ``torch.jit.freeze`` shares the attribute tensors with the user's module. Were
those runs to leave their changes, each would start from the state the previous one left:
the branches kept, the state the trace bakes in and the trace's outputs (the check's
references) would all be those of a later call than the one the user asked for, and the
check would pass on an artefact that does not compute ``model(*args)``.

``attributes_kept`` gives every attribute of the module and of its submodules back its
value after a run (the same object, and the same values for a tensor written in place), so
that every run starts from the state the user's model had.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorInvalidArgument

Attribute = tuple[torch._C.ScriptModule, str, str, Any]  # owner, name, dotted path, value


def script_attributes(module: torch._C.ScriptModule, prefix: str = "") -> Iterator[Attribute]:
    """(owner, attribute name, dotted path, value) of every attribute of ``module`` and
    its submodules (submodules themselves are walked into, not listed)."""
    # torch's stubs lack this private torch._C binding
    members = torch._C._jit_debug_module_iterators(module)  # type: ignore[attr-defined]
    for name, value in members["named_attributes"]:
        if isinstance(value, torch._C.ScriptModule):
            yield from script_attributes(value, f"{prefix}{name}.")
        else:
            yield module, name, prefix + name, value


def _parameter_ids(module: torch._C.ScriptModule) -> set[int]:
    # torch's stubs lack this private torch._C binding
    members = torch._C._jit_debug_module_iterators(module)  # type: ignore[attr-defined]
    return {id(p) for _, p in members["named_parameters_r"]}


@contextlib.contextmanager
def attributes_kept(module: torch._C.ScriptModule) -> Iterator[None]:
    """Inside, ``module``'s graph may run and change its attributes; after, each one is
    bound again to the object it held before, a tensor that was written in place gets its
    values back, and a write into a parameter is refused (keeping a copy of every weight to
    undo one would double the memory of an export)."""
    params = _parameter_ids(module)
    # (owner, name, path, value, its version if a tensor, a copy to restore it from if not a weight)
    saved: list[tuple[torch._C.ScriptModule, str, str, Any, int | None, torch.Tensor | None]] = []
    for owner, name, path, value in script_attributes(module):
        if isinstance(value, torch.Tensor) and id(value) not in params:
            # state tensors are small; weights (parameters) are only watched
            saved.append((owner, name, path, value, value._version, value.detach().clone()))
        else:
            version = value._version if isinstance(value, torch.Tensor) else None
            saved.append((owner, name, path, value, version, None))
    written: list[str] = []
    try:
        yield
    finally:
        for owner, name, path, value, version, copy in saved:
            owner.setattr(name, value)
            if version is None or value._version == version:
                continue
            if copy is None:
                written.append(path)
            else:
                with torch.no_grad():
                    value.copy_(copy)
    if written:
        raise T2NErrorInvalidArgument(
            f"the forward writes in place into the weights {written} (so each call changes "
            "the model): fastnnef cannot export them as they were before. Write into a copy "
            "in forward or keep the values in a buffer"
        )
