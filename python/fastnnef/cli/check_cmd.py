"""``fastnnef check ARTEFACT --inputs in.npz --outputs expected.npz``: run an artefact in the
linked tract and compare its outputs; exit 0 on a match, 1 on a mismatch, 2 when the
artefact or the files cannot be used."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fastnnef.check import TOLERANCES, TractCheckTolerance, check_artefact
from fastnnef.exceptions import T2NError, T2NErrorIOPytorchTractNotISO

EXIT_MISMATCH = 1
EXIT_ERROR = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``check`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "check",
        help="run an NNEF artefact in the linked tract and compare with expected outputs",
        description=(
            "Run ARTEFACT (directory, .tar or .tgz) with the tract linked into fastnnef on the "
            "inputs of an .npz and compare with the expected outputs of another .npz by tract's "
            "--approx rule. npz keys are input/output names (or arr_0, arr_1, ... by position). "
            f"Exit codes: 0 match, {EXIT_MISMATCH} mismatch (report on stderr), {EXIT_ERROR} other error."
        ),
    )
    parser.add_argument("artefact", help="NNEF directory, .tar or .tgz")
    parser.add_argument("--inputs", required=True, help=".npz of the inputs")
    parser.add_argument("--outputs", required=True, help=".npz of the expected outputs")
    parser.add_argument(
        "--tolerance",
        default=TractCheckTolerance.APPROXIMATE.value,
        help=f"one of {', '.join(TOLERANCES)} or custom:ATOL,RTOL,OUTLIERS (default: approximate)",
    )
    parser.add_argument("--debug-bundle", default=None, help="on failure, write a debug bundle here (dir or .tgz)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the check described by ``args``; return the process exit code."""
    try:
        reports = check_artefact(
            args.artefact, args.inputs, args.outputs, tolerance=args.tolerance, debug_bundle_path=args.debug_bundle
        )
    except T2NErrorIOPytorchTractNotISO as err:
        print(err, file=sys.stderr)
        return EXIT_MISMATCH
    except T2NError as err:
        print(f"fastnnef check: {err}", file=sys.stderr)
        return EXIT_ERROR
    for report in reports:
        print(report)
    return 0
