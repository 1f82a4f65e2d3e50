"""Check an NNEF artefact with the tract linked into fastnnef, in-process.

``TractArtefact`` loads an artefact (directory, ``.tar``, ``.tgz`` or bytes) and runs it on
numpy arrays or CPU torch tensors. ``check_io`` compares its outputs with expected ones
(usually PyTorch's): floats by tract's ``--approx`` levels, with tract's exact rule, integer
and bool outputs exactly (a count or an index off by one is wrong at any level), and raises
``T2NErrorIOPytorchTractNotISO`` with a per-output report on a mismatch. ``check_artefact``
does the same from ``.npz`` files (it backs ``fastnnef check``). See docs/tract-check.md.

Example::

    art = TractArtefact.load("model.nnef.tgz")
    (y,) = art.run({"x": np.ones((1, 3), np.float32)})
    check_io("model.nnef.tgz", [x], [torch_y], ["x"], ["y"], tolerance="approximate")
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fastnnef import _native
from fastnnef._native import CompareReport
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorIoQuantity,
    T2NErrorNotFoundFile,
    T2NErrorTract,
)

if TYPE_CHECKING:
    import torch

    ArrayLike = np.ndarray | torch.Tensor
else:
    ArrayLike = Any

__all__ = ["TOLERANCES", "CompareReport", "TractArtefact", "TractCheckTolerance", "check_artefact", "check_io",
           "check_tolerance", "named_arrays", "to_numpy", "write_debug_bundle"]

class TractCheckTolerance(str, Enum):
    """How close tract's outputs must be to PyTorch's (tract's ``--approx`` levels, tract.md §5;
    the thresholds live in the Rust core, rust/tract_check.rs)."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    CLOSE = "close"
    VERY = "very"
    SUPER = "super"
    ULTRA = "ultra"


TOLERANCES = tuple(level.value for level in TractCheckTolerance)
"""tract's ``--approx`` levels; ``custom:ATOL,RTOL,OUTLIERS`` is also accepted."""

_CUSTOM = re.compile(r"^custom:[^,]+,[^,]+,[^,]+$")


def check_tolerance(tolerance: str) -> None:
    """Raise ``T2NErrorInvalidArgument`` unless ``tolerance`` is a level or ``custom:ATOL,RTOL,OUTLIERS``."""
    if tolerance not in TOLERANCES and not _CUSTOM.match(tolerance):
        raise T2NErrorInvalidArgument(
            f"unknown tolerance {tolerance!r}: use one of {', '.join(TOLERANCES)} "
            "or custom:ATOL,RTOL,OUTLIERS"
        )


def to_numpy(value: ArrayLike, what: str, half_as_f32: bool = False) -> np.ndarray:
    """A numpy view of ``value`` (no copy), except bf16 which numpy lacks: widened to f32
    exactly; with ``half_as_f32`` f16 is widened too (tract's IO bundles hold f32). Complex
    values become real arrays with a trailing (re, im) axis, as the exported graph holds them;
    torch-quantized ones their integer codes (a copy: quantized storage has no numpy view)."""
    if isinstance(value, np.ndarray):
        if np.iscomplexobj(value):
            return np.stack([value.real, value.imag], axis=-1)
        return value
    torch = sys.modules.get("torch")  # only a tensor if torch is already imported
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise T2NErrorInvalidArgument(
                f"{what} is on device {value.device}; move it to the CPU first (tensor.cpu())"
            )
        tensor = value.detach()
        if tensor.is_quantized:  # the integer codes, as tract holds a quantized tensor
            return tensor.int_repr().numpy()
        if tensor.dtype == torch.bfloat16 or half_as_f32 and tensor.dtype == torch.float16:
            tensor = tensor.to(torch.float32)  # every bf16 (and f16) value is an f32 value
        tensor = tensor.resolve_conj().resolve_neg()
        if tensor.is_complex():
            tensor = torch.view_as_real(tensor)
        return tensor.numpy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    raise T2NErrorInvalidArgument(
        f"{what} must be a numpy array or a CPU torch tensor, got {type(value).__name__}"
    )


