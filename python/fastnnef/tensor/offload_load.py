"""Loading a model's weights as offloaded tensors (README "Models larger than RAM"):
``load_offloaded_checkpoint`` binds each weight of a ``.safetensors`` checkpoint to the model
as an :class:`~fastnnef.tensor.offload.OffloadedTensor` (Q4_0 where asked, several tensors
composed into one where transformers stacks them), and the reference's loader
``t2n_load_checkpoint_and_dispatch`` places each weight on disk or in memory by a
``device_map`` (served at the reference's path ``fastnnef.tensor.offload`` by compat).
Built on the class, which knows nothing of them."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fastnnef import _native
from fastnnef.exceptions import (
    T2NErrorCheckpoint,
    T2NErrorImpossibleQuantization,
    T2NErrorInvalidArgument,
    T2NErrorNotImplemented,
)
from fastnnef.log import get_logger
from fastnnef.tensor.offload import DEFAULT_OFFLOAD_PREFIX, ComposedOffloadedTensor, OffloadedTensor, open_checkpoint
from fastnnef.tensor.safetensors_file import PathLike, write_safetensors

__all__ = ["load_offloaded_checkpoint", "t2n_load_checkpoint_and_dispatch"]

log = get_logger()


def _module_slots(model: nn.Module) -> dict[int, tuple[torch.Tensor, list[tuple[nn.Module, str, str, bool]]]]:
    """Every parameter and persistent buffer by tensor identity: (tensor, [(module, attr,
    qualified name, is_parameter)]), so tied weights are loaded once and stay tied."""
    slots: dict[int, tuple[torch.Tensor, list[tuple[nn.Module, str, str, bool]]]] = {}
    for mod_name, module in model.named_modules(remove_duplicate=False):
        prefix = f"{mod_name}." if mod_name else ""
        for attr, param in module._parameters.items():
            if param is not None:
                slots.setdefault(id(param), (param, []))[1].append((module, attr, prefix + attr, True))
        for attr, buf in module._buffers.items():
            if buf is not None and attr not in module._non_persistent_buffers_set:
                slots.setdefault(id(buf), (buf, []))[1].append((module, attr, prefix + attr, False))
    return slots


def load_offloaded_checkpoint(
    model: nn.Module,
    checkpoint: PathLike | _native.Checkpoint,
    strict: bool = True,
    q4_0_module_classes: Iterable[type] = (),
    key_map: Callable[[str], str] | None = None,
    composed: dict[str, ComposedOffloadedTensor] | None = None,
) -> nn.Module:
    """Point every parameter (and persistent buffer) of ``model`` at its tensor in
    ``checkpoint`` as an :class:`OffloadedTensor`; nothing is read but the headers.

    Build the model with :func:`fastnnef.utils.init_empty_weights` so that no weight is
    ever allocated. Everything is checked before the model is touched: a name missing from
    the checkpoint, a shape that differs, or a dtype that cannot be converted raises
    ``T2NErrorCheckpoint`` listing them; with ``strict`` (the default) so do checkpoint
    tensors the model does not use. Each weight takes the model's dtype (float16, bfloat16
    and float32 convert into each other on the way). Weights of modules of
    ``q4_0_module_classes`` (e.g. ``(nn.Linear,)``) are written as Q4_0, quantized on the
    way, and torch computes with the Q4_0 values. ``key_map`` maps a model name to its
    checkpoint name; ``composed`` gives the weights (by model name) made of several
    checkpoint tensors, bound as they are. Tied weights stay tied. Returns ``model``
    (modified in place, as ``load_state_dict``).
    """
    ckpt = checkpoint if isinstance(checkpoint, _native.Checkpoint) else open_checkpoint(checkpoint)
    classes = tuple(q4_0_module_classes)
    mapping = key_map or (lambda name: name)
    plan: list[tuple[OffloadedTensor, list[tuple[nn.Module, str, str, bool]]]] = []
    problems: list[str] = []
    used: set[str] = set()
    composed = composed or {}
    for tensor, users in _module_slots(model).values():
        given = next((composed[qual] for _, _, qual, _ in users if qual in composed), None)
        if given is not None:
            used.update(p.key for g in given.groups for p in g)
            if tuple(given.shape) != tuple(tensor.shape):
                problems.append(f"shape: {given.key} is {tuple(given.shape)}, the model has {tuple(tensor.shape)}")
                continue
            if given.dtype != tensor.dtype:
                given = given._shallow(tensor.dtype)
            given.nnef_name = users[0][2]
            plan.append((given, users))
            continue
        names = [mapping(qual) for _, _, qual, _ in users]
        key = next((n for n in names if n in ckpt), None)
        if key is None:
            problems.append(f"missing: {names[0]!r} (shape {tuple(tensor.shape)})")
            continue
        used.add(key)
        dtype_name, shape, path = ckpt.info(key)
        if tuple(shape) != tuple(tensor.shape):
            problems.append(f"shape: {key!r} is {tuple(shape)} in {path}, the model has {tuple(tensor.shape)}")
            continue
        # As fastnnef.compress: a weight also used outside those classes (a tied
        # embedding) stays float.
        in_classes = [isinstance(m, classes) and attr == "weight" for m, attr, _, _ in users] if classes else []
        q4 = bool(in_classes) and all(in_classes)
        if any(in_classes) and not q4:
            log.warning("not quantizing %s: it is shared with modules outside %s", key, [c.__name__ for c in classes])
        try:
            off = OffloadedTensor(ckpt, key, tensor.dtype, q4_0=q4)
        except T2NErrorCheckpoint as err:
            problems.append(f"dtype: {err}")
            continue
        except T2NErrorImpossibleQuantization as err:
            # A shape tract cannot hold as Q4_0 (rows not whole blocks) keeps the weight in
            # float, said at warning level: the artefact is larger than asked for.
            log.warning("not quantizing %s to Q4_0, written in float: %s", key, err)
            off = OffloadedTensor(ckpt, key, tensor.dtype)
        off.nnef_name = users[0][2]
        plan.append((off, users))
    extra = sorted(set(ckpt.keys()) - used)
    if strict and extra:
        shown = ", ".join(repr(k) for k in extra[:5]) + (" ..." if len(extra) > 5 else "")
        problems.append(f"unexpected: {len(extra)} checkpoint tensors the model does not use ({shown})")
    if problems:
        raise T2NErrorCheckpoint(
            f"checkpoint {ckpt.path} does not match the model ({len(problems)} problems): "
            + "; ".join(problems[:10]) + ("; ..." if len(problems) > 10 else "")
            + ". Fix the model config or the checkpoint; pass strict=False to ignore unused tensors"
        )
    for off, users in plan:
        # One Parameter object per tensor group: tied weights stay tied.
        param = nn.Parameter(off, requires_grad=False)
        for module, attr, _, is_param in users:
            if is_param:
                module._parameters[attr] = param
            else:
                module._buffers[attr] = off
    return model


# device_map strings that put every weight on disk (t2n_auto / auto: fastnnef exports on
# the CPU, where disk is the placement that bounds memory), and per-module values meaning disk.
_ALL_ON_DISK = (DEFAULT_OFFLOAD_PREFIX, "t2n_auto", "auto", "disk")
_DISK_VALUES = ("disk", "disk_cpu", DEFAULT_OFFLOAD_PREFIX)


def t2n_load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: PathLike,
    device_map: str | dict[str, Any] | None,
    offload_dir: PathLike | None,
    strict: bool = False,
    offload_at_load_state_dict: bool = False,
    weight_converters: Any = None,
    hf_quantizer: Any = None,
) -> nn.Module:
    """The reference's loader: weights of ``checkpoint`` into ``model``, those placed on
    disk as :class:`OffloadedTensor`, the others in memory.

    ``device_map``: ``"t2n_offload_disk"``, ``"t2n_auto"`` or ``"auto"`` put every weight on
    disk; ``None`` loads every weight in memory; a dict maps module names to ``"disk"`` /
    ``"t2n_offload_disk"`` or ``"cpu"``, accelerate-style: each weight goes where its
    longest enclosing module name says (``""`` is the whole model; a weight no entry
    covers raises). Tied weights follow their first name. ``.safetensors`` checkpoints
    (single, sharded index, or a directory) are referenced in place; ``.bin`` / ``.pt``
    ones are read with ``weights_only=True`` and ``mmap=True`` and written once to
    ``offload_dir`` as ``.safetensors``. Every placement is checked before the model is
    touched. ``weight_converters`` and ``hf_quantizer`` are not supported (raise).
    ``offload_at_load_state_dict`` is accepted for compatibility: weights are always
    offloaded as they are read.
    """
    if weight_converters is not None or hf_quantizer is not None:
        raise T2NErrorNotImplemented(
            "t2n_load_checkpoint_and_dispatch: weight_converters and hf_quantizer are not supported by "
            "fastnnef; convert or quantize the checkpoint first (fastnnef.compress for Q4_0)"
        )
    del offload_at_load_state_dict
    place = _placement(device_map)
    in_memory = {first for _, users in _module_slots(model).values() if place(first := users[0][2]) == "cpu"}
    path = Path(checkpoint)
    if path.suffix in (".bin", ".pt", ".pth"):
        directory = (Path(offload_dir) if offload_dir is not None
                     else Path(tempfile.mkdtemp(prefix=DEFAULT_OFFLOAD_PREFIX)))
        directory.mkdir(parents=True, exist_ok=True)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if not isinstance(state, dict):
            raise T2NErrorCheckpoint(f"{path} holds a {type(state).__name__}, expected a state dict")
        sharded = directory / f"{path.stem}_offloaded.safetensors"
        write_safetensors(sharded, {k: v for k, v in state.items() if isinstance(v, torch.Tensor)})
        del state
        path = sharded
    load_offloaded_checkpoint(model, path, strict=strict)
    for tensor, users in _module_slots(model).values():
        if users[0][2] in in_memory and isinstance(tensor, OffloadedTensor):
            values = tensor.to_base_tensor().clone()  # private memory, one tensor at a time
            param = nn.Parameter(values, requires_grad=False)
            for module, attr, _, is_param in users:
                if is_param:
                    module._parameters[attr] = param
                else:
                    module._buffers[attr] = values
    return model


def _placement(device_map: str | dict[str, Any] | None) -> Callable[[str], str]:
    """``weight name -> "disk" | "cpu"`` for ``device_map``; bad values raise here."""
    if device_map is None:
        return lambda name: "cpu"
    if isinstance(device_map, str):
        if device_map not in _ALL_ON_DISK:
            raise T2NErrorInvalidArgument(
                f"device_map {device_map!r} is not supported; use 't2n_offload_disk', 't2n_auto', 'auto', None "
                "(all in memory) or a dict of module name -> 'disk' | 'cpu'"
            )
        return lambda name: "disk"
    if not isinstance(device_map, dict):
        raise T2NErrorInvalidArgument(f"device_map must be a str, a dict or None, got {type(device_map).__name__}")
    where: dict[str, str] = {}
    for prefix, value in device_map.items():
        if str(value) in _DISK_VALUES:
            where[prefix] = "disk"
        elif str(value) == "cpu":
            where[prefix] = "cpu"
        else:
            raise T2NErrorInvalidArgument(
                f"device_map[{prefix!r}] is {value!r}: fastnnef loads weights on 'cpu' (in memory) or 'disk' "
                "(offloaded); exports run on the CPU, so accelerator placements do not apply"
            )

    def place(name: str) -> str:
        module = name
        while module not in where:
            if not module:
                raise T2NErrorInvalidArgument(
                    f"device_map places no module holding {name!r}; add an entry for it or '' for the whole model"
                )
            module = module.rpartition(".")[0]
        return where[module]

    return place
