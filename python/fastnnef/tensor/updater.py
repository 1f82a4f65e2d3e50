"""Replace a model's parameters and buffers without breaking the ties between them
(torch_to_nnef's ``tensor.updater.ModTensorUpdater``): a weight shared by several modules
(an embedding tied to the LM head) is replaced everywhere it is held, or, on request, at
one name only.

The updater indexes, once, every name under which each tensor object is held: parameters
(``remove_duplicate=False``, so tied names are all seen), and optionally buffers and plain
tensor attributes. An update puts the new tensor under every name of the old one (a
``Parameter`` where a parameter was, a ``Buffer`` where a buffer was); it never writes into
the old tensor, which other holders keep unchanged."""

from __future__ import annotations

import enum
from collections import defaultdict

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInconsistentTensor, T2NErrorMisuse


class TensorHoldKind(str, enum.Enum):
    PARAMETER = "parameter"
    BUFFER = "buffer"
    UNREGISTRED = "unregistred"  # the reference's spelling: a plain tensor attribute


class ModTensorUpdater:
    """Updates the tensors of ``model`` by reference or by name, keeping ties.

    ``add_parameter_if_unset``: a plain tensor given for a parameter is wrapped in a
    ``Parameter`` (requires_grad False); otherwise it is refused. ``add_buffers`` /
    ``add_unregistred_tensor``: buffers / plain tensor attributes are updatable too.
    ``disable_requires_grad``: parameters stop requiring grad while indexed
    (``restore_require_grad`` turns it back on)."""

    def __init__(self, model: nn.Module, add_parameter_if_unset: bool = True, add_buffers: bool = False,
                 add_unregistred_tensor: bool = False, disable_requires_grad: bool = False):
        self.model = model
        self.add_parameter_if_unset = add_parameter_if_unset
        self.name_to_id: dict[str, int] = {}
        self.id_to_kind: dict[int, TensorHoldKind] = {}
        self.name_to_parent_module: dict[str, nn.Module] = {}
        self.id_to_modules: dict[int, list[nn.Module]] = defaultdict(list)
        self._disabled_requires_grad_names: list[str] = []
        names: dict[int, set[str]] = defaultdict(set)
        modules = dict(model.named_modules(remove_duplicate=False))

        def index(name: str, tensor: torch.Tensor, kind: TensorHoldKind) -> None:
            mod_name, _ = self.split_param_name(name)
            self.name_to_id[name] = id(tensor)
            self.id_to_kind.setdefault(id(tensor), kind)
            self.name_to_parent_module[name] = modules[mod_name]
            self.id_to_modules[id(tensor)].append(modules[mod_name])
            names[id(tensor)].add(name)

        for name, param in model.named_parameters(remove_duplicate=False):
            if disable_requires_grad and param.requires_grad:
                param.requires_grad = False
                self._disabled_requires_grad_names.append(name)
            index(name, param, TensorHoldKind.PARAMETER)
        if add_buffers:
            for name, buffer in model.named_buffers(remove_duplicate=False):
                index(name, buffer, TensorHoldKind.BUFFER)
        if add_unregistred_tensor:
            for mod_name, mod in modules.items():
                for attr, value in vars(mod).items():
                    if isinstance(value, torch.Tensor) and id(value) not in names:
                        index(f"{mod_name}.{attr}" if mod_name else attr, value, TensorHoldKind.UNREGISTRED)
        self.id_to_names: dict[int, frozenset[str]] = {k: frozenset(v) for k, v in names.items()}

    @staticmethod
    def split_param_name(name: str) -> tuple[str, str]:
        """``"a.b.weight"`` -> ``("a.b", "weight")``; a top-level name has module ``""``."""
        mod_name, _, local = name.rpartition(".")
        return mod_name, local

    @property
    def available_names(self) -> list[str]:
        return [name for names in self.id_to_names.values() for name in names]

    def restore_require_grad(self) -> None:
        for name in self._disabled_requires_grad_names:
            self.get_by_name(name).requires_grad = True

    def get_by_name(self, name: str) -> torch.Tensor:
        """The tensor held under ``name`` now."""
        return getattr(self.name_to_parent_module[name], self.split_param_name(name)[1])

    # --- checks ----------------------------------------------------------------------------
    def check_same_dtype(self, tensor0: torch.Tensor, tensor1: torch.Tensor) -> None:
        if tensor0.dtype != tensor1.dtype:
            raise T2NErrorInconsistentTensor(f"not the same dtype: {tensor0.dtype} and {tensor1.dtype}")

    def check_same_device(self, tensor0: torch.Tensor, tensor1: torch.Tensor) -> None:
        if tensor0.device != tensor1.device:
            raise T2NErrorInconsistentTensor(f"not the same device: {tensor0.device} and {tensor1.device}")

    def check_same_shape(self, tensor0: torch.Tensor, tensor1: torch.Tensor) -> None:
        if tensor0.shape != tensor1.shape:
            raise T2NErrorInconsistentTensor(f"not the same shape: {tuple(tensor0.shape)} and {tuple(tensor1.shape)}")

    def check_consistency(self, tensor0: torch.Tensor, tensor1: torch.Tensor) -> None:
        self.check_same_device(tensor0, tensor1)
        self.check_same_dtype(tensor0, tensor1)
        self.check_same_shape(tensor0, tensor1)

    # --- updates ---------------------------------------------------------------------------
    def maybe_parameterize(self, ref: torch.Tensor, new_tensor: torch.Tensor) -> torch.Tensor:
        """``new_tensor`` as what ``ref`` is held as: a ``Parameter`` for a parameter
        (refused unless ``add_parameter_if_unset``), a ``Buffer`` for a buffer."""
        kind = self._kind(ref)
        if kind == TensorHoldKind.PARAMETER and not isinstance(new_tensor, nn.Parameter):
            if not self.add_parameter_if_unset:
                raise T2NErrorMisuse("the new tensor of a parameter must be an nn.Parameter "
                                     "(or build the updater with add_parameter_if_unset=True)")
            return nn.Parameter(new_tensor, requires_grad=False)
        buffer_type = getattr(nn.parameter, "Buffer", None)  # torch >= 2.5
        if (kind == TensorHoldKind.BUFFER and buffer_type is not None and isinstance(ref, buffer_type)
                and not isinstance(new_tensor, buffer_type)):
            return buffer_type(new_tensor, persistent=ref.persistent)
        return new_tensor

    def update_by_ref(self, ref: torch.Tensor, new_tensor: torch.Tensor,
                      enforce_tensor_consistency: bool = True) -> torch.Tensor:
        """Put ``new_tensor`` under every name ``ref`` is held by; returns what was put."""
        return self._update(ref, self.id_to_names.get(id(ref), frozenset()), new_tensor, enforce_tensor_consistency)

    def update_by_name(self, name: str, new_tensor: torch.Tensor, tie_replacements: bool = True,
                       enforce_tensor_consistency: bool = True) -> torch.Tensor:
        """Replace the tensor held under ``name``: under all its tied names too
        (``tie_replacements``), or under ``name`` only, which then leaves the tie."""
        ref = self.get_by_name(name)
        names = self.id_to_names[id(ref)] if tie_replacements else frozenset([name])
        return self._update(ref, names, new_tensor, enforce_tensor_consistency)

    def _kind(self, ref: torch.Tensor) -> TensorHoldKind:
        kind = self.id_to_kind.get(id(ref))
        if kind is None:
            raise T2NErrorMisuse("this tensor is not held by the model under any name the updater indexed "
                                 f"(names: {sorted(self.available_names)[:8]}...)")
        return kind

    def _update(self, ref: torch.Tensor, names: frozenset[str], new_tensor: torch.Tensor,
                enforce_tensor_consistency: bool) -> torch.Tensor:
        kind = self._kind(ref)
        new_tensor = self.maybe_parameterize(ref, new_tensor)
        if enforce_tensor_consistency:
            self.check_consistency(ref, new_tensor)
        for name in names:
            mod = self.name_to_parent_module[name]
            local = self.split_param_name(name)[1]
            if local in mod._parameters:
                mod._parameters[local] = new_tensor  # type: ignore[assignment]
            elif local in mod._buffers:
                mod._buffers[local] = new_tensor
            else:
                setattr(mod, local, new_tensor)
            self.name_to_id[name] = id(new_tensor)
        remaining = self.id_to_names[id(ref)] - names
        moved = [m for n, m in self.name_to_parent_module.items() if n in names]
        if remaining:
            self.id_to_names[id(ref)] = remaining
            self.id_to_modules[id(ref)] = [m for n, m in self.name_to_parent_module.items() if n in remaining]
        else:
            del self.id_to_names[id(ref)], self.id_to_kind[id(ref)]
            self.id_to_modules.pop(id(ref), None)
        self.id_to_names[id(new_tensor)] = self.id_to_names.get(id(new_tensor), frozenset()) | names
        self.id_to_kind[id(new_tensor)] = kind
        self.id_to_modules[id(new_tensor)] = moved
        return new_tensor


__all__ = ["ModTensorUpdater", "TensorHoldKind"]
