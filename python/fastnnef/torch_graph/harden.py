"""``harden_jit_for_export``: prepare a TorchScript-only model for tracing.

fastnnef freezes the module (``torch.jit.freeze``, which inlines submodule calls and
folds attributes), the first stage of torch_to_nnef's chain. The specialization passes
are not needed: the exporter runs the frozen graph in TorchScript's interpreter under a
function trace, which records the aten ops of the branches actually taken for the example
inputs (control flow, size checks and assertions are specialized by construction).
"""

from __future__ import annotations

import logging
import typing as T

import torch

from fastnnef.exceptions import T2NErrorInvalidArgument

log = logging.getLogger("fastnnef")


def harden_jit_for_export(
    model: "torch.jit.ScriptModule",
    args: T.Union[T.Sequence[T.Any], "torch.Tensor"],
    *,
    freeze: bool = True,
    diagnostics: T.Optional[T.Dict[str, T.Any]] = None,
) -> "torch.jit.ScriptModule":
    """Freeze a ScriptModule for export; returns a new module, the input is left as is."""
    if not isinstance(model, torch.jit.ScriptModule):
        raise T2NErrorInvalidArgument(
            f"harden_jit_for_export takes a torch.jit.ScriptModule, got {type(model).__name__}"
        )
    froze = False
    if freeze:
        if model.training:
            log.warning("harden_jit_for_export: the module is in training mode; freezing needs eval(), skipped")
        else:
            try:
                model = torch.jit.freeze(model)
                froze = True
            except RuntimeError as err:
                log.warning("torch.jit.freeze failed (%s); exporting the module unfrozen", err)
    if diagnostics is not None:
        diagnostics["froze"] = froze
    return model
