"""The tract inference target: export options, version gates, metadata and the IO check."""

from __future__ import annotations

import copy
import getpass
import importlib.metadata
import logging
import platform
import re
import sys
from enum import Enum
from pathlib import Path
from typing import (
    Any,
    ClassVar,
    Dict,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import numpy as np
import torch
from torch import nn

from fastnnef.exceptions import (
    T2NErrorDynamicShapeValue,
    T2NErrorInvalidArgument,
    T2NErrorIoQuantity,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.inference_target.base import InferenceTarget, UnfoldModelInfo, unwrap_model
from fastnnef.inference_target.properties import PROPERTIES_FRAGMENT_NAME, properties_fragment
from fastnnef.nnef.graph import NNEF_KEYWORDS
from fastnnef.utils import SemanticVersion

LOGGER = logging.getLogger(__name__)


class TractCheckTolerance(str, Enum):
    """How close tract's outputs must be to PyTorch's (tract's ``--approx`` levels, tract.md §5)."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    CLOSE = "close"
    VERY = "very"
    SUPER = "super"
    ULTRA = "ultra"


class TractFeatureFlag(str, Enum):
    """Optional tract build features an export may rely on."""

    DEFAULT = "default"
    COMPLEX = "complex"


class VersionGate(NamedTuple):
    """The first tract version with a feature, and what the feature changes."""

    first: SemanticVersion
    reason: str


def _v(text: str) -> SemanticVersion:
    return SemanticVersion.from_str(text)


# Target-version gates as data (torch_to_nnef-api.md §6.3). A gate is open when the target
# version is >= `first`; "> X.Y.Z" gates of the reference are written as the next patch.
VERSION_GATES: Dict[str, VersionGate] = {
    "tract_symbol": VersionGate(_v("0.18.2"), "`extension tract_symbol S;` declares dynamic axes"),
    "multi_char_symbols": VersionGate(_v("0.19.0"), "symbol names longer than one letter"),
    "tract_extra": VersionGate(_v("0.20.20"), "the tract_extra registry"),
    "approx_levels": VersionGate(_v("0.21.7"), "the check honours check_io_tolerance"),
    "approx_very_ultra": VersionGate(_v("0.21.8"), "the 'very' and 'ultra' tolerance levels"),
    "q4_0_ggml_order": VersionGate(_v("0.21.11"), "Q4_0 .dat code 0x3040 (GGML order), not 0x2040"),
    "tract_transformers": VersionGate(_v("0.22.0"), "the tract_transformers registry"),
    "reified_sdpa": VersionGate(_v("0.22.1"), "SDPA as tract_transformers_sdpa by default"),
    "scatter_reductions": VersionGate(_v("0.23.0"), "scatter with reductions"),
    "resize_grid_sample": VersionGate(_v("0.23.2"), "resize and grid_sample ops"),
    "gated_delta_net": VersionGate(_v("0.23.5"), "tract_transformers_gdn_recurrent"),
    "moe_ffn": VersionGate(_v("0.23.9"), "MoE blocks as tract_moe_ffn"),
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DynamicAxes = Dict[str, Dict[int, str]]


class TractNNEF(InferenceTarget):
    """Export for the tract inference engine (drop-in for torch_to_nnef's ``TractNNEF``).

    Same constructor parameters, order and defaults as torch_to_nnef 0.24.12. Differences:

    - construction never downloads anything: ``check_io`` runs the tract linked into
      fastnnef (0.23.9) in-process, so there is no ``tract_cli`` attribute;
    - ``specific_tract_binary_path``, if given, must exist and is used for the check instead
      of the linked tract; its version is not asserted against ``version``;
    - the properties fragment has no ``export_date`` nor ``export_cmd`` (they make every
      export differ); add them through ``specific_properties`` if wanted;
    - version gates are data (``VERSION_GATES``, ``supports``), and ``reify_sdpa`` gives
      the resolved value of ``reify_sdpa_operator``.
    """

    OFFICIAL_SUPPORTED_VERSIONS: ClassVar[List[SemanticVersion]] = [
        _v("0.23.9"),  # the tract linked into fastnnef
        _v("0.23.8"),  # torch_to_nnef 0.24.12's latest
        _v("0.22.1"),
        _v("0.21.13"),
    ]

    def __init__(
        self,
        version: Union[str, SemanticVersion],
        feature_flags: Optional[Set[TractFeatureFlag]] = None,
        check_io: bool = True,
        dynamic_axes: Optional[DynamicAxes] = None,
        specific_tract_binary_path: Optional[Path] = None,
        check_io_tolerance: TractCheckTolerance = TractCheckTolerance.APPROXIMATE,
        specific_properties: Optional[Dict[str, str]] = None,
        dump_identity_properties: bool = True,
        force_attention_inner_in_f32: bool = False,
        force_linear_accumulation_in_f32: bool = False,
        force_norm_in_f32: bool = False,
        reify_sdpa_operator: Optional[bool] = None,
        upcast_reified_sdpa_inputs_to_f32: bool = True,
        upsample_with_debox: bool = False,
        native_gated_delta_op: Optional[bool] = None,
    ) -> None:
        super().__init__(version, check_io)
        self.feature_flags: Set[TractFeatureFlag] = {
            _to_enum(TractFeatureFlag, flag, "feature_flags") for flag in (feature_flags or ())
        }
        if specific_tract_binary_path is not None:
            specific_tract_binary_path = Path(specific_tract_binary_path)
            if not specific_tract_binary_path.exists():
                raise T2NErrorNotFoundFile(
                    f"specific_tract_binary_path {str(specific_tract_binary_path)!r} does not "
                    "exist: give the path of a tract CLI, or None to check with the tract "
                    "linked into fastnnef"
                )
        if self.feature_flags and specific_tract_binary_path is None:
            names = sorted(flag.value for flag in self.feature_flags)
            raise T2NErrorNotImplemented(
                f"feature_flags {names} need a tract built with those features: pass "
                "specific_tract_binary_path=<path of that tract CLI>"
            )
        self.specific_tract_binary_path: Optional[Path] = specific_tract_binary_path
        self.dynamic_axes: DynamicAxes = _as_dynamic_axes(dynamic_axes)
        self.check_io_tolerance = _to_enum(
            TractCheckTolerance, check_io_tolerance, "check_io_tolerance"
        )
        self.specific_properties: Optional[Dict[str, str]] = specific_properties
        self.dump_identity_properties = dump_identity_properties
        self.force_attention_inner_in_f32 = force_attention_inner_in_f32
        self.force_linear_accumulation_in_f32 = force_linear_accumulation_in_f32
        self.force_norm_in_f32 = force_norm_in_f32
        self.reify_sdpa_operator = reify_sdpa_operator
        self.upcast_reified_sdpa_inputs_to_f32 = upcast_reified_sdpa_inputs_to_f32
        self.upsample_with_debox = upsample_with_debox
        self.native_gated_delta_op = native_gated_delta_op

    # --- construction helpers ---------------------------------------------------------

    @classmethod
    def latest_version(cls) -> SemanticVersion:
        """The newest supported tract version (the one linked into fastnnef)."""
        return cls.OFFICIAL_SUPPORTED_VERSIONS[0]

    @classmethod
    def latest(cls) -> TractNNEF:
        """``cls(cls.latest_version())``, with every other option at its default."""
        return cls(cls.latest_version())

    def with_dynamic_axes(self, dynamic_axes: Optional[DynamicAxes]) -> TractNNEF:
        """A deep copy with ``dynamic_axes`` replaced."""
        new = copy.deepcopy(self)
        new.dynamic_axes = _as_dynamic_axes(dynamic_axes)
        return new

    def with_check_io_tolerance(self, check_io_tolerance: TractCheckTolerance) -> TractNNEF:
        """A deep copy with ``check_io_tolerance`` replaced."""
        new = copy.deepcopy(self)
        new.check_io_tolerance = _to_enum(
            TractCheckTolerance, check_io_tolerance, "check_io_tolerance"
        )
        return new

    def with_specific_properties(self, specific_properties: Optional[Dict[str, str]]) -> TractNNEF:
        """A deep copy with ``specific_properties`` replaced."""
        new = copy.deepcopy(self)
        new.specific_properties = specific_properties
        return new

    # --- version gates --------------------------------------------------------------------

    def supports(self, feature: str) -> bool:
        """Whether the target version has ``feature``, a key of ``VERSION_GATES``."""
        gate = VERSION_GATES.get(feature)
        if gate is None:
            raise T2NErrorInvalidArgument(
                f"unknown tract feature {feature!r}; known: {sorted(VERSION_GATES)}"
            )
        return self.version >= gate.first

    @property
    def reify_sdpa(self) -> bool:
        """``reify_sdpa_operator`` resolved: ``None`` means on for targets > 0.22.0."""
        if self.reify_sdpa_operator is None:
            return self.supports("reified_sdpa")
        return self.reify_sdpa_operator

    @property
    def has_dynamic_axes(self) -> bool:
        return bool(self.dynamic_axes)

    # --- dynamic axes ---------------------------------------------------------------------

    def pre_trace(
        self,
        model: nn.Module,
        input_names: Optional[List[str]],
        output_names: Optional[List[str]],
    ) -> None:
        """Validate ``dynamic_axes``; raise ``T2NErrorDynamicShapeValue`` naming the bad entry.

        Entries must be ``{input_name: {axis: symbol}}``. An entry for an output is ignored
        with a warning (output shapes follow from the inputs' symbols). Negative axes are
        allowed; ``dynamic_axes_of_input`` resolves them once the input's rank is known.
        """
        for name, axes in self.dynamic_axes.items():
            if not isinstance(name, str):
                raise T2NErrorDynamicShapeValue(
                    f"dynamic_axes key {name!r} must be an input name (str)"
                )
            if output_names and name in output_names and not (input_names and name in input_names):
                LOGGER.warning(
                    "dynamic_axes entry for output %r is ignored: output shapes follow from "
                    "the inputs' symbols",
                    name,
                )
                continue
            if input_names is not None and name not in input_names:
                raise T2NErrorDynamicShapeValue(
                    f"dynamic_axes names {name!r}, which is not a model input; inputs are "
                    f"{list(input_names)}: key dynamic_axes by input name"
                )
            self._check_axes(name, axes)

    def _check_axes(self, name: str, axes: Any) -> None:
        if isinstance(axes, (list, tuple)):
            letters = "SPTUVWXYZ"
            example = ", ".join(f"{a!r}: '{letters[i % 9]}'" for i, a in enumerate(axes))
            raise T2NErrorDynamicShapeValue(
                f"dynamic_axes[{name!r}] is a list of axes ({list(axes)!r}); fastnnef needs "
                f"a symbol per axis: use a dict such as {{{example}}}"
            )
        if not isinstance(axes, dict):
            raise T2NErrorDynamicShapeValue(
                f"dynamic_axes[{name!r}] must be a dict {{axis: symbol}}, got {axes!r}"
            )
        for axis, symbol in axes.items():
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise T2NErrorDynamicShapeValue(
                    f"dynamic_axes[{name!r}] has axis {axis!r}: axes must be ints "
                    "(e.g. 0 for the first axis)"
                )
            where = f"dynamic_axes[{name!r}][{axis}] = {symbol!r}"
            if not isinstance(symbol, str) or not _IDENTIFIER.fullmatch(symbol):
                raise T2NErrorDynamicShapeValue(
                    f"{where} is not a valid NNEF identifier: use ASCII letters, digits and "
                    "'_', not starting with a digit, e.g. 'S'"
                )
            if symbol in NNEF_KEYWORDS:
                raise T2NErrorDynamicShapeValue(
                    f"{where} is an NNEF keyword: pick another symbol name, e.g. 'S'"
                )
            if len(symbol) > 1 and not self.supports("multi_char_symbols"):
                raise T2NErrorDynamicShapeValue(
                    f"{where}: tract {self.version.to_str()} only accepts single-letter "
                    "symbols (multi-character symbols need tract >= 0.19.0)"
                )

    def dynamic_axes_of_input(self, name: str, rank: int) -> Dict[int, str]:
        """The ``{axis: symbol}`` of input ``name`` with axes made non-negative for ``rank``."""
        resolved: Dict[int, str] = {}
        for axis, symbol in self.dynamic_axes.get(name, {}).items():
            if not -rank <= axis < rank:
                raise T2NErrorDynamicShapeValue(
                    f"dynamic_axes[{name!r}] has axis {axis}, but input {name!r} has rank "
                    f"{rank}: use an axis in [{-rank}, {rank - 1}]"
                )
            positive = axis % rank
            if positive in resolved:
                raise T2NErrorDynamicShapeValue(
                    f"dynamic_axes[{name!r}] names axis {positive} twice (as {axis} too): "
                    "give each axis once"
                )
            resolved[positive] = symbol
        return resolved

    def post_trace(self, nnef_graph: Any, active_custom_extensions: List[str]) -> None:
        """Append one ``tract_symbol <S>`` per distinct symbol of the inputs' dynamic axes.

        Symbols come in order of first appearance, each once. Entries whose name is not
        among ``nnef_graph.input_names`` (outputs, inputs pruned by tracing) are skipped.
        Targets < 0.18.2 get the legacy ``tract_pulse_streaming_symbol`` line instead.
        """
        graph_inputs = getattr(nnef_graph, "input_names", None)
        symbols: List[str] = []
        for name, axes in self.dynamic_axes.items():
            if graph_inputs is not None and name not in graph_inputs:
                LOGGER.warning(
                    "dynamic_axes entry %r is skipped: it is not an input of the traced graph",
                    name,
                )
                continue
            symbols.extend(s for s in axes.values() if s not in symbols)
        if not symbols:
            return
        if self.supports("tract_symbol"):
            lines = [f"tract_symbol {symbol}" for symbol in symbols]
        else:
            lines = ["tract_pulse_streaming_symbol"]
        active_custom_extensions.extend(x for x in lines if x not in active_custom_extensions)

    # --- metadata -------------------------------------------------------------------------

    def properties(self, model: nn.Module) -> Dict[str, str]:
        """The metadata written in ``tract_core_properties``, in the documented key order."""
        from fastnnef import __version__

        props: Dict[str, str] = {
            "tract_target_version": self.version.to_str(),
            "torch_to_nnef_version": __version__,  # what tools reading torch_to_nnef artefacts look for
            "fastnnef_version": __version__,
            "torch_version": torch.__version__,
        }
        try:  # the installed version, read without importing transformers
            props["transformers_version"] = importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            pass
        if self.dump_identity_properties:
            props.update(_identity_properties())
        props["py_version"] = sys.version
        props["exported_py_class"] = type(unwrap_model(model)).__name__
        props.update({str(k): str(v) for k, v in (self.specific_properties or {}).items()})
        return props

    def specific_fragments(self, model: nn.Module) -> Dict[str, str]:
        """``{"tract_core_properties": <fragment>}``; it needs ``extension tract_registry tract_core;``."""
        return {PROPERTIES_FRAGMENT_NAME: properties_fragment(self.properties(model).items())}

    # --- check ----------------------------------------------------------------------------

    def effective_check_io_tolerance(self) -> str:
        """The tolerance the check uses, following the target's tract (torch_to_nnef-api.md §6.2).

        Below 0.21.7 tract had no ``--approx`` and compared at ``close``; 0.21.7 lacked
        ``very`` and ``ultra``, which become ``super``.
        """
        tolerance = self.check_io_tolerance
        if not self.supports("approx_levels"):
            if tolerance != TractCheckTolerance.CLOSE:
                LOGGER.warning(
                    "check_io_tolerance %r is ignored for tract %s (< 0.21.7): checking at 'close'",
                    tolerance.value,
                    self.version.to_str(),
                )
            return TractCheckTolerance.CLOSE.value
        if not self.supports("approx_very_ultra") and tolerance in (
            TractCheckTolerance.VERY,
            TractCheckTolerance.ULTRA,
        ):
            return TractCheckTolerance.SUPER.value
        return tolerance.value

    def post_export(
        self,
        model_info: UnfoldModelInfo,
        nnef_graph: Any,
        exported_filepath: Path,
        debug_bundle_path: Optional[Path] = None,
    ) -> Any:
        """If ``check_io``, load the artefact in tract, run the inputs and compare the outputs."""
        if not self.check_io:
            return None
        return self._check_with_linked_tract(
            model_info, exported_filepath, debug_bundle_path,
            self.effective_check_io_tolerance(), self.specific_tract_binary_path,
        )


def _as_dynamic_axes(dynamic_axes: Any) -> DynamicAxes:
    if dynamic_axes is None:
        return {}
    if not isinstance(dynamic_axes, dict):
        raise T2NErrorDynamicShapeValue(
            f"dynamic_axes must be a dict {{input_name: {{axis: symbol}}}}, got {dynamic_axes!r}"
        )
    return dict(dynamic_axes)


def _identity_properties() -> Dict[str, str]:
    uname = platform.uname()
    props = {
        "os": f"{uname.system} {uname.release} {uname.version} {uname.machine}",
        "hostname": platform.node(),
    }
    try:
        props["user"] = getpass.getuser()
    except (KeyError, OSError):  # no login name in some containers: leave the key out
        pass
    return props


def _to_enum(enum_cls: Any, value: Any, param: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = [member.value for member in enum_cls]
        raise T2NErrorInvalidArgument(
            f"{param}: {value!r} is not one of {allowed}"
        ) from None



def build_io(
    model: nn.Module,
    test_input: Union[torch.Tensor, Sequence[torch.Tensor]],
    input_bundle_path: Optional[Path] = None,
    output_bundle_path: Optional[Path] = None,
    input_names: Optional[List[str]] = None,
    output_names: Optional[List[str]] = None,
) -> Tuple[List[str], List[str]]:
    """Run ``model`` on ``test_input`` and save inputs and outputs as tract ``.npz`` bundles.

    Same contract as torch_to_nnef 0.24's: eval mode, no grad, inference mode; f16 and
    bf16 values saved as f32; names default to ``input_<i>`` / ``output_<i>``; returns
    ``(input_names, output_names)``. The model's training flag is restored afterwards.
    Inputs and outputs must be a tensor or a flat sequence of tensors.
    """
    inputs = _flat_tensors(test_input, "test_input")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.inference_mode():
            outputs = _flat_tensors(model(*inputs), "model output")
    finally:
        model.train(was_training)
    input_names = _io_names(input_names, inputs, "input")
    output_names = _io_names(output_names, outputs, "output")
    for path, names, tensors in (
        (input_bundle_path, input_names, inputs),
        (output_bundle_path, output_names, outputs),
    ):
        if path is not None:
            np.savez(path, **{n: _to_numpy(t) for n, t in zip(names, tensors)})
    return input_names, output_names


def _flat_tensors(value: Any, what: str) -> List[torch.Tensor]:
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if not all(isinstance(v, torch.Tensor) for v in values):
        raise T2NErrorNotImplemented(
            f"build_io: {what} must be a tensor or a flat sequence of tensors, got "
            f"{[type(v).__name__ for v in values]}"
        )
    return values


def _io_names(names: Optional[List[str]], tensors: List[torch.Tensor], kind: str) -> List[str]:
    if names is None:
        return [f"{kind}_{i}" for i in range(len(tensors))]
    if len(names) != len(tensors):
        raise T2NErrorIoQuantity(
            f"build_io: {len(names)} {kind} names {list(names)} for {len(tensors)} {kind} tensors"
        )
    return list(names)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.float16, torch.bfloat16):  # the check compares in f32
        tensor = tensor.float()
    return tensor.numpy()
