"""The tract inference target, ``TractNNEF``: export options, version gates, metadata and
the IO check after export.

This is torch_to_nnef's ``inference_target.tract`` path, so it also re-exports the names
the reference defines here and fastnnef keeps elsewhere: the tract command line
(``TractCli``, tract_cli.py), the IO bundles (``build_io``, ``assert_io``,
``assert_io_and_debug_bundle``, io_bundles.py), the tolerance levels
(``TractCheckTolerance``, check.py) and the version gates (capabilities.py); the drop-in-only
downloader (``TractBinaryDownloader``, ``apply_dynamic_shape_in_nnef``) is served here by
fastnnef/compat/tract_downloader.py on first use.
"""

from __future__ import annotations

import copy
import getpass
import importlib.metadata
import platform
import re
import sys
from enum import Enum
from pathlib import Path
from typing import (
    Any,
    ClassVar,
)

import torch
from torch import nn

# Re-exported: the reference's names at this path (see the module docstring).
from fastnnef.check import TractCheckTolerance as TractCheckTolerance
from fastnnef.exceptions import (
    T2NErrorDynamicShapeValue,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
)
from fastnnef.inference_target.base import (
    InferenceTarget,
    UnfoldModelInfo,
    as_enum,
    unwrap_model,
)

# VERSION_GATES and VersionGate are re-exported: the gates are documented under this module.
from fastnnef.inference_target.capabilities import VERSION_GATES as VERSION_GATES
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.inference_target.capabilities import VersionGate as VersionGate
from fastnnef.inference_target.io_bundles import T2N_CHECK_IO_RAISE_EXCEPTION as T2N_CHECK_IO_RAISE_EXCEPTION
from fastnnef.inference_target.io_bundles import assert_io as assert_io
from fastnnef.inference_target.io_bundles import assert_io_and_debug_bundle as assert_io_and_debug_bundle
from fastnnef.inference_target.io_bundles import build_io as build_io
from fastnnef.inference_target.properties import (
    PROPERTIES_FRAGMENT_NAME,
    properties_fragment,
)
from fastnnef.inference_target.tract_cli import CUSTOM_TOLERANCE_PREFIX as CUSTOM_TOLERANCE_PREFIX
from fastnnef.inference_target.tract_cli import TractCli as TractCli
from fastnnef.log import get_logger
from fastnnef.nnef.graph import NNEF_KEYWORDS
from fastnnef.reference_names import reference_name
from fastnnef.utils import SemanticVersion
from fastnnef.version import __version__

LOGGER = get_logger(__name__)


class TractFeatureFlag(str, Enum):
    """Optional tract build features an export may rely on: ``default`` (the default
    build, what every export assumes) is accepted with a tract binary; ``complex`` is
    refused (fastnnef never emits tract's complex datum types)."""

    DEFAULT = "default"
    COMPLEX = "complex"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DynamicAxes = dict[str, dict[int, str]]


