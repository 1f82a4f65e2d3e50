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
    func: Any, args: Sequence[Any], kwargs: Any, kind: type, to_plain: Callable[[Any], torch.Tensor]
) -> Any:
    """Run ``func``; while tracing, replace each ``kind`` argument by ``to_plain(arg)``."""
    kwargs = kwargs or {}
    if torch._C._get_tracing_state() is None:
        # Eager: ops reach the subclass's __torch_dispatch__.
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def traced(value: Any) -> Any:
        if not isinstance(value, kind):
            return value
        state = torch._C._get_tracing_state()
        # Loading or dequantizing is not part of the graph. (torch's stubs lack the private
        # tracing-state functions of torch._C used here and below.)
        torch._C._set_tracing_state(None)  # type: ignore[attr-defined]
        try:
            plain = to_plain(value)
        finally:
            torch._C._set_tracing_state(state)  # type: ignore[attr-defined]
        try:
            known_as = torch._C._get_value_trace(value)  # type: ignore[attr-defined]
        except RuntimeError:
            return plain  # not a module parameter: recorded as a constant, as any tensor
        torch._C._set_value_trace(plain, known_as)  # type: ignore[attr-defined]
        return plain

    return func(*tree_map(traced, args), **tree_map(traced, kwargs))
