"""``ctx_maybe_load_from_disk_as_offloaded``: the reference's way to load checkpoints as
weights left on disk, by patching the loaders other code calls. Served at
``fastnnef.tensor.offload``, with the reference's loader ``t2n_load_checkpoint_and_dispatch``
(fastnnef/tensor/offload_load.py's); drop-in only: fastnnef's own loaders
(``load_offloaded_checkpoint``, the LLM, multimodal and PEFT exporters) bind checkpoint
tensors directly and patch nothing.

It patches ``torch.load``, ``safetensors.torch.load_file`` and PEFT's ``safe_load_file``
for the WHOLE PROCESS while active: a load in any thread meanwhile is offloaded too.
Overlapping uses (nested, or in several threads) share one patch (compat/process_patch.py):
it is installed once and restored once, when the last leaves; ``torch.load`` offloads to
the directory of the newest use still inside.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from fastnnef.compat.process_patch import ProcessWidePatch, Replacement
from fastnnef.tensor.offload import DEFAULT_OFFLOAD_PREFIX, OffloadedTensor, PathLike, open_checkpoint
from fastnnef.tensor.offload_load import t2n_load_checkpoint_and_dispatch

__all__ = ["ctx_maybe_load_from_disk_as_offloaded", "t2n_load_checkpoint_and_dispatch"]


def _load_file(filename: PathLike, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """safetensors' ``load_file``, as tensors referencing the file (nothing is read)."""
    ckpt = open_checkpoint(filename)
    return {key: OffloadedTensor(ckpt, key) for key in ckpt.keys()}


def _loaders_offloaded() -> list[Replacement]:
    original_torch_load = torch.load

    def torch_load(f: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("weights_only", True)
        if isinstance(f, (str, os.PathLike)):
            kwargs.setdefault("mmap", True)
        loaded = original_torch_load(f, *args, **kwargs)
        if isinstance(loaded, dict):
            directory = _PATCH.current()
            return {
                k: OffloadedTensor.from_original_tensor(v, str(k), directory) if isinstance(v, torch.Tensor) else v
                for k, v in loaded.items()
            }
        return loaded

    patched: list[Replacement] = [(torch, "load", torch_load)]
    st_torch: ModuleType | None
    try:
        import safetensors.torch as st_torch
    except ImportError:  # safetensors not installed: nothing to patch there
        st_torch = None
    if st_torch is not None:
        patched.append((st_torch, "load_file", _load_file))
    peft_io: ModuleType | None
    try:
        import peft.utils.save_and_load as peft_io
    except ImportError:
        peft_io = None
    if peft_io is not None and hasattr(peft_io, "safe_load_file"):
        patched.append((peft_io, "safe_load_file", _load_file))
    return patched


_PATCH = ProcessWidePatch(_loaders_offloaded)


@contextlib.contextmanager
def ctx_maybe_load_from_disk_as_offloaded(offload_dir: PathLike | None = None) -> Iterator[None]:
    """Inside this context, ``safetensors.torch.load_file`` returns :class:`OffloadedTensor`
    values referencing the file (nothing is read), and ``torch.load`` reads with
    ``mmap=True`` (``weights_only=True`` unless the caller passes ``weights_only=False``
    explicitly) and offloads each tensor to ``offload_dir`` as ``.safetensors``. Then
    ``model.load_state_dict(state, assign=True)`` gives a model whose weights stay on disk.

    The patch is process-wide (see the module docstring); overlapping uses are safe.
    """
    directory = Path(offload_dir) if offload_dir is not None else Path(tempfile.mkdtemp(prefix=DEFAULT_OFFLOAD_PREFIX))
    with _PATCH.held(directory):
        yield
