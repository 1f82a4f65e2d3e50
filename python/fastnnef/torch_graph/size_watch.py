"""Sizes that tracing freezes: a size read from a shape, then turned into a Python number.

While tracing, ``x.shape[i]`` is a 0-d tensor and arithmetic on it is recorded, but
``math.ceil(n)``, ``int(n)``, ``float(n)``, ``max(n, 0)`` or ``if n > 4`` turn it into a
Python number (or a branch taken) that the graph holds as a constant: right at the traced
size, wrong at any other. For a static export that is what folding does anyway; with a
dynamic axis it is a silent error. ``SizeWatch`` (a torch function mode, active during the
trace only) follows the 0-d tensors computed from shapes and records each such conversion
with the sizes that fed it; when one of those sizes is the traced length of a dynamic
axis, the IR builder refuses a number and warns about a branch (often the same at every
length: ``if seq_len > max_cached``).
"""

from __future__ import annotations

import traceback
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

# Python conversions of a tensor to a number or a truth value: tracing cannot record them.
_CONVERSIONS: dict[Callable[..., Any], str] = {
    torch.Tensor.__float__: "float() (math.ceil, math.sqrt... call it)",
    torch.Tensor.__int__: "int()",
    torch.Tensor.__bool__: "a comparison used as a bool (max, min, if)",
    torch.Tensor.__index__: "an index",
    torch.Tensor.item: ".item()",
    torch.Tensor.tolist: ".tolist()",
}
_SHAPES: frozenset[Callable[..., Any]] = frozenset({torch.Tensor.size, torch.Tensor.shape.__get__})  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SizeConversion:
    """One size turned into a Python value while tracing."""

    how: str  # the conversion, in words
    branch: bool  # a truth value (a branch or max/min taken), not a number
    where: str  # the user's source line
    sizes: frozenset[int]  # traced values of the shape entries it was computed from


class SizeWatch(TorchFunctionMode):
    """Records ``SizeConversion``s while active; computes nothing itself."""

    def __init__(self) -> None:
        super().__init__()
        self.conversions: list[SizeConversion] = []
        # id(0-d tensor) -> (the tensor, weakly; sizes it comes from). Checked by identity,
        # since an id may be reused once its tensor is gone.
        self._from_sizes: dict[int, tuple[weakref.ref[torch.Tensor], frozenset[int]]] = {}

    def _sizes_of(self, value: Any) -> Optional[frozenset[int]]:
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            return None
        entry = self._from_sizes.get(id(value))
        return entry[1] if entry is not None and entry[0]() is value else None

    def _mark(self, value: Any, sizes: frozenset[int]) -> None:
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            self._from_sizes[id(value)] = (weakref.ref(value), sizes)
        elif isinstance(value, (tuple, list)):
            for item in value:
                self._mark(item, sizes)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        how = _CONVERSIONS.get(func)
        if how is None:
            result = func(*args, **kwargs)
        else:
            sizes = self._sizes_of(args[0]) if args else None
            frame = _user_frame()
            if sizes:
                where = f"{frame.filename}:{frame.lineno}: {frame.line}" if frame else "<unknown>"
                self.conversions.append(SizeConversion(how, func is torch.Tensor.__bool__, where, sizes))
            result = _warning_at(frame, func, args, kwargs)
        if func in _SHAPES:  # each entry comes from its own traced value
            for entry in result if isinstance(result, tuple) else (result,):
                self._mark(entry, frozenset({_untraced_int(entry)}))
            return result
        fed = [s for s in (self._sizes_of(a) for a in (*args, *kwargs.values())) if s is not None]
        if fed:
            self._mark(result, frozenset().union(*fed))
        return result


def _untraced_int(entry: Any) -> int:
    """The value of a shape entry, read without the tracer (which would warn that the
    trace freezes it: this read is ours, not the model's)."""
    if not isinstance(entry, torch.Tensor):
        return int(entry)
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)  # type: ignore[arg-type]
    try:
        return int(entry)
    finally:
        torch._C._set_tracing_state(state)


def _user_frame() -> Optional[traceback.FrameSummary]:
    """The innermost frame outside torch and fastnnef: the line that converted."""
    frames = [f for f in traceback.extract_stack()[:-2] if "/torch/" not in f.filename and "/fastnnef/" not in f.filename]
    return frames[-1] if frames else None


def _warning_at(frame: Optional[traceback.FrameSummary], func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)``, its warnings (the tracer's "converting a tensor to a
    Python number") shown at the user's line rather than at this module's call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = func(*args, **kwargs)
    for w in caught:
        if frame is None or frame.lineno is None:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        else:
            warnings.warn_explicit(w.message, w.category, frame.filename, frame.lineno)
    return result