class TractArtefact:
    """An NNEF artefact loaded by the linked tract, optimized and planned once.

    Use ``TractArtefact.load``; the native model is private.
    """

    def __init__(self, native: _native.TractModel, source: str) -> None:
        self._native = native
        self._source = source
        self._input_names = native.input_names()
        self._output_names = native.output_names()

    @classmethod
    def load(cls, source: str | os.PathLike | bytes, optimize: bool = True) -> TractArtefact:
        """Load a directory, ``.tar`` or ``.tgz`` path, or ``.tar``/``.tgz`` bytes.

        Raises T2NErrorTract with tract's error chain and the path.
        """
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(_native.TractModel.load_bytes(bytes(source), optimize), "<bytes>")
        path = os.fspath(source)
        return cls(_native.TractModel.load(path, optimize), path)

    @property
    def input_names(self) -> list[str]:
        """Input names, in the model's input order (order of the ``external`` statements)."""
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        """Output labels, in the graph's result order."""
        return list(self._output_names)

    @property
    def input_facts(self) -> list[tuple[str, list[int | str]]]:
        """(dtype, dims) per input; a symbolic dim is its expression string."""
        return self._native.input_facts()

    @property
    def output_facts(self) -> list[tuple[str, list[int | str]]]:
        """(dtype, dims) per output, after optimization."""
        return self._native.output_facts()

    @property
    def properties(self) -> dict[str, str]:
        """String entries of the ``tract_core_properties`` fragment."""
        return self._native.properties()

    def _ordered(self, inputs: Sequence[ArrayLike] | Mapping[str, ArrayLike]) -> list[ArrayLike]:
        names = self._input_names
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            extra = [k for k in inputs if k not in names]
            if missing or extra:
                raise T2NErrorInvalidArgument(
                    f"inputs of {self._source} are {names}; missing {missing}, unknown {extra}"
                )
            return [inputs[n] for n in names]
        if len(inputs) != len(names):
            raise T2NErrorInvalidArgument(
                f"{self._source} takes {len(names)} inputs {names}, {len(inputs)} given"
            )
        return list(inputs)

    def run(self, inputs: Sequence[ArrayLike] | Mapping[str, ArrayLike]) -> list[np.ndarray]:
        """Run on numpy arrays or CPU torch tensors (by name when a mapping, else in input order).

        Dtypes must equal the declared ones (T2NErrorInvalidArgument names the input, the
        expected and the given dtype); bf16 tensors count as f32. Symbolic dims are solved
        from the input shapes. The GIL is released while tract runs.
        """
        ordered = self._ordered(inputs)
        arrays = [to_numpy(v, f"input {n!r}") for n, v in zip(self._input_names, ordered)]
        return self._native.run(arrays)

    def __repr__(self) -> str:
        return f"TractArtefact({self._source!r}, inputs={self._input_names}, outputs={self._output_names})"


def _match(given: Sequence[str], wanted: Sequence[str]) -> list[int]:
    """Positions in ``given`` of each of ``wanted``; position order when the names differ."""
    if sorted(given) == sorted(wanted):
        return [list(given).index(n) for n in wanted]
    return list(range(len(wanted)))


def _float_cast_inputs(arrays: list[np.ndarray], facts: list[tuple[str, list]]) -> list[np.ndarray]:
    # tract's CLI check runs with --allow-float-casts: f32 data fed to an f16 input is cast.
    return [
        a.astype(np.float16) if a.dtype == np.float32 and dtype == "f16" else a
        for a, (dtype, _) in zip(arrays, facts)
    ]


def check_io(
    artefact: str | os.PathLike,
    inputs: Sequence[ArrayLike],
    expected_outputs: Sequence[ArrayLike],
    input_names: Sequence[str],
    output_names: Sequence[str],
    tolerance: str = "approximate",
    debug_bundle_path: os.PathLike | None = None,
) -> list[CompareReport]:
    """Run ``artefact`` on ``inputs`` with the linked tract and compare with ``expected_outputs``.

    Inputs are fed in the model's input order, matched by name (by position when the
    names differ); each expected output is compared with the model output of the same
    label by tract's rule at ``tolerance``, except integer and bool outputs, which must be
    equal (their report is at ``exact``): tract's relative tolerance would let large integers
    differ. Torch-quantized outputs are codes with a scale, compared by tract's rule
    like floats. bf16 tensors are compared as f32; f16 stay f16.
    Returns one report per output. Raises T2NErrorIOPytorchTractNotISO (message: every
    failing report) on a mismatch, after writing the debug bundle if ``debug_bundle_path``
    is given, and T2NErrorTract if tract cannot load or run the artefact.

    A tract binary's check (the reference's command line) is ``TractCli(path).check_io``.
    """
    ins, outs = named_arrays(inputs, expected_outputs, input_names, output_names, tolerance)
    quantized = frozenset(n for n, v in zip(output_names, expected_outputs) if getattr(v, "is_quantized", False))
    model = TractArtefact.load(artefact)
    return _check_loaded(model, Path(artefact), ins, outs, tolerance, debug_bundle_path, quantized)


