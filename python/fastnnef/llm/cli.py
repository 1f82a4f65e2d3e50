"""``fastnnef-llm`` (alias ``t2n_export_llm_to_tract``): torch_to_nnef_llm's command line.
Flags keep the reference's names; their choices come from ``options.py``, the naming
schemes, tract's tolerances and the compression registry. ``-s`` takes the model from the
Hugging Face cache or downloads it there (``hub.py``); ``--revision`` is fastnnef's own.

Every reference flag is accepted: with its effect, or, where it does not apply
(``NOT_APPLICABLE``: device placement, PEFT and natively quantized checkpoints, the
experts implementation), accepted and ignored with the reason in ``--help`` (and in the
log with -v). ``tests/llm/test_cli_parity.py`` holds the reference's flags and checks each.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from fastnnef.cli_exit import end_process, run_command
from fastnnef.compress import DEFAULT_COMPRESSION_REGISTRY, dynamic_load_registry
from fastnnef.exceptions import T2NError
from fastnnef.export_options import FRONT_ENDS
from fastnnef.inference_target.tract import TractCheckTolerance
from fastnnef.llm.api import LLM_NAMING_SCHEME, LLMExportReport, dump_llm
from fastnnef.llm.architectures import tested_list
from fastnnef.llm.hub import DEFAULT_HF_DOWNLOAD_N_RETRIES
from fastnnef.llm.options import AttnImplementation, DtypeStr, ExportDirStruct
from fastnnef.llm.progress import Progress
from fastnnef.log import get_logger
from fastnnef.torch_graph.ir_naming import VariableNamingScheme

REFERENCE_PACKAGE = "torch_to_nnef."
# Reference flags accepted without effect: dest -> why it does not apply.
NOT_APPLICABLE = {
    "device_map": "the model runs on the CPU with its weights streamed from the checkpoint, which bounds memory "
                  "as disk offload would",
    "merge_peft": "PEFT adapters are not loaded: merge them into the checkpoint first",
    "upcast_quant": "natively quantized checkpoints are refused at load: dequantize them first",
    "transformers_experts_implementation":
        "the exporter chooses the traceable form of mixture-of-experts blocks itself",
}

DESCRIPTION = (
    "Export a Hugging Face causal LM with its KV cache to NNEF for tract, and verify it "
    "by greedy generation in tract. Any model type transformers builds is attempted and verification decides; "
    f"tested model types: {tested_list()}."
)


def _values(enum_cls: type) -> list[str]:
    return [m.value for m in enum_cls]  # type: ignore[attr-defined]


def _logits_to_keep(value: str) -> int:
    if value == "dynamic":
        raise argparse.ArgumentTypeError(
            "'dynamic' (logits_to_keep as a runtime input) is not supported yet: give a number of positions "
            "(1 for generation, 0 for every position)"
        )
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None


def build_parser(compression_choices: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastnnef-llm", description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    source = parser.add_argument_group("model source (exactly one)")
    source.add_argument("-s", "--model-slug",
                        help="a Hugging Face model id (org/name): from the hub cache, else downloaded into it "
                             "(HF_HUB_CACHE/HF_HOME, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE are honoured)")
    source.add_argument("--revision", help="with -s: the branch, tag or commit to export (default: main)")
    source.add_argument("-d", "--local-dir", help="a checkpoint directory (config.json + safetensors)")
    source.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False,
                        help="run model code shipped with the checkpoint (auto_map); off by default")
    source.add_argument("-mp", "--merge-peft", action="store_true",
                        help=f"accepted, not applicable: {NOT_APPLICABLE['merge_peft']}")
    source.add_argument("--hf-download-n-retries", type=int, default=DEFAULT_HF_DOWNLOAD_N_RETRIES,
                        help="retries of a download on HTTP 429 and 5xx, with exponential backoff (0: none)")
    source.add_argument("--upcast-quant", help=f"accepted, not applicable: {NOT_APPLICABLE['upcast_quant']}")

    export = parser.add_argument_group("export")
    export.add_argument("-e", "--export-dirpath", required=True, help="the directory to create")
    export.add_argument("-dt", "--force-module-dtype", choices=_values(DtypeStr),
                        help="load the model in this dtype (default: the checkpoint's; bf16 runs in f32 in tract)")
    export.add_argument("-idt", "--force-inputs-dtype", choices=_values(DtypeStr),
                        help="the cache inputs' dtype: accepted when it is the model's (-dt chooses it; tract "
                             "has no bf16, so a bf16 model's inputs are f32)")
    export.add_argument("--device-map", help=f"accepted, not applicable: {NOT_APPLICABLE['device_map']}")
    export.add_argument("-c", "--compression-method", choices=compression_choices,
                        help="compress the weights with this registry entry (Q4_0)")
    export.add_argument("--compression-registry", default=DEFAULT_COMPRESSION_REGISTRY,
                        help="the registry of compression methods, as package.module.NAME (torch_to_nnef.X "
                             "reads as fastnnef.X)")
    export.add_argument("-n", "--naming-scheme", default=LLM_NAMING_SCHEME, choices=_values(VariableNamingScheme),
                        help="how graph values are named")
    export.add_argument("--num-logits-to-keep", type=_logits_to_keep, default=1,
                        help="logits of the last N positions (0: every position)")
    export.add_argument("--export-dir-struct", default=ExportDirStruct.DEEP.value, choices=_values(ExportDirStruct),
                        help="deep: model/ and tokenizer/ subdirectories; flat: every file at the root")
    export.add_argument("-dwtac", "--dump-with-tokenizer-and-conf", action="store_true",
                        help="also write config.json and the tokenizer's files")
    export.add_argument("-iaed", "--ignore-already-exist-dir", action="store_true",
                        help="write into an existing export directory")

    numerics = parser.add_argument_group("numerics")
    numerics.add_argument("-f32-attn", "--force-f32-attention", action="store_true",
                          help="f16 models: attention internals in f32 (reified SDPA)")
    numerics.add_argument("-f32-lin-acc", "--force-f32-linear-accumulator", action="store_true",
                          help="f16 models: accumulate linear layers in f32")
    numerics.add_argument("-f32-norm", "--force-f32-normalization", action="store_true",
                          help="f16 models: normalization layers in f32")
    numerics.add_argument("--reify-sdpa-operator", action="store_true",
                          help="export attention as tract_transformers_sdpa (implies sdpa attention)")
    numerics.add_argument("--transformers-attn-implementation", dest="attn_implementation",
                          default=AttnImplementation.AUTO.value, choices=_values(AttnImplementation),
                          help="attention implementation at load (auto: eager, or sdpa with --reify-sdpa-operator)")
    numerics.add_argument("--transformers-experts-implementation",
                          help=f"accepted, not applicable: {NOT_APPLICABLE['transformers_experts_implementation']}")

    verify = parser.add_argument_group("verification")
    verify.add_argument("-tt", "--tract-check-io-tolerance", default=TractCheckTolerance.APPROXIMATE.value,
                        choices=_values(TractCheckTolerance), help="tolerance of the bundle checks in tract")
    verify.add_argument("-td", "--test-display-token-gens", action="store_true",
                        help="print the greedy continuations of PyTorch and tract")
    verify.add_argument("-sgts", "--sample-generation-total-size", type=int, default=6,
                        help="tokens of the test modes' prompt (and of the generation prompt)")
    verify.add_argument("-nv", "--no-verify", action="store_true", help="skip every check in tract")
    binary = verify.add_mutually_exclusive_group()
    binary.add_argument("--tract-specific-path",
                        help="a tract binary that also checks every test bundle, with the flags its version knows; "
                             "the artefact targets its version")
    binary.add_argument("--tract-specific-version",
                        help="the tract version the artefact targets (never downloaded: verification runs in the "
                             "tract linked into fastnnef)")
    parser.add_argument("--front-end", default="auto", choices=FRONT_ENDS,
                        help="how the model is captured: torch.export (export), torch.jit.trace (jit), or auto: "
                             "torch.export, falling back to the tracer where it cannot capture the model")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    return parser


def registry_path(path: str) -> str:
    """A ``--compression-registry`` path, with the reference's package read as fastnnef
    (``torch_to_nnef.compress.DEFAULT_COMPRESSION``, the reference's default, is
    ``fastnnef.compress.DEFAULT_COMPRESSION``: fastnnef serves the reference's module paths)."""
    return "fastnnef." + path.removeprefix(REFERENCE_PACKAGE) if path.startswith(REFERENCE_PACKAGE) else path


def parse_arguments(
    build: Callable[..., argparse.ArgumentParser], prog: str, argv: Sequence[str] | None
) -> tuple[argparse.ArgumentParser, argparse.Namespace] | int:
    """The parser ``build`` makes and the parsed ``argv`` of an LLM-style command line
    (fastnnef-llm, fastnnef-multimodal), or exit code 2 after printing the error: -c's
    choices depend on --compression-registry, so that one is read first; exactly one of
    -s/-d must name the checkpoint."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre, _ = build().parse_known_args([a for a in argv if a not in ("-h", "--help")] + ["-e", "_"])
    try:
        choices = sorted(dynamic_load_registry(registry_path(pre.compression_registry)))
    except T2NError as err:
        print(f"{prog}: error: --compression-registry: {err}", file=sys.stderr)
        return 2
    parser = build(choices)
    args = parser.parse_args(argv)
    args.compression_registry = registry_path(args.compression_registry)
    if (args.model_slug is None) == (args.local_dir is None):
        print(f"{prog}: error: give exactly one of -s/--model-slug and -d/--local-dir", file=sys.stderr)
        return 2
    return parser, args


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_arguments(build_parser, "fastnnef-llm", argv)
    if isinstance(parsed, int):
        return parsed
    parser, args = parsed
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for dest, reason in NOT_APPLICABLE.items():
        if getattr(args, dest) != parser.get_default(dest):
            get_logger("fastnnef.llm").info("--%s ignored: %s", dest.replace("_", "-"), reason)

    def export() -> int:
        report = _run(args)
        print(report.summary())
        return 0

    return run_command("fastnnef-llm", export)


def script() -> NoReturn:
    """The console script: ``main`` on the command line, the process ended by ``end_process``."""
    end_process(main())


def _run(args: argparse.Namespace) -> LLMExportReport:
    """``dump_llm`` from the parsed flags, with quiet libraries unless -v (restored after:
    ``main`` may run inside a larger process, such as a test session)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():
        if not args.verbose:
            # No notice of transformers' own deprecations on the exported path (torch's are
            # shown: the default front end meets none); fastnnef shows progress.
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        try:
            return dump_llm(
                args.export_dirpath, model_slug=args.model_slug, local_dir=args.local_dir,
                force_module_dtype=args.force_module_dtype, compression_method=args.compression_method,
                compression_registry=args.compression_registry, naming_scheme=args.naming_scheme,
                num_logits_to_keep=args.num_logits_to_keep, export_dir_struct=args.export_dir_struct,
                dump_with_tokenizer_and_conf=args.dump_with_tokenizer_and_conf,
                ignore_already_exist_dir=args.ignore_already_exist_dir, force_f32_attention=args.force_f32_attention,
                force_f32_linear_accumulator=args.force_f32_linear_accumulator,
                force_f32_normalization=args.force_f32_normalization, reify_sdpa_operator=args.reify_sdpa_operator,
                attn_implementation=args.attn_implementation, tract_check_io_tolerance=args.tract_check_io_tolerance,
                test_display_token_gens=args.test_display_token_gens,
                sample_generation_total_size=args.sample_generation_total_size, no_verify=args.no_verify,
                trust_remote_code=args.trust_remote_code, tract_specific_path=args.tract_specific_path,
                tract_specific_version=args.tract_specific_version, force_inputs_dtype=args.force_inputs_dtype,
                revision=args.revision, hf_download_n_retries=args.hf_download_n_retries,
                progress=Progress.for_terminal(), front_end=args.front_end,
            )
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()


if __name__ == "__main__":
    script()
