"""Minimal ``fastnnef`` command line (placeholder: the lead's version replaces this file)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from fastnnef.cli import check_cmd


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fastnnef")
    subparsers = parser.add_subparsers(dest="command", required=True)
    check_cmd.add_parser(subparsers)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