def named_arrays(
    inputs: Sequence[ArrayLike],
    expected_outputs: Sequence[ArrayLike],
    input_names: Sequence[str],
    output_names: Sequence[str],
    tolerance: str,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``check_io``'s arguments checked (tolerance, one name per value) and keyed by name as
    numpy arrays: what the linked tract and a tract binary's check both start from."""
    check_tolerance(tolerance)
    if len(inputs) != len(input_names):
        raise T2NErrorIoQuantity(f"{len(inputs)} inputs but {len(input_names)} input names {list(input_names)}")
    if len(expected_outputs) != len(output_names):
        raise T2NErrorIoQuantity(
            f"{len(expected_outputs)} expected outputs but {len(output_names)} output names {list(output_names)}"
        )
    ins = {n: to_numpy(v, f"input {n!r}") for n, v in zip(input_names, inputs, strict=True)}
    outs = {n: to_numpy(v, f"expected output {n!r}") for n, v in zip(output_names, expected_outputs, strict=True)}
    return ins, outs


def _check_loaded(
    model: TractArtefact,
    artefact: Path,
    ins: dict[str, np.ndarray],
    outs: dict[str, np.ndarray],
    tolerance: str,
    debug_bundle_path: os.PathLike | None,
    quantized: frozenset[str] = frozenset(),
) -> list[CompareReport]:
    if all(name in model.input_names for name in model.output_names):
        raise T2NErrorTract(
            f"every output of {artefact} ({model.output_names}) is an input: there is nothing to check"
        )
    given_in = list(ins)
    if len(given_in) != len(model.input_names):
        raise T2NErrorIoQuantity(f"{artefact} takes inputs {model.input_names}, {len(given_in)} given: {given_in}")
    feed = [ins[given_in[i]] for i in _match(given_in, model.input_names)]
    feed = _float_cast_inputs(feed, model.input_facts)
    obtained = model.run(feed)
    got_by_label = dict(zip(model.output_names, obtained))
    given_out = list(outs)
    if sorted(given_out) == sorted(got_by_label) or set(given_out) <= set(got_by_label):
        pairs = [(n, outs[n], got_by_label[n]) for n in given_out]
    elif len(given_out) == len(obtained):
        pairs = [(n, outs[n], got) for n, got in zip(given_out, obtained)]
    else:
        raise T2NErrorIoQuantity(
            f"expected outputs {given_out} match neither the labels {model.output_names} of {artefact} nor their number"
        )
    reports, failing = [], []
    for n, exp, got in pairs:
        exact = n not in quantized and (_is_integral(exp) or _is_integral(got))
        report = _native.compare(exp, got, "exact" if exact else tolerance)
        reports.append(report)
        # tract's rule compares as f32, where integers above 2**24 may look equal.
        unequal = exact and report.ok and not np.array_equal(exp, got)
        if not report.ok or unequal:
            failing.append((n, f"{report}{_integer_difference(exp, got) if unequal else ''}"))
    if failing:
        text = "\n".join(f"output {n!r}: {r}" for n, r in failing)
        message = f"tract's outputs for {artefact} differ from the expected ones at tolerance {tolerance}:\n{text}"
        if debug_bundle_path is not None:
            full_report = "\n".join(f"output {n!r}: {r}" for (n, _, _), r in zip(pairs, reports))
            bundle = write_debug_bundle(
                Path(debug_bundle_path), artefact, ins, outs, {n: g for n, _, g in pairs}, full_report, tolerance
            )
            message += f"\ndebug bundle: {bundle}"
        raise T2NErrorIOPytorchTractNotISO(message)
    return reports


def _is_integral(array: np.ndarray) -> bool:
    return array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer)


def _integer_difference(expected: np.ndarray, got: np.ndarray) -> str:
    """The first differing element of two same-shape integer arrays (which f32 rounding hid)."""
    index = tuple(int(i) for i in np.argwhere(expected != got)[0])
    count = int(np.count_nonzero(expected != got))
    return (f"\n  but {count} integer values differ exactly: first at {list(index)}, "
            f"expected {expected[index]}, got {got[index]}")


