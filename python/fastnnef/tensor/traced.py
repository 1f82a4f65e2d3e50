"""The ``__torch_function__`` shared by fastnnef's stand-in tensors (quantized, offloaded,
opaque): eager ops run as usual, and under ``jit.trace`` each op gets a plain tensor that the
trace knows as the stand-in's own value (its ``GetAttr``), so a weight stays a variable of
the graph instead of a baked constant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_map


def traced_torch_function(
    func: Any, args: Sequence[Any], kwargs: Any, kind: type, to_plain: Callable[[Any], torch.Tensor],
    stand_in: Callable[[Any], torch.Tensor | None] | None = None,
) -> Any:
    """Run ``func``; while tracing, replace each ``kind`` argument by ``to_plain(arg)``, or,
    for a module's own tensor (a ``GetAttr`` of the graph, never a constant), by
    ``stand_in(arg)`` when that gives one (a value-less tensor of its shape and dtype)."""
    kwargs = kwargs or {}
    if torch._C._get_tracing_state() is None:
        # Eager: ops reach the subclass's __torch_dispatch__.
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def traced(value: Any) -> Any:
        if not isinstance(value, kind):
            return value
        try:
            known_as = torch._C._get_value_trace(value)  # type: ignore[attr-defined]
        except RuntimeError:
            known_as = None  # not a module parameter: recorded as a constant, as any tensor
        state = torch._C._get_tracing_state()
        # Loading or dequantizing is not part of the graph. (torch's stubs lack the private
        # tracing-state functions of torch._C used here and below.)
        torch._C._set_tracing_state(None)  # type: ignore[attr-defined]
        try:
            plain = stand_in(value) if stand_in is not None and known_as is not None else None
            if plain is None:
                plain = to_plain(value)
        finally:
            torch._C._set_tracing_state(state)  # type: ignore[attr-defined]
        if known_as is not None:
            torch._C._set_value_trace(plain, known_as)  # type: ignore[attr-defined]
        return plain

    return func(*tree_map(traced, args), **tree_map(traced, kwargs))
