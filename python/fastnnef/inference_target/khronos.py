"""The strict Khronos NNEF target."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from fastnnef.check import check_io
from fastnnef.inference_target.base import InferenceTarget, UnfoldModelInfo
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.utils import SemanticVersion


class KhronosNNEF(InferenceTarget):
    """Export to the strict Khronos NNEF specification (drop-in for torch_to_nnef's).

    Difference: ``check_io`` does not use NNEF-Tools' PyTorch interpreter nor the ``tar``
    CLI; the strict artefact is loaded and run by the tract linked into fastnnef and
    compared at the ``approximate`` tolerance. No extra dependency is needed.
    """

    OFFICIAL_SUPPORTED_VERSIONS: ClassVar[list[SemanticVersion]] = [
        SemanticVersion.from_str("1.0.5")
    ]

    def __init__(self, version: SemanticVersion | str, check_io: bool = True) -> None:
        super().__init__(version, check_io)

    @classmethod
    def latest_version(cls) -> SemanticVersion:
        """The newest supported NNEF specification version."""
        return cls.OFFICIAL_SUPPORTED_VERSIONS[0]

    @classmethod
    def latest(cls) -> KhronosNNEF:
        """``cls(cls.latest_version())``: NNEF 1.0.5 with ``check_io=True``."""
        return cls(cls.latest_version())

    def capabilities(self) -> TargetCapabilities:
        """Strict NNEF: no tract operator, registry or version gate, whatever ``version``
        (an NNEF specification version, not a tract one)."""
        return TargetCapabilities.strict_nnef()

    def post_export(
        self,
        model_info: UnfoldModelInfo,
        nnef_graph: Any,
        exported_filepath: Path,
        debug_bundle_path: Path | None = None,
    ) -> Any:
        """If ``check_io``, run the artefact with the linked tract and compare the outputs."""
        if not self.check_io:
            return None
        return check_io(
            exported_filepath, model_info.flat_inputs, model_info.flat_outputs, model_info.input_names,
            model_info.output_names, "approximate", debug_bundle_path,
        )
