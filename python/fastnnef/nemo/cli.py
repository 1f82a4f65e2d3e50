"""``fastnnef-nemo`` (alias ``t2n_export_nemo``): a ``.nemo`` ASR checkpoint exported as one
NNEF artefact per subnet, each checked in tract (``export_nemo_asr_model``).

torch_to_nnef_nemo's ``--model-path``, ``--export-dir``, ``--skip-preprocessor`` and
``--only-subnet``; its ``--model-slug`` (a download) is not offered: fastnnef never
downloads, so save the model with NeMo's ``save_to`` and pass the file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from nemo.collections.asr.models import ASRModel

from fastnnef.cli_exit import end_process, run_command
from fastnnef.exceptions import T2NErrorCheckpoint, T2NErrorNotFoundFile
from fastnnef.nemo.export import export_nemo_asr_model
from fastnnef.nemo.subnets import SUBNET_NAMES

DESCRIPTION = (
    "Export a NeMo ASR model (.nemo file; CTC or transducer models such as FastConformer CTC or RNNT) to "
    "NNEF for tract: preprocessor, encoder and decoder (CTC) or decoder_joint (transducer) artefacts plus "
    "model_config.json, each run in tract and compared with PyTorch."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastnnef-nemo", description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--model-path", required=True, type=Path,
                        help="the .nemo file (NeMo's save_to); its weights are read with torch's safe loader")
    parser.add_argument("--export-dir", required=True, type=Path,
                        help="directory to create (absent or empty): one .nnef.tgz per subnet and model_config.json")
    parser.add_argument("--skip-preprocessor", action="store_true",
                        help="leave the waveform -> features preprocessor out")
    parser.add_argument("--only-subnet", nargs="+", choices=SUBNET_NAMES, metavar="NAME",
                        help=f"export only these subnets ({', '.join(SUBNET_NAMES)}; the model's own)")
    parser.add_argument("--compression-level", type=int, default=0, choices=range(10), metavar="0..9",
                        help="gzip level of the archives (0: stored blocks, fastest)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each export stage")
    return parser


def load_nemo_file(path: Path) -> ASRModel:
    """The ASR model in a ``.nemo`` file, on the CPU."""
    if not path.is_file():
        raise T2NErrorNotFoundFile(f"--model-path {path}: no such file (a .nemo file written by NeMo's save_to)")
    try:
        return ASRModel.restore_from(str(path), map_location="cpu")
    except Exception as err:  # NeMo raises many kinds for a file it cannot read
        raise T2NErrorCheckpoint(f"--model-path {path}: NeMo could not restore it: {err}") from err


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")

    def export() -> int:
        model = load_nemo_file(args.model_path)
        report = export_nemo_asr_model(
            model, args.export_dir, skip_preprocessor=args.skip_preprocessor, only_subnets=args.only_subnet,
            compression_level=args.compression_level,
        )
        print(report.summary())
        return 0

    return run_command("fastnnef-nemo", export)


def script() -> NoReturn:
    """The console script: ``main`` on the command line, the process ended by ``end_process``."""
    end_process(main())


if __name__ == "__main__":
    script()
