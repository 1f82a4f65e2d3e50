"""Module calls kept whole by the trace, for module extractors (op/custom_extractors).

While a model is traced, each submodule that has an extractor runs through one custom op,
``fastnnef::module_call(Tensor[] inputs, int key) -> Tensor[]``: the trace records that op
(with the module's tensor arguments and results, shapes included) and not the module's
internals, which run unrecorded inside the op. The IR turns the op back into one IR op
that the module's extractor converts.

Both front ends use it: the jit tracer runs the op's kernel on real tensors, ``torch.export``
(fx_graph/capture.py) its fake kernel, the extractor's ``fake_forward`` on torch's fake
tensors (by default the module's own forward), whose outputs' symbolic sizes are the call's.

The redirection sets an instance ``forward`` on those submodules for the duration of the
trace (under the trace lock, removed in ``finally``): calls from any other thread in that
window still compute the module's own result, through the op.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from fastnnef.exceptions import T2NErrorInvalidArgument

OP_KIND = "fastnnef::module_call"

_LIB = torch.library.Library("fastnnef", "DEF")
_LIB.define("module_call(Tensor[] inputs, int key) -> Tensor[]")

_keys = itertools.count()
_live: dict[int, ModuleCall] = {}  # key -> call, while its trace runs
_live_lock = threading.Lock()


@dataclass
class ModuleCall:
    """One submodule whose calls are kept whole, and what its extractor needs."""

    module: nn.Module
    path: str  # the module's path in the model, e.g. "encoder.block"
    extractor: Any  # the ModuleInfoExtractor instance
    key: int = field(default_factory=lambda: next(_keys))
    _args: Any = None  # (leaves, spec) of the call in progress
    _out: Any = None  # (leaves, spec) of its result, tensors replaced by None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The instance ``forward`` installed during the trace."""
        leaves, spec = pytree.tree_flatten((args, kwargs))
        self._args = (leaves, spec)
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        outs = iter(torch.ops.fastnnef.module_call(tensors, self.key))
        template, out_spec = self._out
        return pytree.tree_unflatten([next(outs) if t is None else t for t in template], out_spec)

    def called_as(self, other: ModuleCall) -> None:
        """This module's call is a copy of ``other``'s (an alike layer's, fx_graph/repeats.py):
        the same non-tensor arguments, for a run of the op again (a functionalization)."""
        self._args = other._args

    def run(self, tensors: list[torch.Tensor], fake: bool = False) -> list[torch.Tensor]:
        """The op's kernel: the module's own forward on the call's arguments; ``fake``
        (torch.export's fake tensors): the extractor's ``fake_forward``, which gives the
        outputs' sizes without fixing a dynamic one (a loop over a sequence axis would)."""
        leaves, spec = self._args
        supply = iter(tensors)
        args, kwargs = pytree.tree_unflatten(
            [next(supply) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec
        )
        if fake:
            result = self.extractor.fake_forward(self.module, *args, **kwargs)
        else:
            result = type(self.module).forward(self.module, *args, **kwargs)
        out_leaves, out_spec = pytree.tree_flatten(result)
        self._out = ([None if isinstance(o, torch.Tensor) else o for o in out_leaves], out_spec)
        outs = [o for o in out_leaves if isinstance(o, torch.Tensor)]
        # A custom op's outputs must not alias its inputs (a module may return one as is).
        return [o.clone() if any(o is t for t in tensors) else o for o in outs]


def _kernel(inputs: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    with _live_lock:
        call = _live[key]
    return call.run(list(inputs))


def _fake_kernel(inputs: list[torch.Tensor], key: int) -> list[torch.Tensor]:
    with _live_lock:
        call = _live[key]
    return call.run(list(inputs), fake=True)


_LIB.impl("module_call", _kernel, "CompositeExplicitAutograd")
# torch.export computes no value: the outputs' sizes come from a run on fake tensors.
torch.library.register_fake(OP_KIND, _fake_kernel, lib=_LIB)


@contextlib.contextmanager
def kept_whole(model: nn.Module, extractor_of: Callable[[nn.Module], Any | None]) -> Iterator[dict[int, ModuleCall]]:
    """Within this block, submodules of ``model`` that ``extractor_of`` gives an extractor
    run through ``fastnnef::module_call``; yields ``{key: ModuleCall}`` for the IR."""
    calls: dict[int, ModuleCall] = {}
    seen: set[int] = set()
    for path, module in model.named_modules():
        if id(module) in seen:
            continue
        seen.add(id(module))
        extractor = extractor_of(module)
        if extractor is None:
            continue
        if "forward" in module.__dict__:
            raise T2NErrorInvalidArgument(
                f"module {path or '<root>'} ({type(module).__name__}) has an instance attribute "
                "'forward', so its extractor cannot take over its calls: define forward on the class"
            )
        call = ModuleCall(module, path, extractor)
        calls[call.key] = call
    with _live_lock:
        _live.update(calls)
    try:
        for call in calls.values():
            call.module.__dict__["forward"] = call.forward
        yield calls
    finally:
        for call in calls.values():
            call.module.__dict__.pop("forward", None)
        with _live_lock:
            for key in calls:
                _live.pop(key, None)
