"""Tensors that carry the name their weight takes in an export (torch_to_nnef's
``tensor.named``), and the ``.dat`` labels of a model's weights.

A :class:`NamedTensor` is the tensor it wraps (same storage, no copy) plus ``nnef_name``.
Exported, a parameter or buffer that is a ``NamedTensor`` is written as
``<nnef_name>.dat`` instead of ``<parameter path>.dat`` (:func:`export_labels` is where
labels are chosen). Every torch op on it returns a plain tensor, as in the reference.

Unlike torch_to_nnef, ``export_model_to_nnef`` never wraps anything: the names exist only
where a user calls :func:`apply_name_to_tensor_in_module` or builds ``NamedTensor`` s.
(The reference wraps every tensor of the model at each export, leaving them wrapped, and
overrides a user's ``nnef_name`` with the parameter path.)

Example::

    model.proj._parameters["weight"] = nn.Parameter(
        NamedTensor(model.proj.weight.detach(), nnef_name="shared.proj"), requires_grad=False)
    export_model_to_nnef(model, x, "m.nnef", TractNNEF.latest())   # writes shared.proj.dat
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch
from torch import nn

from fastnnef import _native
from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.tensor.opaque import is_opaque


class NamedTensor(torch.Tensor):
    """``fp_tensor`` (shared storage) with ``nnef_name``, the label it is exported under."""

    nnef_name: str

    @staticmethod
    def __new__(cls, fp_tensor: torch.Tensor, nnef_name: str) -> NamedTensor:
        if not isinstance(fp_tensor, torch.Tensor) or is_opaque(fp_tensor):
            # QTensor, OffloadedTensor and OpaqueTensorRef have no storage to share; they
            # carry their own nnef_name.
            raise T2NErrorInvalidArgument(
                f"NamedTensor wraps a plain tensor, got {type(fp_tensor).__name__}; quantized and offloaded "
                "tensors are named by their own nnef_name attribute"
            )
        check_label(nnef_name)
        # _make_subclass shares fp_tensor's storage (it detaches internally): no copy.
        self = torch.Tensor._make_subclass(cls, fp_tensor, fp_tensor.requires_grad)
        self.nnef_name = nnef_name
        return self

    # Ops see a plain tensor and return plain tensors: the name is the weight's, not its
    # results'. (The reference clones the whole tensor on every op to get there.)
    # (torch's documented idiom; its stubs type the attribute as a method.)
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    def detach(self) -> NamedTensor:
        # nn.Parameter(t) keeps t's type only if t.detach() does.
        return NamedTensor(torch.Tensor.detach(self), self.nnef_name)

    def __deepcopy__(self, memo: dict[int, Any]) -> NamedTensor:
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            values = torch.Tensor.clone(self)
        new = NamedTensor(values, self.nnef_name)
        new.requires_grad_(self.requires_grad)
        for key, value in self.__dict__.items():  # _is_param (a Parameter), user attributes
            setattr(new, key, copy.deepcopy(value, memo))
        memo[id(self)] = new
        return new

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"{torch.Tensor.__repr__(self)[:-1]}, nnef_name={self.nnef_name!r})"


def check_label(label: object) -> None:
    """Raise ``T2NErrorInvalidArgument`` unless ``label`` can name a ``.dat`` member."""
    if not isinstance(label, str) or not label:
        raise T2NErrorInvalidArgument(f"nnef_name must be a non-empty string, got {label!r}")
    try:
        _native.validate_member_name(f"{label}.dat")
    except T2NErrorInvalidArgument as err:
        raise T2NErrorInvalidArgument(f"nnef_name {label!r} cannot name a .dat file: {err}") from None


def apply_name_to_tensor_in_module(model: nn.Module) -> None:
    """Replace every parameter, buffer and plain tensor attribute of ``model`` by a
    :class:`NamedTensor` named after its path (``"layers.0.weight"``), in place.

    Tied tensors become one ``NamedTensor`` (the first path), so they stay tied;
    parameters stay parameters (``isinstance(p, nn.Parameter)``, same ``requires_grad``);
    storage is shared, nothing is copied. Quantized and offloaded tensors are left as they
    are. Exports then write each tensor under the same label as without the names, so this
    only matters to code that reads ``nnef_name`` or renames some afterwards.
    """
    named: dict[int, torch.Tensor] = {}  # id(original) -> its NamedTensor

    def name_of(tensor: torch.Tensor, path: str, is_param: bool) -> torch.Tensor | None:
        if is_opaque(tensor):
            return None
        if id(tensor) not in named:
            new = NamedTensor(tensor, path)
            named[id(tensor)] = nn.Parameter(new, requires_grad=tensor.requires_grad) if is_param else new
        return named[id(tensor)]

    plan: list[tuple[dict[str, Any], str, torch.Tensor]] = []  # (where, key, new tensor)
    for mod_name, module in model.named_modules(remove_duplicate=False):
        prefix = f"{mod_name}." if mod_name else ""
        stores = ((module._parameters, True), (module._buffers, False))
        for store, is_param in stores:
            for key, tensor in store.items():
                if tensor is not None and (new := name_of(tensor, prefix + key, is_param)) is not None:
                    plan.append((store, key, new))
        for key, value in vars(module).items():  # tensors kept as plain attributes
            if isinstance(value, torch.Tensor) and (new := name_of(value, prefix + key, False)) is not None:
                plan.append((module.__dict__, key, new))
    for store, key, new in plan:  # after the walk: ids stay valid while the originals live
        store[key] = new


def export_labels(model: nn.Module) -> dict[int, str]:
    """``id(tensor) -> label`` for every parameter and buffer of ``model``: its first path
    (tied tensors share one), or its ``nnef_name`` for a :class:`NamedTensor`.

    Raises ``T2NErrorInvalidArgument`` when two different tensors would get the same label
    (their ``.dat`` files would collide), naming both.
    """
    labels: dict[int, str] = {}
    holder: dict[str, str] = {}  # label -> path of the tensor written under it
    for path, tensor in itertools.chain(
        model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False)
    ):
        if id(tensor) in labels:
            continue
        label = tensor.nnef_name if isinstance(tensor, NamedTensor) else path
        if label in holder:
            raise T2NErrorInvalidArgument(
                f"{holder[label]!r} and {path!r} would both be exported as {label}.dat; give each NamedTensor "
                "a distinct nnef_name"
            )
        labels[id(tensor)] = label
        holder[label] = path
    return labels


StorageKey = tuple[int, tuple[int, ...], torch.dtype]


def storage_labels(model: nn.Module, labels: dict[int, str]) -> dict[StorageKey, str]:
    """``(data_ptr, shape, dtype) -> label`` for the weights with storage (``labels`` from
    :func:`export_labels`) and for :class:`NamedTensor` s kept as plain module attributes:
    the trace records those as constants, found again by their storage.

    Raises ``T2NErrorInvalidArgument`` when a named attribute takes a weight's label.
    """
    by_storage: dict[StorageKey, str] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        # Quantized and offloaded weights have no storage, so no data pointer to match.
        if tensor.numel() and not is_opaque(tensor):
            by_storage.setdefault((tensor.data_ptr(), tuple(tensor.shape), tensor.dtype), labels[id(tensor)])
    taken = set(labels.values())
    for mod_name, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, NamedTensor) and value.numel():
                storage = (value.data_ptr(), tuple(value.shape), value.dtype)
                if storage in by_storage:
                    continue
                if value.nnef_name in taken:
                    path = f"{mod_name}.{key}" if mod_name else key
                    raise T2NErrorInvalidArgument(
                        f"{path!r} and a weight would both be exported as {value.nnef_name}.dat; give each "
                        "NamedTensor a distinct nnef_name"
                    )
                by_storage[storage] = value.nnef_name
                taken.add(value.nnef_name)
    return by_storage
