"""The tract inference target: export options, version gates, metadata and the IO check."""

from __future__ import annotations

import copy
import functools
import getpass
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import (
    Any,
    ClassVar,
    Dict,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

from fastnnef.check import TractCheckTolerance as TractCheckTolerance
from fastnnef.check import to_numpy
from fastnnef.exceptions import (
    T2NErrorDynamicShapeValue,
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
    T2NErrorTract,
    T2NErrorTractDownload,
)
from fastnnef.inference_target.base import (
    InferenceTarget,
    UnfoldModelInfo,
    as_version,
    unwrap_model,
)

# VERSION_GATES and VersionGate are re-exported: the gates are documented under this module.
from fastnnef.inference_target.capabilities import VERSION_GATES as VERSION_GATES
from fastnnef.inference_target.capabilities import TargetCapabilities
from fastnnef.inference_target.capabilities import VersionGate as VersionGate
from fastnnef.inference_target.properties import (
    PROPERTIES_FRAGMENT_NAME,
    properties_fragment,
)
from fastnnef.log import get_logger
from fastnnef.nnef.graph import NNEF_KEYWORDS

# _expand_names: the one rule for naming flattened IO (shared with the export).
from fastnnef.torch_graph.trace import _expand_names as expand_io_names
from fastnnef.torch_graph.trace import eval_mode, normalize_args
from fastnnef.utils import SemanticVersion

LOGGER = get_logger(__name__)


class TractFeatureFlag(str, Enum):
    """Optional tract build features an export may rely on: ``default`` (the default
    build, what every export assumes) is accepted with a tract binary; ``complex`` is
    refused (fastnnef never emits tract's complex datum types)."""

    DEFAULT = "default"
    COMPLEX = "complex"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DynamicAxes = Dict[str, Dict[int, str]]


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

    OFFICIAL_SUPPORTED_VERSIONS: ClassVar[List[SemanticVersion]] = [
        SemanticVersion.from_str("0.23.9"),  # the tract linked into fastnnef
        SemanticVersion.from_str("0.23.8"),  # torch_to_nnef 0.24.12's latest
        SemanticVersion.from_str("0.22.1"),
        SemanticVersion.from_str("0.21.13"),
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
        self.specific_tract_binary_path: Optional[Path] = specific_tract_binary_path
        # torch_to_nnef harnesses read target.tract_cli: that binary, else the linked tract.
        self.tract_cli = TractCli(specific_tract_binary_path)
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


CUSTOM_TOLERANCE_PREFIX = "custom:"  # custom:ATOL,RTOL,OUTLIERS, tract's --approx-custom


def _tolerance_value(tolerance: Any) -> str:
    """A tolerance level's name, or a ``custom:ATOL,RTOL,OUTLIERS`` string as given."""
    if isinstance(tolerance, str) and tolerance.startswith(CUSTOM_TOLERANCE_PREFIX):
        return tolerance
    return str(_to_enum(TractCheckTolerance, tolerance, "check_tolerance").value)


def _to_enum(enum_cls: Any, value: Any, param: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = [member.value for member in enum_cls]
        raise T2NErrorInvalidArgument(
            f"{param}: {value!r} is not one of {allowed}"
        ) from None


# --- IO bundles and the tract command line (torch_to_nnef's names) ------------------------

T2N_CHECK_IO_RAISE_EXCEPTION = "T2N_CHECK_IO_RAISE_EXCEPTION"
# Where torch_to_nnef caches downloaded tract binaries (fastnnef only looks there).
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "svc" / "tract"


def build_io(
    model: nn.Module,
    test_input: Any,
    input_bundle_path: Optional[Path] = None,
    output_bundle_path: Optional[Path] = None,
    input_names: Optional[List[str]] = None,
    output_names: Optional[List[str]] = None,
    *,
    io_npz_path: Optional[Path] = None,
) -> Tuple[List[str], List[str]]:
    """Run ``model`` on ``test_input`` and save inputs and outputs as tract ``.npz`` bundles.

    Same contract as torch_to_nnef 0.24's: eval mode, no grad, inference mode; f16 and
    bf16 values saved as f32; returns ``(input_names, output_names)``. Inputs and outputs
    are flattened and named as ``export_model_to_nnef`` does (nested tuples, lists and
    dicts; ``input_<i>`` / ``output_<i>`` by default, or one name per top-level item, e.g.
    ``["out", "state"]`` for an LSTM's ``(out, (h, c))`` gives ``out, state_0, state_1``).
    Every submodule's training flag is restored afterwards. ``io_npz_path`` (keyword, the
    bundle of torch_to_nnef <= 0.20, whose third parameter it was): inputs and outputs in
    one ``.npz``.
    """
    top_in = normalize_args(test_input)
    inputs = [leaf for leaf in pytree.tree_leaves(top_in) if isinstance(leaf, torch.Tensor)]
    with eval_mode(model), torch.no_grad(), torch.inference_mode():
        outputs = model(*top_in)
    top_out = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    flat_out = pytree.tree_leaves(top_out)
    not_tensors = sorted({type(o).__name__ for o in flat_out if not isinstance(o, torch.Tensor)})
    if not_tensors:
        raise T2NErrorNotImplemented(
            f"build_io: the model returns non-tensor values ({', '.join(not_tensors)}); NNEF "
            "outputs are tensors: return tensors only"
        )
    input_names = expand_io_names(input_names, top_in, len(inputs), "input", "input")
    output_names = expand_io_names(output_names, top_out, len(flat_out), "output", "output")
    for path, names, tensors in (
        (input_bundle_path, input_names, inputs),
        (output_bundle_path, output_names, flat_out),
        (io_npz_path, input_names + output_names, inputs + flat_out),
    ):
        if path is not None:
            np.savez(path, **{n: to_numpy(t, f"{n!r}", half_as_f32=True) for n, t in zip(names, tensors)})
    return input_names, output_names


class TractCli:
    """A tract command line (torch_to_nnef's ``TractCli``), over a tract binary or over the
    tract linked into fastnnef.

    ``TractCli(tract_path)`` runs that binary in a subprocess, with the reference's command
    lines for its version. ``TractCli(None)`` (``TractCli.linked()``, what
    ``TractNNEF(...).tract_cli`` is without ``specific_tract_binary_path``) has the same
    surface in-process: ``version`` is the linked tract's, ``assert_io`` checks with it,
    ``assert_io_cmd_str`` is the equivalent ``fastnnef check`` command; ``run``,
    ``run_save_outputs_cmd_str`` and ``convert_onnx_to_nnef`` need a binary and raise.
    ``download`` always raises: fastnnef never downloads.
    """

    def __init__(self, tract_path: Optional[Path]):
        if tract_path is not None:
            tract_path = Path(tract_path)
            if not tract_path.exists():
                raise T2NErrorNotFoundFile(
                    f"tract binary {str(tract_path)!r} does not exist: give the path of a tract "
                    "CLI, or use TractCli.linked() for the tract linked into fastnnef"
                )
        self.tract_path: Optional[Path] = tract_path

    @classmethod
    def linked(cls) -> TractCli:
        """The tract linked into fastnnef, with a command line's surface."""
        return cls(None)

    @classmethod
    def download(cls, version: Union[str, SemanticVersion]) -> TractCli:
        """Raises ``T2NErrorTractDownload``: fastnnef never downloads anything."""
        raise T2NErrorTractDownload(
            f"fastnnef never downloads tract (asked for {version}): pass the path of a tract "
            "binary (TractCli(path), TractNNEF(specific_tract_binary_path=...)) or use the "
            "linked tract (TractCli.linked())"
        )

    def __repr__(self) -> str:
        return f"TractCli({str(self.tract_path) if self.tract_path else 'linked'!r})"

    @functools.cached_property
    def version(self) -> SemanticVersion:
        """The tract version (``tract --version`` for a binary)."""
        if self.tract_path is None:
            from fastnnef import _native

            return SemanticVersion.from_str(_native.TRACT_VERSION)
        out = subprocess.check_output([str(self.tract_path), "--version"], stderr=subprocess.STDOUT)
        words = out.decode("utf8").split()
        if len(words) < 2:
            raise T2NErrorTract(f"{self.tract_path} --version printed {out!r}, not 'tract X.Y.Z'")
        return SemanticVersion.from_str(words[1])

    def _binary(self, what: str) -> Path:
        if self.tract_path is None:
            raise T2NErrorNotImplemented(
                f"TractCli.{what} runs a tract command line, and the tract linked into fastnnef "
                "has none: use TractCli(<path of a tract binary>)"
            )
        return self.tract_path

    def run(self, args: Sequence[Any], quiet: bool = False) -> int:
        """Run ``tract <args>``; return its exit code (stdout discarded when ``quiet``)."""
        cmd = [str(self._binary("run")), *(str(a) for a in args)]
        return subprocess.call(cmd, stdout=subprocess.DEVNULL if quiet else None)

    def _run_cmd_prefix(self, nnef_path: Path) -> List[str]:
        """``tract <model>`` with the NNEF extension flags this version knows, then ``-O``."""
        flags = ["--nnef-tract-core", "--nnef-tract-pulse"]
        if self.version >= "0.20.20":
            flags.append("--nnef-tract-extra")
        if self.version >= "0.22.0":
            flags.append("--nnef-tract-transformers")
        return [str(self._binary("commands")), str(nnef_path), *flags, "-O"]

    def assert_io_cmd_str(
        self,
        nnef_path: Path,
        input_bundle_path: Path,
        output_bundle_path: Path,
        check_tolerance: Union[TractCheckTolerance, str] = TractCheckTolerance.EXACT,
    ) -> List[str]:
        """The command that checks ``nnef_path`` on the input bundle against the output
        bundle at ``check_tolerance`` (``fastnnef check ...`` for the linked tract)."""
        tolerance = _tolerance_value(check_tolerance)
        if self.tract_path is None:
            return [
                "fastnnef", "check", str(nnef_path), "--inputs", str(input_bundle_path),
                "--outputs", str(output_bundle_path), "--tolerance", tolerance,
            ]
        cmd = self._run_cmd_prefix(nnef_path)
        if self.version < "0.18.0":
            cmd += ["--input-bundle", str(input_bundle_path), "run"]
        else:
            cmd += ["run", "--input-from-bundle", str(input_bundle_path)]
        cmd += ["--assert-output-bundle", str(output_bundle_path), "--allow-float-casts"]
        return cmd + self._approx_flags(tolerance)

    def _approx_flags(self, tolerance: str) -> List[str]:
        """The tolerance flags this version knows: none before 0.21.7 (its check is exact);
        0.21.7 lacks ``very`` and ``ultra`` (``super`` instead, as the reference does)."""
        if self.version < "0.21.7":
            return []
        if tolerance.startswith(CUSTOM_TOLERANCE_PREFIX):
            return ["--approx-custom", tolerance[len(CUSTOM_TOLERANCE_PREFIX):]]
        if self.version == "0.21.7" and tolerance in ("very", "ultra"):
            tolerance = "super"
        return ["--approx", tolerance]

    def run_save_outputs_cmd_str(
        self, nnef_path: Path, input_bundle_path: Path, output_bundle_path: Path
    ) -> List[str]:
        """The command that runs ``nnef_path`` on the input bundle and saves tract's
        outputs to ``output_bundle_path`` (a binary only)."""
        return self._run_cmd_prefix(nnef_path) + [
            "run", "--input-from-bundle", str(input_bundle_path),
            "--save-outputs-npz", str(output_bundle_path), "--allow-float-casts",
        ]

    def assert_io(
        self,
        nnef_path: Path,
        input_bundle_path: Path,
        output_bundle_path: Union[Path, bool, None] = None,
        raise_exception: bool = True,
        check_tolerance: Union[TractCheckTolerance, str] = TractCheckTolerance.EXACT,
    ) -> bool:
        """Check ``nnef_path`` on the bundles; ``True`` when the outputs match. A mismatch
        raises ``T2NErrorIOPytorchTractNotISO``, an artefact tract cannot load or run
        ``T2NErrorTract``; without ``raise_exception`` either is logged and gives ``False``
        (as a failing tract command does for the reference). A binary's verdict is its exit code.

        Without ``output_bundle_path``, torch_to_nnef 0.20's form
        ``assert_io(nnef_path, io_npz_path, raise_exception=True)``: one bundle holds the
        inputs and the expected outputs, by name. A bool in the third place is that form's
        ``raise_exception`` (a bool is never a path)."""
        if isinstance(output_bundle_path, bool):
            if raise_exception is not True:
                raise T2NErrorInvalidArgument(
                    "assert_io got raise_exception twice: in the third place (torch_to_nnef 0.20's "
                    "assert_io(nnef_path, io_npz_path, raise_exception)) and by name"
                )
            output_bundle_path, raise_exception = None, output_bundle_path
        if output_bundle_path is None:
            output_bundle_path = input_bundle_path
        tolerance = _tolerance_value(check_tolerance)
        try:
            if self.tract_path is None:
                from fastnnef.check import check_artefact

                check_artefact(nnef_path, input_bundle_path, output_bundle_path, tolerance)
            else:
                cmd = self.assert_io_cmd_str(nnef_path, input_bundle_path, output_bundle_path, tolerance)
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise T2NErrorIOPytorchTractNotISO(
                        f"{shlex.join(cmd)} exited with code {proc.returncode}:\n{proc.stderr}"
                    )
        except T2NErrorTract as err:  # a mismatch is one too (T2NErrorIOPytorchTractNotISO)
            if raise_exception:
                raise
            LOGGER.error("IO check failed: %s", err)
            return False
        return True

    def convert_onnx_to_nnef(self, onnx_path: Path, io_npz_path: Path, nnef_path: Path) -> bytes:
        """``tract <onnx> dump --nnef <nnef_path>`` (a binary only: tract's ONNX front end
        is not linked into fastnnef)."""
        return subprocess.check_output(
            [
                str(self._binary("convert_onnx_to_nnef")), str(onnx_path), "--nnef-tract-core",
                "--nnef-tract-pulse", "dump", "--input-from-bundle", str(io_npz_path),
                "--nnef", str(nnef_path),
            ],
            stderr=subprocess.STDOUT,
        )


class TractBinaryDownloader:
    """torch_to_nnef's tract downloader, without the download: it finds a tract binary in
    the reference's cache (``~/.cache/svc/tract/<version>/tract``) and raises
    ``T2NErrorTractDownload`` where the reference would fetch one."""

    def __init__(self, version: Union[str, SemanticVersion], auto_download: bool = True):
        self.version = as_version(version).to_str()
        self.extract_dir = DEFAULT_CACHE_DIR / self.version
        if auto_download and not self.tract_filepath.exists():
            self.dl_tract()

    @property
    def arch(self) -> str:
        """The tract release's target triple for this machine."""
        machine = platform.machine()
        cpu = {"x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(machine)
        system = {"linux": "unknown-linux-musl", "darwin": "apple-darwin"}.get(sys.platform)
        if cpu is None or system is None:
            raise T2NErrorNotImplemented(f"tract publishes no binary for {sys.platform} {machine}")
        return f"{cpu}-{system}"

    @property
    def archive_name(self) -> str:
        return f"tract-{self.arch}-{self.version}"

    @property
    def binary_url(self) -> str:
        return f"https://github.com/sonos/tract/releases/download/{self.version}/{self.archive_name}.tgz"

    @property
    def tract_filepath(self) -> Path:
        return self.extract_dir / "tract"

    def dl_tract(self) -> None:
        """Raises ``T2NErrorTractDownload``: fastnnef never downloads anything."""
        raise T2NErrorTractDownload(
            f"no tract binary at {self.tract_filepath}, and fastnnef never downloads one "
            f"(the reference would fetch {self.binary_url}): put a tract {self.version} binary "
            "there, pass specific_tract_binary_path, or check with the linked tract"
        )


def apply_dynamic_shape_in_nnef(dynamic_axes: DynamicAxes, nnef_graph: Any, tract_version: Any) -> List[str]:
    """Raises ``T2NErrorNotImplemented``: torch_to_nnef rewrites the inputs of a built graph
    here, but fastnnef derives every shape in the graph from the dynamic axes while building
    it, so marking inputs afterwards would leave the other shapes static."""
    raise T2NErrorNotImplemented(
        "apply_dynamic_shape_in_nnef: fastnnef applies dynamic axes while it builds the graph "
        "(so that every shape follows them); pass them to the target instead: "
        "TractNNEF(..., dynamic_axes={'input': {1: 'S'}}) or target.with_dynamic_axes(...)"
    )


def _raise_exception_from_env() -> bool:
    return bool(int(os.environ.get(T2N_CHECK_IO_RAISE_EXCEPTION, "1")))


def _existing(**paths: Path) -> None:
    for what, path in paths.items():
        if not Path(path).exists():
            raise T2NErrorNotFoundFile(f"{what} {str(path)!r} does not exist")


def assert_io(
    nnef_file_path: Path,
    tract_cli: TractCli,
    input_bundle_path: Path,
    output_bundle_path: Path,
    check_tolerance: TractCheckTolerance = TractCheckTolerance.EXACT,
) -> None:
    """Check an artefact on ``.npz`` bundles with ``tract_cli``; a mismatch raises
    ``T2NErrorIOPytorchTractNotISO``, or is only logged when the environment variable
    ``T2N_CHECK_IO_RAISE_EXCEPTION`` is ``0``."""
    _existing(nnef_file_path=nnef_file_path, input_bundle_path=input_bundle_path,
              output_bundle_path=output_bundle_path)
    if tract_cli.assert_io(nnef_file_path, input_bundle_path, output_bundle_path,
                           raise_exception=_raise_exception_from_env(), check_tolerance=check_tolerance):
        LOGGER.info("IO match between tract and PyTorch for %s", nnef_file_path)


def assert_io_and_debug_bundle(
    model_info: UnfoldModelInfo,
    nnef_file_path: Path,
    tract_cli: TractCli,
    input_bundle_path: Path,
    output_bundle_path: Path,
    debug_bundle_path: Optional[Path] = None,
    check_tolerance: TractCheckTolerance = TractCheckTolerance.EXACT,
) -> None:
    """``assert_io``, and on a mismatch a debug bundle at ``debug_bundle_path`` (fastnnef's
    layout: the artefact, the bundles, a report, versions and a rerun script; see
    docs/tract-check.md). The error names the model."""
    from fastnnef.check import check_io

    _existing(nnef_file_path=nnef_file_path, input_bundle_path=input_bundle_path,
              output_bundle_path=output_bundle_path)
    tolerance = _to_enum(TractCheckTolerance, check_tolerance, "check_tolerance").value
    with np.load(input_bundle_path) as ins, np.load(output_bundle_path) as outs:
        inputs, outputs = dict(ins), dict(outs)
    try:
        check_io(
            nnef_file_path, list(inputs.values()), list(outputs.values()), list(inputs), list(outputs),
            tolerance=tolerance, debug_bundle_path=debug_bundle_path, tract_binary_path=tract_cli.tract_path,
        )
    except T2NErrorIOPytorchTractNotISO as err:
        message = f"test with model: {model_info.model}\n{err}"
        if _raise_exception_from_env():
            raise T2NErrorIOPytorchTractNotISO(message) from err
        LOGGER.error("%s", message)
