"""The ``fastnnef`` command line: ``demo``, ``export``, ``check``, ``inspect``, ``ops``.

Each subcommand lives in its own module with ``add_parser(subparsers)``, which sets
``run`` (a function ``args -> exit code``) as the parser default.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import NoReturn

from fastnnef.cli_exit import end_process, run_command

SUBCOMMANDS = ("demo_cmd", "export_cmd", "check_cmd", "inspect_cmd", "ops_cmd")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="fastnnef", description="Export PyTorch models to NNEF for tract, checked in-process."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"fastnnef.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    return run_command("fastnnef", lambda: args.run(args))


def script() -> NoReturn:
    """The console script: ``main`` on the command line, the process ended by ``end_process``."""
    end_process(main())


if __name__ == "__main__":
    script()
