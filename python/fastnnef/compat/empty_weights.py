"""``init_empty_weights``: build a model's structure without its weights (torch_to_nnef's
``utils.init_empty_weights``, accelerate's contract). Served at ``fastnnef.utils``; drop-in
only: fastnnef's own loaders build on the ``meta`` device without patching anything.

It patches ``nn.Module.register_parameter`` (and ``register_buffer``) for the WHOLE
PROCESS while active, as accelerate's does: a model built in another thread meanwhile gets
``meta`` weights too. Overlapping uses (nested, or in several threads) share one patch
(compat/process_patch.py): it is installed once and restored once, when the last leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from fastnnef.compat.process_patch import ProcessWidePatch, Replacement

__all__ = ["init_empty_weights"]


def _parameters_on_meta() -> list[Replacement]:
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param) -> None:
        original(module, name, param)
        if param is not None and not param.is_meta:
            registered = module._parameters[name]
            assert registered is not None  # just registered, not None
            module._parameters[name] = type(registered)(
                registered.to("meta"), requires_grad=registered.requires_grad
            )

    return [(nn.Module, "register_parameter", register_parameter)]


def _buffers_on_meta() -> list[Replacement]:
    original = nn.Module.register_buffer

    def register_buffer(module: nn.Module, name: str, tensor, persistent: bool = True) -> None:
        original(module, name, tensor, persistent=persistent)
        if tensor is not None and not tensor.is_meta:
            registered = module._buffers[name]
            assert registered is not None  # just registered, not None
            module._buffers[name] = registered.to("meta")

    return [(nn.Module, "register_buffer", register_buffer)]


_PARAMETERS = ProcessWidePatch(_parameters_on_meta)
_BUFFERS = ProcessWidePatch(_buffers_on_meta)


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Context manager: modules built inside it get their parameters on the ``meta`` device.

    Builds a model's structure without allocating its weights (each parameter is created,
    then moved to ``meta`` at registration, so peak memory is one parameter). Load real
    weights afterwards, e.g. ``model.load_state_dict(state, assign=True)``. With
    ``include_buffers=True`` registered buffers go to ``meta`` too; by default they stay
    real because buffers computed at construction (rotary tables, ...) are rarely in a
    checkpoint (``None``, the reference's default, means ``False``). Same contract as
    accelerate's ``init_empty_weights``.

    Caveat: like accelerate's, it swaps ``nn.Module.register_parameter`` (and
    ``register_buffer``) process-wide while active; don't build other models in other
    threads meanwhile.

    Example::

        with init_empty_weights():
            model = nn.Linear(4096, 4096)
        assert model.weight.is_meta
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(_PARAMETERS.held())
        if include_buffers:
            stack.enter_context(_BUFFERS.held())
        yield
