"""IO bundles (torch_to_nnef's names, re-exported at ``inference_target.tract``): a
model's inputs and outputs saved as tract ``.npz`` bundles (``build_io``), and an artefact
checked on such bundles (``assert_io``, ``assert_io_and_debug_bundle``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

from fastnnef.check import TractCheckTolerance, check_io, to_numpy
from fastnnef.exceptions import T2NErrorIOPytorchTractNotISO, T2NErrorNotFoundFile, T2NErrorNotImplemented
from fastnnef.inference_target.base import UnfoldModelInfo, as_enum
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.log import get_logger
from fastnnef.torch_graph.trace import eval_mode, normalize_args

# expand_names: the one rule for naming flattened IO (shared with the export).
from fastnnef.torch_graph.trace import expand_names as expand_io_names

__all__ = ["T2N_CHECK_IO_RAISE_EXCEPTION", "assert_io", "assert_io_and_debug_bundle", "build_io"]

LOGGER = get_logger(__name__)

T2N_CHECK_IO_RAISE_EXCEPTION = "T2N_CHECK_IO_RAISE_EXCEPTION"


def build_io(
    model: nn.Module,
    test_input: Any,
    input_bundle_path: Path | None = None,
    output_bundle_path: Path | None = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    *,
    io_npz_path: Path | None = None,
) -> tuple[list[str], list[str]]:
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
            arrays = {n: to_numpy(t, f"{n!r}", half_as_f32=True) for n, t in zip(names, tensors)}
            # numpy's stubs: a **dict could name savez's allow_pickle.
            np.savez(path, **arrays)  # type: ignore[arg-type]
    return input_names, output_names


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
    debug_bundle_path: Path | None = None,
    check_tolerance: TractCheckTolerance = TractCheckTolerance.EXACT,
) -> None:
    """``assert_io``, and on a mismatch a debug bundle at ``debug_bundle_path`` (fastnnef's
    layout: the artefact, the bundles, a report, versions and a rerun script; see
    docs/tract-check.md). The error names the model."""
    _existing(nnef_file_path=nnef_file_path, input_bundle_path=input_bundle_path,
              output_bundle_path=output_bundle_path)
    tolerance = as_enum(TractCheckTolerance, check_tolerance, "check_tolerance").value
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
