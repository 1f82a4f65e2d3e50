"""The inference-target base class and the model/IO record handed to its hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorIoQuantity
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.log import get_logger
from fastnnef.utils import SemanticVersion

LOGGER = get_logger(__name__)

# Attribute by which the exporter's IO-flattening wrapper module points at the user's model.
WRAPPED_MODEL_ATTR = "__wrapped_model__"


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's model behind the exporter's IO-flattening wrapper (``model`` if not wrapped)."""
    return getattr(model, WRAPPED_MODEL_ATTR, model)


def as_version(version: SemanticVersion | str) -> SemanticVersion:
    """Accept a ``SemanticVersion`` or a ``"X.Y.Z"`` string."""
    if isinstance(version, SemanticVersion):
        return version
    if isinstance(version, str):
        return SemanticVersion.from_str(version)
    raise T2NErrorInvalidArgument(
        f"version must be a SemanticVersion or a string like '0.23.9', got {version!r}"
    )


def as_enum(enum_cls: Any, value: Any, param: str) -> Any:
    """``enum_cls(value)``, or ``T2NErrorInvalidArgument`` naming ``param`` and the allowed values."""
    try:
        return enum_cls(value)
    except ValueError:
        allowed = [member.value for member in enum_cls]
        raise T2NErrorInvalidArgument(
            f"{param}: {value!r} is not one of {allowed}"
        ) from None


@dataclass
class UnfoldModelInfo:
    """The exported model and its IO, before and after flattening (argument of ``post_export``).

    ``flat_inputs`` / ``flat_outputs`` are the tensors of the NNEF graph's inputs and outputs,
    in the order of ``input_names`` / ``output_names``; ``flat_outputs`` come from the
    eager forward and are the check's reference values.
    """

    model: nn.Module
    original_inputs: Any
    original_outputs: Any
    flat_inputs: Sequence[Any]
    flat_outputs: Sequence[Any]
    input_names: list[str]
    output_names: list[str]

    @property
    def original_model(self) -> nn.Module:
        """The user's model, unwrapped from the exporter's IO wrapper."""
        return unwrap_model(self.model)

    def write_input_npz(self, filepath: Path, tract_compat: bool = False) -> None:
        """The flat inputs, by name, as an ``.npz`` (``tract_compat``: f16/bf16 as f32, which
        tract's bundle reader takes)."""
        _write_npz(self.input_names, self.flat_inputs, filepath, tract_compat)

    def write_output_npz(self, filepath: Path, tract_compat: bool = False) -> None:
        """The flat outputs, by name, as an ``.npz`` (as ``write_input_npz``)."""
        _write_npz(self.output_names, self.flat_outputs, filepath, tract_compat)

    def validate(self) -> None:
        """Raise ``T2NErrorIoQuantity`` when names and flattened tensors differ in number."""
        for kind, names, values in (
            ("input", self.input_names, self.flat_inputs),
            ("output", self.output_names, self.flat_outputs),
        ):
            if len(names) != len(values):
                raise T2NErrorIoQuantity(
                    f"{len(names)} {kind} names {list(names)} for {len(values)} flattened "
                    f"{kind} tensors: give one name per flattened {kind}"
                )


def _write_npz(names: Sequence[str], tensors: Sequence[Any], filepath: Path, tract_compat: bool) -> None:
    def as_array(t: Any) -> Any:
        if tract_compat and t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.detach().numpy() if tract_compat else t

    np.savez(filepath, **{name: as_array(t) for name, t in zip(names, tensors)})


class InferenceTarget:
    """Base class of inference targets: a version, ``check_io``, and hooks around the export.

    Same API as torch_to_nnef's ``InferenceTarget`` (0.24 ``post_export`` signature). The
    hooks are called in this order: ``pre_trace`` → ``post_trace`` → ``specific_fragments``
    → ``post_export``. Hooks must not change the target: one target may serve several
    exports at once.
    """

    OFFICIAL_SUPPORTED_VERSIONS: ClassVar[list[SemanticVersion]] = []

    def __init__(self, version: SemanticVersion | str, check_io: bool = False) -> None:
        self.version = as_version(version)
        self.check_io = check_io
        supported = self.OFFICIAL_SUPPORTED_VERSIONS
        if supported and not supported[-1] <= self.version <= supported[0]:
            LOGGER.warning(
                "%s: version %s is outside the officially supported range %s..%s",
                type(self).__name__,
                self.version.to_str(),
                supported[-1].to_str(),
                supported[0].to_str(),
            )

    @property
    def has_dynamic_axes(self) -> bool:
        """Whether the user asked for dynamic axes (the base target supports none)."""
        return False

    def capabilities(self) -> TargetCapabilities:
        """What the exported graph may use. The base target knows no runtime, so it gets
        strict Khronos NNEF; ``TractNNEF`` returns its version's registries and options."""
        return TargetCapabilities.strict_nnef()

    def dynamic_axes_of_input(self, name: str, rank: int) -> dict[int, str]:
        """``{axis: symbol}`` of input ``name`` (axes non-negative); none on the base target."""
        return {}

    def pre_trace(
        self,
        model: nn.Module,
        input_names: list[str] | None,
        output_names: list[str] | None,
    ) -> None:
        """Called after IO wrapping, before tracing: validate target options against the IO."""

    def post_trace(self, nnef_graph: Any, active_custom_extensions: list[str]) -> None:
        """Called once the NNEF graph is built; may append extension lines (without the keyword)."""

    def specific_fragments(self, model: nn.Module) -> dict[str, str]:
        """Extra NNEF fragments to write, name → text (written before the other fragments)."""
        return {}

    def needs_reference_outputs(self) -> bool:
        """Whether ``post_export`` reads the model's outputs on the example inputs
        (``model_info.flat_outputs``): with ``check_io``. Without it, ``torch.export``'s
        capture runs no eager forward, when the caller does not ask for the outputs either."""
        return self.check_io

    def reads_artefact(self) -> bool:
        """Whether ``post_export`` loads the written artefact (with ``check_io``): it is
        then written through the page cache, from which that load reads it; otherwise its
        large files go past the cache (``Artefact``'s ``past_cache``)."""
        return self.check_io

    def post_export(
        self,
        model_info: UnfoldModelInfo,
        nnef_graph: Any,
        exported_filepath: Path,
        debug_bundle_path: Path | None = None,
    ) -> Any:
        """Called once the artefact is written; targets run ``check_io`` here and return its
        result (``None`` when nothing was checked): the export keeps it in ``ExportResult``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.version.to_str()}>"