class TractNNEF(InferenceTarget):
    """Export for the tract inference engine (drop-in for torch_to_nnef's ``TractNNEF``).

    Same constructor parameters, order and defaults as torch_to_nnef 0.24.12. Differences:

    - construction never downloads anything: ``check_io`` runs the tract linked into
      fastnnef (0.23.9) in-process; ``tract_cli`` is a ``TractCli`` over that linked tract
      (same surface: ``version``, ``assert_io``...);
    - ``specific_tract_binary_path``, if given, must exist and is used for the check instead
      of the linked tract (``tract_cli`` then wraps it); its version is not asserted
      against ``version``;
    - the properties fragment has no ``export_date`` nor ``export_cmd`` (they make every
      export differ); add them through ``specific_properties`` if wanted;
    - version gates are data (``VERSION_GATES``, ``supports``), and ``reify_sdpa`` gives
      the resolved value of ``reify_sdpa_operator``.
    """

    OFFICIAL_SUPPORTED_VERSIONS: ClassVar[list[SemanticVersion]] = [
        SemanticVersion.from_str("0.23.9"),  # the tract linked into fastnnef
        SemanticVersion.from_str("0.23.8"),  # torch_to_nnef 0.24.12's latest
        SemanticVersion.from_str("0.22.1"),
        SemanticVersion.from_str("0.21.13"),
    ]

    def __init__(
        self,
        version: str | SemanticVersion,
        feature_flags: set[TractFeatureFlag] | None = None,
        check_io: bool = True,
        dynamic_axes: DynamicAxes | None = None,
        specific_tract_binary_path: Path | None = None,
        check_io_tolerance: TractCheckTolerance = TractCheckTolerance.APPROXIMATE,
        specific_properties: dict[str, str] | None = None,
        dump_identity_properties: bool = True,
        force_attention_inner_in_f32: bool = False,
        force_linear_accumulation_in_f32: bool = False,
        force_norm_in_f32: bool = False,
        reify_sdpa_operator: bool | None = None,
        upcast_reified_sdpa_inputs_to_f32: bool = True,
        upsample_with_debox: bool = False,
        native_gated_delta_op: bool | None = None,
    ) -> None:
        super().__init__(version, check_io)
        self.feature_flags: set[TractFeatureFlag] = {
            as_enum(TractFeatureFlag, flag, "feature_flags") for flag in (feature_flags or ())
        }
        if specific_tract_binary_path is not None:
            specific_tract_binary_path = Path(specific_tract_binary_path)
            if not specific_tract_binary_path.exists():
                raise T2NErrorNotFoundFile(
                    f"specific_tract_binary_path {str(specific_tract_binary_path)!r} does not "
                    "exist: give the path of a tract CLI, or None to check with the tract "
                    "linked into fastnnef"
                )
        if TractFeatureFlag.COMPLEX in self.feature_flags:
            raise T2NErrorNotImplemented(
                "feature_flags {'complex'}: fastnnef always exports complex tensors as real ones "
                "with a trailing (re, im) axis, which every tract build runs, and never emits "
                "tract's complex datum types (what the flag selects in torch_to_nnef, for tract "
                "< 0.20 only), so the flag would change nothing: leave it out"
            )
        if self.feature_flags and specific_tract_binary_path is None:
            names = sorted(flag.value for flag in self.feature_flags)
            raise T2NErrorNotImplemented(
                f"feature_flags {names} need a tract built with those features: pass "
                "specific_tract_binary_path=<path of that tract CLI>"
            )
        self.specific_tract_binary_path: Path | None = specific_tract_binary_path
        # torch_to_nnef harnesses read target.tract_cli: that binary, else the linked tract.
        self.tract_cli = TractCli(specific_tract_binary_path)
        self.dynamic_axes: DynamicAxes = _as_dynamic_axes(dynamic_axes)
        self.check_io_tolerance = as_enum(
            TractCheckTolerance, check_io_tolerance, "check_io_tolerance"
        )
        self.specific_properties: dict[str, str] | None = specific_properties
        self.dump_identity_properties = dump_identity_properties
        self.force_attention_inner_in_f32 = force_attention_inner_in_f32
        self.force_linear_accumulation_in_f32 = force_linear_accumulation_in_f32
        self.force_norm_in_f32 = force_norm_in_f32
        self.reify_sdpa_operator = reify_sdpa_operator
        self.upcast_reified_sdpa_inputs_to_f32 = upcast_reified_sdpa_inputs_to_f32
        self.upsample_with_debox = upsample_with_debox
        self.native_gated_delta_op = native_gated_delta_op
        if upsample_with_debox and not self.supports("debox"):
            raise T2NErrorInvalidArgument(
                f"upsample_with_debox=True needs tract >= {VERSION_GATES['debox'].first.to_str()} "
                f"(the debox operator), but the target is tract {self.version.to_str()}: raise "
                "the version or leave upsample_with_debox False"
            )
        if native_gated_delta_op is False:
            raise T2NErrorNotImplemented(
                "native_gated_delta_op=False: fastnnef exports gated delta net layers only as tract's "
                "fused tract_transformers_gdn_recurrent (any sequence length), it has no "
                "tract_core_scan lowering; leave it None (the default) or True"
            )
        if native_gated_delta_op and not self.supports("gated_delta_net"):
            raise T2NErrorInvalidArgument(
                f"native_gated_delta_op=True needs tract >= {VERSION_GATES['gated_delta_net'].first.to_str()} "
                f"(tract_transformers_gdn_recurrent), but the target is tract {self.version.to_str()}"
            )

    # --- construction helpers ---------------------------------------------------------

    @classmethod
    def latest_version(cls) -> SemanticVersion:
        """The newest supported tract version (the one linked into fastnnef)."""
        return cls.OFFICIAL_SUPPORTED_VERSIONS[0]

    @classmethod
    def latest(cls) -> TractNNEF:
        """``cls(cls.latest_version())``, with every other option at its default."""
        return cls(cls.latest_version())

    def with_dynamic_axes(self, dynamic_axes: DynamicAxes | None) -> TractNNEF:
        """A deep copy with ``dynamic_axes`` replaced."""
        new = copy.deepcopy(self)
        new.dynamic_axes = _as_dynamic_axes(dynamic_axes)
        return new

    def with_check_io_tolerance(self, check_io_tolerance: TractCheckTolerance) -> TractNNEF:
        """A deep copy with ``check_io_tolerance`` replaced."""
        new = copy.deepcopy(self)
        new.check_io_tolerance = as_enum(
            TractCheckTolerance, check_io_tolerance, "check_io_tolerance"
        )
        return new

    def with_specific_properties(self, specific_properties: dict[str, str] | None) -> TractNNEF:
        """A deep copy with ``specific_properties`` replaced."""
        new = copy.deepcopy(self)
        new.specific_properties = specific_properties
        return new

    # --- version gates --------------------------------------------------------------------

    def supports(self, feature: str) -> bool:
        """Whether the target version has ``feature``, a key of ``VERSION_GATES``."""
        return TargetCapabilities.tract(self.version).supports(feature)

    def capabilities(self) -> TargetCapabilities:
        """This tract version's registries and gates, with the export options."""
        return TargetCapabilities.tract(
            self.version,
            reify_sdpa=self.reify_sdpa,
            force_attention_inner_in_f32=self.force_attention_inner_in_f32,
            force_linear_accumulation_in_f32=self.force_linear_accumulation_in_f32,
            force_norm_in_f32=self.force_norm_in_f32,
            upcast_reified_sdpa_inputs_to_f32=self.upcast_reified_sdpa_inputs_to_f32,
            upsample_with_debox=self.upsample_with_debox,
            native_gated_delta_op=self.native_gated_delta_op,
        )

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
        input_names: list[str] | None,
        output_names: list[str] | None,
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

    def dynamic_axes_of_input(self, name: str, rank: int) -> dict[int, str]:
        """The ``{axis: symbol}`` of input ``name`` with axes made non-negative for ``rank``."""
        resolved: dict[int, str] = {}
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

    def post_trace(self, nnef_graph: Any, active_custom_extensions: list[str]) -> None:
        """Append one ``tract_symbol <S>`` per distinct symbol of the inputs' dynamic axes.

        Symbols come in order of first appearance, each once. Entries whose name is not
        among ``nnef_graph.input_names`` (outputs, inputs pruned by tracing) are skipped.
        Targets < 0.18.2 get the legacy ``tract_pulse_streaming_symbol`` line instead.
        """
        graph_inputs = getattr(nnef_graph, "input_names", None)
        symbols: list[str] = []
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

    def properties(self, model: nn.Module) -> dict[str, str]:
        """The metadata written in ``tract_core_properties``, in the documented key order."""
        props: dict[str, str] = {
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

    def specific_fragments(self, model: nn.Module) -> dict[str, str]:
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
        debug_bundle_path: Path | None = None,
    ) -> Any:
        """If ``check_io``, load the artefact in tract, run the inputs and compare the outputs."""
        if not self.check_io:
            return None
        # The linked tract, or specific_tract_binary_path's CLI (self.tract_cli is either).
        return self.tract_cli.check_io(
            exported_filepath, model_info.flat_inputs, model_info.flat_outputs, model_info.input_names,
            model_info.output_names, self.effective_check_io_tolerance(), debug_bundle_path,
        )


def _as_dynamic_axes(dynamic_axes: Any) -> DynamicAxes:
    if dynamic_axes is None:
        return {}
    if not isinstance(dynamic_axes, dict):
        raise T2NErrorDynamicShapeValue(
            f"dynamic_axes must be a dict {{input_name: {{axis: symbol}}}}, got {dynamic_axes!r}"
        )
    return dict(dynamic_axes)


def _identity_properties() -> dict[str, str]:
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


def __getattr__(name: str) -> Any:  # the drop-in names of this path (fastnnef/reference_names.py)
    return reference_name(__name__, name)
