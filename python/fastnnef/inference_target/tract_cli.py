"""``TractCli``: a tract command line (torch_to_nnef's ``inference_target.tract.TractCli``,
re-exported there), over a tract binary or over the tract linked into fastnnef.

The flags a binary gets follow its version through the version-gate table
(``inference_target/capabilities.py``): one ``--nnef-<registry>`` per tract registry the
version has, the bundle flag's form, the ``--approx`` levels it knows. Nothing here
compares version strings.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastnnef import _native
from fastnnef.check import (
    ArrayLike,
    CompareReport,
    TractCheckTolerance,
    check_artefact,
    check_io,
    named_arrays,
    write_debug_bundle,
)
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorNotFoundFile,
    T2NErrorNotImplemented,
    T2NErrorTract,
    T2NErrorTractDownload,
)
from fastnnef.inference_target.base import as_enum
from fastnnef.inference_target.capabilities import REGISTRY_GATES, TargetCapabilities
from fastnnef.log import get_logger
from fastnnef.utils import SemanticVersion

__all__ = ["CUSTOM_TOLERANCE_PREFIX", "TractCli"]

LOGGER = get_logger(__name__)

CUSTOM_TOLERANCE_PREFIX = "custom:"  # custom:ATOL,RTOL,OUTLIERS, tract's --approx-custom


def _tolerance_value(tolerance: Any) -> str:
    """A tolerance level's name, or a ``custom:ATOL,RTOL,OUTLIERS`` string as given."""
    if isinstance(tolerance, str) and tolerance.startswith(CUSTOM_TOLERANCE_PREFIX):
        return tolerance
    return str(as_enum(TractCheckTolerance, tolerance, "check_tolerance").value)


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

    def __init__(self, tract_path: Path | None):
        if tract_path is not None:
            tract_path = Path(tract_path)
            if not tract_path.exists():
                raise T2NErrorNotFoundFile(
                    f"tract binary {str(tract_path)!r} does not exist: give the path of a tract "
                    "CLI, or use TractCli.linked() for the tract linked into fastnnef"
                )
        self.tract_path: Path | None = tract_path

    @classmethod
    def linked(cls) -> TractCli:
        """The tract linked into fastnnef, with a command line's surface."""
        return cls(None)

    @classmethod
    def download(cls, version: str | SemanticVersion) -> TractCli:
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

    @functools.cached_property
    def _capabilities(self) -> TargetCapabilities:
        """What this tract version has (its registries and version gates)."""
        return TargetCapabilities.tract(self.version)

    def _run_cmd_prefix(self, nnef_path: Path) -> list[str]:
        """``tract <model>`` with one ``--nnef-<registry>`` flag per tract registry this
        version has (``REGISTRY_GATES``, in its order), then ``-O``."""
        registries = self._capabilities.registries
        flags = [f"--nnef-{name.replace('_', '-')}" for name in REGISTRY_GATES if name in registries]
        return [str(self._binary("commands")), str(nnef_path), *flags, "-O"]

    def assert_io_cmd_str(
        self,
        nnef_path: Path,
        input_bundle_path: Path,
        output_bundle_path: Path,
        check_tolerance: TractCheckTolerance | str = TractCheckTolerance.EXACT,
    ) -> list[str]:
        """The command that checks ``nnef_path`` on the input bundle against the output
        bundle at ``check_tolerance`` (``fastnnef check ...`` for the linked tract)."""
        tolerance = _tolerance_value(check_tolerance)
        if self.tract_path is None:
            return [
                "fastnnef", "check", str(nnef_path), "--inputs", str(input_bundle_path),
                "--outputs", str(output_bundle_path), "--tolerance", tolerance,
            ]
        cmd = self._run_cmd_prefix(nnef_path)
        if self._capabilities.supports("cli_input_from_bundle"):
            cmd += ["run", "--input-from-bundle", str(input_bundle_path)]
        else:
            cmd += ["--input-bundle", str(input_bundle_path), "run"]
        cmd += ["--assert-output-bundle", str(output_bundle_path), "--allow-float-casts"]
        return cmd + self._approx_flags(tolerance)

    def _approx_flags(self, tolerance: str) -> list[str]:
        """The tolerance flags this version knows: none before ``approx_levels`` (its check
        is exact); without ``approx_very_ultra``, ``super`` for ``very`` and ``ultra`` (as
        the reference does)."""
        if not self._capabilities.supports("approx_levels"):
            return []
        if tolerance.startswith(CUSTOM_TOLERANCE_PREFIX):
            return ["--approx-custom", tolerance[len(CUSTOM_TOLERANCE_PREFIX):]]
        if not self._capabilities.supports("approx_very_ultra") and tolerance in ("very", "ultra"):
            tolerance = "super"
        return ["--approx", tolerance]

    def run_save_outputs_cmd_str(
        self, nnef_path: Path, input_bundle_path: Path, output_bundle_path: Path
    ) -> list[str]:
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
        output_bundle_path: Path | bool | None = None,
        raise_exception: bool = True,
        check_tolerance: TractCheckTolerance | str = TractCheckTolerance.EXACT,
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
            raise_exception = output_bundle_path
            output_bundle_path = None
        if output_bundle_path is None:
            output_bundle_path = input_bundle_path
        tolerance = _tolerance_value(check_tolerance)
        try:
            if self.tract_path is None:
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

    def check_io(
        self,
        artefact: str | os.PathLike,
        inputs: Sequence[ArrayLike],
        expected_outputs: Sequence[ArrayLike],
        input_names: Sequence[str],
        output_names: Sequence[str],
        tolerance: str = "approximate",
        debug_bundle_path: os.PathLike | None = None,
    ) -> list[CompareReport]:
        """``fastnnef.check.check_io`` with this tract: the linked one in-process (its
        reports returned), or a binary with the reference's command line, decided by its
        exit code (no reports: ``[]``). A binary's failure raises
        ``T2NErrorIOPytorchTractNotISO`` with the command, exit code and stderr, after
        writing the debug bundle if ``debug_bundle_path`` is given."""
        if self.tract_path is None:
            return check_io(artefact, inputs, expected_outputs, input_names, output_names, tolerance,
                            debug_bundle_path)
        ins, outs = named_arrays(inputs, expected_outputs, input_names, output_names, tolerance)
        path = Path(artefact)
        # The one place fastnnef starts a process: the user asked for a specific tract binary.
        with tempfile.TemporaryDirectory(prefix="fastnnef-check-") as tmp:
            in_npz, out_npz = Path(tmp, "inputs.npz"), Path(tmp, "outputs.npz")
            # (numpy's stubs: a **dict could name savez's allow_pickle, hence the ignores)
            np.savez(in_npz, **ins)  # type: ignore[arg-type]
            np.savez(out_npz, **outs)  # type: ignore[arg-type]
            cmd = self.assert_io_cmd_str(path, in_npz, out_npz, tolerance)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return []
        report = f"command: {shlex.join(cmd)}\nexit code: {proc.returncode}\nstderr:\n{proc.stderr}"
        message = f"tract CLI {self.tract_path} rejected {path} at tolerance {tolerance}:\n{report}"
        if debug_bundle_path is not None:
            bundle = write_debug_bundle(Path(debug_bundle_path), path, ins, outs, None, report, tolerance)
            message += f"\ndebug bundle: {bundle}"
        raise T2NErrorIOPytorchTractNotISO(message)

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
