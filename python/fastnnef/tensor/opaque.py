"""Opaque tensors: weights without float storage of their own (``QTensor``,
``OffloadedTensor``), the :class:`OpaqueTensorRef` stand-in for them (torch_to_nnef's
``tensor.opaque``), and what an export writes for each (:func:`export_form`).

The reference wraps every opaque parameter in an ``OpaqueTensorRef`` at each export, so
that its tracer can see them. fastnnef traces opaque tensors as they are (each records a
``prim::GetAttr``), so exports never wrap anything; :func:`set_opaque_tensor_in_params_as_ref`
does it only when a user calls it, and a model so wrapped exports to the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.quant import QTensor
from fastnnef.tensor.traced import traced_torch_function


class OpaqueTensorRef(torch.Tensor):
    """A parameter standing for ``opaque_tensor`` (a ``QTensor`` or ``OffloadedTensor``):
    same shape and dtype, no storage; every torch op sees the opaque tensor's values,
    ops that keep it opaque (``detach``, a float ``.to(dtype)`` of an offloaded tensor)
    return a new ref, writes into it raise as they do on the opaque tensor."""

    opaque_tensor: QTensor | OffloadedTensor

    @staticmethod
    def __new__(cls, meta_tensor: torch.Tensor | None, opaque_tensor: torch.Tensor) -> OpaqueTensorRef:
        if not isinstance(opaque_tensor, (QTensor, OffloadedTensor)):
            raise T2NErrorInvalidArgument(
                f"OpaqueTensorRef stands for a QTensor or an OffloadedTensor, got {type(opaque_tensor).__name__}"
            )
        if meta_tensor is not None and (
            (meta_tensor.shape, meta_tensor.dtype) != (opaque_tensor.shape, opaque_tensor.dtype)
        ):
            raise T2NErrorInvalidArgument(
                f"meta_tensor is {tuple(meta_tensor.shape)} {meta_tensor.dtype} but the opaque tensor is "
                f"{tuple(opaque_tensor.shape)} {opaque_tensor.dtype}; pass torch.empty(t.shape, dtype=t.dtype, "
                "device='meta') or None"
            )
        self = torch.Tensor._make_wrapper_subclass(
            cls, tuple(opaque_tensor.shape), dtype=opaque_tensor.dtype, device=opaque_tensor.device, requires_grad=False
        )
        self.opaque_tensor = opaque_tensor
        return self

    @property
    def nnef_name(self) -> str | None:
        return getattr(self.opaque_tensor, "nnef_name", None)

    @nnef_name.setter
    def nnef_name(self, name: str | None) -> None:
        self.opaque_tensor.nnef_name = name

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"OpaqueTensorRef({self.opaque_tensor!r})"

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        return traced_torch_function(func, args, kwargs, OpaqueTensorRef, opaque_to_final_tensor)

    # torch's stubs type Tensor.__torch_dispatch__ as the disabled impl, not as the
    # classmethod torch calls (this signature, from torch's docs).
    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        def inner(a: Any) -> Any:
            return a.opaque_tensor if isinstance(a, OpaqueTensorRef) else a

        def rewrap(a: Any) -> Any:
            return OpaqueTensorRef(None, a) if isinstance(a, (QTensor, OffloadedTensor)) else a

        # The opaque tensors' own dispatch materializes them, or keeps them opaque.
        return tree_map(rewrap, func(*tree_map(inner, args), **tree_map(inner, kwargs or {})))


def is_opaque(tensor: Any) -> bool:
    """Whether ``tensor`` has no float storage of its own (quantized, offloaded, a ref)."""
    return isinstance(tensor, (QTensor, OffloadedTensor, OpaqueTensorRef))


def opaque_to_final_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The plain values behind ``tensor`` (dequantized, loaded); ``tensor`` if plain."""
    while True:  # the kinds is_opaque names, unwrapped until a plain tensor is left
        if isinstance(tensor, OpaqueTensorRef):
            tensor = tensor.opaque_tensor
        elif isinstance(tensor, OffloadedTensor):
            tensor = tensor.to_base_tensor()
        elif isinstance(tensor, QTensor):
            tensor = tensor.decompress()
        else:
            return tensor


def export_form(tensor: torch.Tensor) -> torch.Tensor:
    """What an export writes for the weight ``tensor``: the opaque tensor behind an
    :class:`OpaqueTensorRef`; the ``QTensorTractScaleOnly`` over the blocks of an
    offloaded Q4_0 tensor (mapped from its file, not read); else ``tensor``."""
    while isinstance(tensor, OpaqueTensorRef):
        tensor = tensor.opaque_tensor
    if isinstance(tensor, OffloadedTensor) and tensor.packed:
        return tensor.packed_qtensor()
    return tensor


def set_opaque_tensor_in_params_as_ref(model: nn.Module) -> None:
    """Replace every ``QTensor`` / ``OffloadedTensor`` parameter of ``model`` by an
    :class:`OpaqueTensorRef` to it, in place, after setting its ``nnef_name`` to its path.

    Tied parameters get one ref (they stay tied); the refs are parameters
    (``isinstance(p, nn.Parameter)``). Exports of the model give the same artefact as before.
    """
    refs: dict[int, OpaqueTensorRef] = {}
    plan: list[tuple[nn.Module, str, OpaqueTensorRef]] = []
    for mod_name, module in model.named_modules(remove_duplicate=False):
        for key, param in module._parameters.items():
            if not isinstance(param, (QTensor, OffloadedTensor)):
                continue
            if id(param) not in refs:
                param.nnef_name = f"{mod_name}.{key}" if mod_name else key
                ref = OpaqueTensorRef(None, param)
                ref._is_param = True  # an nn.Parameter for isinstance and Module.__setattr__
                refs[id(param)] = ref
            plan.append((module, key, refs[id(param)]))
    for module, key, ref in plan:
        # A ref is a parameter to isinstance (through _is_param), not to the type check.
        module._parameters[key] = ref  # type: ignore[assignment]
