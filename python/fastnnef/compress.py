"""Weight compression registry (torch_to_nnef's ``torch_to_nnef.compress``, §9.2).

``quantize_weights_min_max_Q4_0`` is the one fastnnef API that MODIFIES the model: by
design of the reference API, it replaces module weights in place with
:class:`~fastnnef.tensor.quant.QTensorTractScaleOnly` parameters (packed Q4_0 blocks,
dequantized on use), so that the quantized model both runs in torch and exports as Q4_0.
Copy the model first (``copy.deepcopy``) to keep the float one.

Example::

    from fastnnef.compress import DEFAULT_COMPRESSION
    model = DEFAULT_COMPRESSION["min_max_q4_0_all"](model)
    export_model_to_nnef(model, x, "model.nnef.tgz", TractNNEF.latest())
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import (
    T2NErrorImport,
    T2NErrorImpossibleQuantization,
    T2NErrorInvalidArgument,
)
from fastnnef.log import get_logger
from fastnnef.tensor.offload import OffloadedTensor
from fastnnef.tensor.quant import (
    QTensor,
    check_percentile,
    fp_to_tract_q4_0_with_min_max_calibration,
)

log = get_logger(__name__)

DEFAULT_COMPRESSION_REGISTRY = "fastnnef.compress.DEFAULT_COMPRESSION"


def quantize_weights_min_max_Q4_0(model: nn.Module, **kwargs: Any) -> nn.Module:
    """Replace the ``weight`` of every module of ``to_quantize_module_classes`` (default
    ``(nn.Linear,)``) by its Q4_0 form, min-max calibrated per block of 32 (or at
    ``percentile`` of |x|). In place; returns ``model``.

    A weight shared by several such modules is quantized once and stays shared; one also
    used by a module outside those classes is skipped with a warning; a shape Q4_0 cannot
    hold (rank not 2..4, or ``prod(shape[1:]) % 32``) is logged and skipped. An offloaded
    weight stays on disk: min-max (``percentile`` 1) marks it to be quantized by the Rust
    writer as it is streamed into the artefact (:meth:`OffloadedTensor.as_q4_0`); another
    percentile writes its Q4_0 blocks to a file (:func:`offloaded_tensor_qtensor`).
    """
    classes = tuple(kwargs.pop("to_quantize_module_classes", (nn.Linear,)))
    percentile = float(kwargs.pop("percentile", 1.0))
    if kwargs:
        log.warning("quantize_weights_min_max_Q4_0: ignoring unknown arguments %s", sorted(kwargs))
    check_percentile(percentile)
    # Every module holding each weight object (tied weights appear under several modules).
    holders: dict[int, list[tuple[str, nn.Module]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        weight = module._parameters.get("weight")
        if weight is not None:
            holders.setdefault(id(weight), []).append((name, module))
    for users in holders.values():
        targets = [(n, m) for n, m in users if isinstance(m, classes)]
        if not targets:
            continue
        name = targets[0][0]
        label = f"{name}.weight" if name else "weight"
        weight = targets[0][1]._parameters["weight"]
        assert weight is not None
        if isinstance(weight, QTensor) or (isinstance(weight, OffloadedTensor) and weight.packed_format is not None):
            continue  # already quantized (a second call, or a tied weight done above)
        others = [n or "<root>" for n, m in users if not isinstance(m, classes)]
        if others:
            log.warning(
                "not quantizing %s: it is shared with %s, outside the classes to quantize", label, ", ".join(others)
            )
            continue
        qweight: torch.Tensor
        try:
            if isinstance(weight, OffloadedTensor) and percentile == 1.0:
                # Min-max Q4_0 is what the Rust writer computes as it streams the weight
                # from the checkpoint: nothing is read or written now.
                qweight = weight.as_q4_0()
            else:
                # An offloaded weight stays on disk, as its Q4_0 blocks.
                qweight = offloaded_tensor_qtensor(
                    functools.partial(fp_to_tract_q4_0_with_min_max_calibration, percentile=percentile),
                    weight.data,
                    "q40_min_max",
                )
        except T2NErrorImpossibleQuantization as err:
            log.info("not quantizing %s: %s", label, err)
            continue
        assert isinstance(qweight, (QTensor, OffloadedTensor))  # Q4_0 blocks, in memory or on disk
        qweight.nnef_name = label
        param = nn.Parameter(qweight, requires_grad=False)
        for _, module in targets:
            module._parameters["weight"] = param
    return model


def offloaded_tensor_qtensor(q_fn: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor,
                             suffix_name: str) -> torch.Tensor:
    """``q_fn(tensor)``, kept on disk when ``tensor`` is an :class:`OffloadedTensor`.

    An offloaded ``tensor`` is materialized for ``q_fn`` (one tensor in memory at a time)
    and the result offloaded as ``<name>.<suffix_name>`` (beside ``tensor``'s file when
    fastnnef wrote it, else in a temporary directory with prefix ``t2n_offload_disk``),
    deleted with its last reference: a Q4_0 ``QTensorTractScaleOnly`` as its
    packed blocks, so it stays Q4_0 on disk, in torch and in the export; any other result
    as its values. A tensor in memory gives ``q_fn(tensor)`` as is.

    Example::

        q = offloaded_tensor_qtensor(fp_to_tract_q4_0_with_min_max_calibration, layer.weight, "q40")
        layer._parameters["weight"] = nn.Parameter(q, requires_grad=False)
    """
    if not isinstance(tensor, OffloadedTensor):
        return q_fn(tensor)
    q_tensor = q_fn(tensor.to_base_tensor())
    name = f"{tensor.nnef_name or tensor.key}.{suffix_name}"
    # Beside the source when it was offloaded by fastnnef; never into a user's checkpoint folder.
    directory = Path(tensor._owned_file).parent if tensor._owned_file else None
    return OffloadedTensor.from_original_tensor(q_tensor, name, directory, f" (quantized by {suffix_name})")


DEFAULT_COMPRESSION: dict[str, Callable[..., nn.Module]] = {
    "min_max_q4_0": functools.partial(quantize_weights_min_max_Q4_0, to_quantize_module_classes=(nn.Linear,)),
    "min_max_q4_0_with_embeddings": functools.partial(
        quantize_weights_min_max_Q4_0, to_quantize_module_classes=(nn.Linear, nn.Embedding)
    ),
    "min_max_q4_0_with_embeddings_99": functools.partial(
        quantize_weights_min_max_Q4_0, to_quantize_module_classes=(nn.Linear, nn.Embedding), percentile=0.99
    ),
    "min_max_q4_0_all": functools.partial(
        quantize_weights_min_max_Q4_0,
        to_quantize_module_classes=(nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d),
    ),
}


def dynamic_load_registry(compression_registry_full_path: str) -> dict[str, Callable[..., nn.Module]]:
    """Import a registry dict given as ``"package.module.NAME"``."""
    module_name, _, attr = compression_registry_full_path.rpartition(".")
    if not module_name:
        raise T2NErrorInvalidArgument(
            f"registry path {compression_registry_full_path!r} must be 'package.module.NAME'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise T2NErrorImport(
            f"cannot import {module_name!r} for registry {compression_registry_full_path!r}: {err}"
        ) from err
    registry = getattr(module, attr, None)
    if not isinstance(registry, dict):
        raise T2NErrorInvalidArgument(
            f"{compression_registry_full_path!r} is {type(registry).__name__}, expected a dict of name -> "
            "callable(model, **kwargs)"
        )
    return registry
