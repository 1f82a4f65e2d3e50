"""``fastnnef-multimodal`` (alias ``t2n_export_multimodal_to_tract``): the LLM command
line's flags (``llm/cli.py``, one parser) for ``dump_multimodal``. Flags that do not apply
to a multimodal export are accepted and ignored with the reason (``NOT_APPLICABLE``), as
the LLM command line does."""

from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Sequence
from typing import NoReturn

from fastnnef.cli_exit import end_process, run_command
from fastnnef.llm import cli as llm_cli
from fastnnef.llm.progress import Progress
from fastnnef.log import get_logger
from fastnnef.multimodal.api import MultimodalExportReport, dump_multimodal
from fastnnef.multimodal.families import supported_list

PROG = "fastnnef-multimodal"
NOT_APPLICABLE = {
    **llm_cli.NOT_APPLICABLE,
    "export_dir_struct": "the layout is the reference's multimodal one (decoder/, one folder per encoder, "
                         "multimodal.json)",
    "sample_generation_total_size": "the test prompt is the family's sample prompt with two sample images",
}

DESCRIPTION = (
    "Export a Hugging Face vision-language checkpoint to NNEF for tract: one decoder "
    "artefact (KV cache, modality embeddings as inputs) and one encoder artefact per modality, tied by "
    "multimodal.json, verified end to end in tract (image prompt -> encoder -> decoder -> 16 greedy tokens "
    f"equal to Hugging Face's). Supported model types: {supported_list()}."
)


def build_parser(compression_choices: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = llm_cli.build_parser(compression_choices)
    parser.prog = PROG
    parser.description = DESCRIPTION
    for action in parser._actions:
        if action.dest in NOT_APPLICABLE and action.dest not in llm_cli.NOT_APPLICABLE:
            action.help = f"accepted, not applicable: {NOT_APPLICABLE[action.dest]}"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parsed = llm_cli.parse_arguments(build_parser, PROG, argv)
    if isinstance(parsed, int):
        return parsed
    parser, args = parsed
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for dest, reason in NOT_APPLICABLE.items():
        if getattr(args, dest) != parser.get_default(dest):
            get_logger("fastnnef.multimodal").info("--%s ignored: %s", dest.replace("_", "-"), reason)

    def export() -> int:
        report = _run(args)
        print(report.summary())
        return 0

    return run_command(PROG, export)


def script() -> NoReturn:
    """The console script: ``main`` on the command line, the process ended by ``end_process``."""
    end_process(main())


def _run(args: argparse.Namespace) -> MultimodalExportReport:
    """``dump_multimodal`` from the parsed flags, libraries quiet unless -v (restored after)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():
        if not args.verbose:
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        try:
            return dump_multimodal(
                args.export_dirpath, model_slug=args.model_slug, local_dir=args.local_dir,
                force_module_dtype=args.force_module_dtype, compression_method=args.compression_method,
                compression_registry=args.compression_registry, naming_scheme=args.naming_scheme,
                num_logits_to_keep=args.num_logits_to_keep,
                dump_with_tokenizer_and_conf=args.dump_with_tokenizer_and_conf,
                ignore_already_exist_dir=args.ignore_already_exist_dir, force_f32_attention=args.force_f32_attention,
                force_f32_linear_accumulator=args.force_f32_linear_accumulator,
                force_f32_normalization=args.force_f32_normalization, reify_sdpa_operator=args.reify_sdpa_operator,
                attn_implementation=args.attn_implementation, tract_check_io_tolerance=args.tract_check_io_tolerance,
                test_display_token_gens=args.test_display_token_gens, no_verify=args.no_verify,
                trust_remote_code=args.trust_remote_code, tract_specific_path=args.tract_specific_path,
                tract_specific_version=args.tract_specific_version, force_inputs_dtype=args.force_inputs_dtype,
                revision=args.revision, hf_download_n_retries=args.hf_download_n_retries, front_end=args.front_end,
                progress=Progress.for_terminal(),
            )
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()


if __name__ == "__main__":
    script()
