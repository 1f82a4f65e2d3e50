"""``fastnnef-peft`` (alias ``t2n_export_peft_to_nnef``): torch_to_nnef_llm's PEFT command
line, with its flags and defaults, plus ``--compression-level`` and ``--allow-pickle``.

``export_peft`` is importable from here too, as from the reference's ``peft/cli.py``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import NoReturn

from fastnnef.cli_exit import end_process, run_command
from fastnnef.peft.export import ARCHIVE_SUFFIX, export_peft
from fastnnef.peft.mapping import (
    CHECK_MAP_TENSOR_NAME,
    DEFAULT_METHOD_TYPE,
    MAP_TENSOR_NAME,
    NAME_PLACEHOLDER,
    PATTERN_LORA,
)

__all__ = ["build_parser", "export_peft", "main"]

DESCRIPTION = (
    "Export the PEFT matrices (LoRA, ...) of a .safetensors, .pt, .pth or .bin file to NNEF: one .dat tensor per "
    f"matrix and peft_mapping.json (method + base weight -> matrices) in a {ARCHIVE_SUFFIX} archive, to apply "
    "to a base artefact at load time."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastnnef-peft", description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("-r", "--read-filepath", required=True,
                        help="file holding the PEFT tensors (.safetensors, .pt, .pth, .bin)")
    parser.add_argument("-p", "--patterns", nargs="+", default=PATTERN_LORA,
                        help=f"one regex per matrix kind, in order (LoRA: A then B), each with a {NAME_PLACEHOLDER} "
                             "group capturing the adapted module's name")
    parser.add_argument("--method", default=DEFAULT_METHOD_TYPE, help="PEFT method name written in peft_mapping.json")
    parser.add_argument("-c", "--check-map-name", default=CHECK_MAP_TENSOR_NAME,
                        help="base weight the file must also hold, per {name} ('' for an adapter-only file)")
    parser.add_argument("-m", "--map-name", default=MAP_TENSOR_NAME,
                        help="name of the adapted weight in the base model (and its artefact), per {name}")
    parser.add_argument("-o", "--output-archive", required=True,
                        help=f"the archive to create, ending in {ARCHIVE_SUFFIX}")
    parser.add_argument("--compression-level", type=int, default=0, choices=range(10), metavar="0..9",
                        help="gzip level of the archive (0: stored blocks, fastest)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="run the pickle of a .pt/.bin file the safe loader refuses (trusted files only)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each tensor written")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")

    def export() -> int:
        report = export_peft(
            args.read_filepath, args.output_archive, patterns=args.patterns, map_name=args.map_name,
            check_map_name=args.check_map_name, method_name=args.method,
            weights_only=not args.allow_pickle, compression_level=args.compression_level,
        )
        print(report.summary())
        return 0

    return run_command("fastnnef-peft", export)


def script() -> NoReturn:
    """The console script: ``main`` on the command line, the process ended by ``end_process``."""
    end_process(main())


if __name__ == "__main__":
    script()