def _load_npz(path: os.PathLike, what: str) -> dict[str, np.ndarray]:
    if not Path(path).is_file():
        raise T2NErrorNotFoundFile(f"{what} file {os.fspath(path)} does not exist")
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _by_names(arrays: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """Key ``arrays`` by ``names``: by name when they match, else by position (arr_0, arr_1, ...)."""
    if set(names) <= set(arrays):
        return {n: arrays[n] for n in names}
    keys = list(arrays)
    if all(re.fullmatch(r"arr_\d+", k) for k in keys):
        keys.sort(key=lambda k: int(k[4:]))
    if len(keys) != len(names):
        raise T2NErrorIoQuantity(f"npz keys {list(arrays)} match neither the names {names} nor their number")
    return {n: arrays[k] for n, k in zip(names, keys)}


def check_artefact(
    artefact: str | os.PathLike,
    inputs_npz: os.PathLike,
    outputs_npz: os.PathLike,
    tolerance: str = "approximate",
    debug_bundle_path: os.PathLike | None = None,
) -> list[CompareReport]:
    """``check_io`` from ``.npz`` files whose keys are the input / output names (or arr_0, ...)."""
    check_tolerance(tolerance)
    model = TractArtefact.load(artefact)
    ins = _by_names(_load_npz(inputs_npz, "inputs"), model.input_names)
    outs = _by_names(_load_npz(outputs_npz, "expected outputs"), model.output_names)
    return _check_loaded(model, Path(artefact), ins, outs, tolerance, debug_bundle_path)


def _free_path(path: Path) -> Path:
    """``path``, or ``path`` with ``_1``, ``_2``, ... before its suffix, whichever does not exist."""
    if not path.exists():
        return path
    name = path.name
    suffix = ".tar.gz" if name.endswith(".tar.gz") else ".tgz" if name.endswith(".tgz") else ""
    stem = name[: len(name) - len(suffix)]
    i = 1
    while (candidate := path.with_name(f"{stem}_{i}{suffix}")).exists():
        i += 1
    return candidate


def _versions() -> str:
    lines = [
        f"fastnnef {_native.__version__}",
        f"tract (linked) {_native.TRACT_VERSION}",
    ]
    try:
        import torch

        lines.append(f"torch {torch.__version__}")
    except ImportError:
        lines.append("torch not importable")
    lines.append(f"numpy {np.__version__}")
    lines.append(f"python {platform.python_version()} ({sys.executable})")
    # Not platform.platform(): it runs `uname -p` in a subprocess.
    lines.append(f"platform {platform.system()} {platform.release()} {platform.machine()}")
    return "\n".join(lines) + "\n"


def write_debug_bundle(
    path: Path,
    artefact: Path,
    ins: dict[str, np.ndarray],
    outs: dict[str, np.ndarray],
    obtained: dict[str, np.ndarray] | None,
    report: str,
    tolerance: str,
) -> Path:
    """Write everything needed to reproduce a failed check (``obtained``: tract's outputs, when
    known); returns the path written (``path``, or a free name beside it)."""
    archive = path.name.endswith((".tgz", ".tar.gz"))
    target = _free_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target so the final move is a rename.
    with tempfile.TemporaryDirectory(prefix="fastnnef-bundle-", dir=target.parent) as tmp:
        stem = target.name.removesuffix(".tar.gz").removesuffix(".tgz") if archive else target.name
        work = Path(tmp, stem)
        work.mkdir()
        copied = work / artefact.name
        if artefact.is_dir():
            shutil.copytree(artefact, copied)
        else:
            shutil.copy2(artefact, copied)
        # (numpy's stubs: a **dict could name savez's allow_pickle, hence the ignores)
        np.savez(work / "inputs.npz", **ins)  # type: ignore[arg-type]
        np.savez(work / "expected.npz", **outs)  # type: ignore[arg-type]
        if obtained is not None:
            np.savez(work / "obtained.npz", **obtained)  # type: ignore[arg-type]
        (work / "report.txt").write_text(report + "\n")
        (work / "versions.txt").write_text(_versions())
        rerun = (
            f"fastnnef check {shlex.quote(artefact.name)} --inputs inputs.npz --outputs expected.npz "
            f"--tolerance {shlex.quote(tolerance)}"
        )
        (work / "rerun.sh").write_text(f'#!/bin/sh\ncd "$(dirname "$0")" && {rerun}\n')
        (work / "rerun.sh").chmod(0o755)
        if archive:
            with tarfile.open(target, "w:gz") as tar:
                tar.add(work, arcname=stem)
        else:
            shutil.move(os.fspath(work), os.fspath(target))
    return target
