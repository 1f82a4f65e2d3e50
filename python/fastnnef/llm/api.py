"""``dump_llm``: export a Hugging Face causal LM with its KV cache for tract, write the
reference's test bundles, verify by generation in tract, and report.

The export directory is built under a temporary name beside the target and moved into
place only when everything succeeded (verification included): an error leaves nothing
behind, and an existing directory is only written into with ``ignore_already_exist_dir``.

Steps: the keywords checked once (``options.LLMExportOptions``) -> load (``load.py``) ->
optional compression (the ``fastnnef.compress`` registry) -> PyTorch runs of the wrapper
(``bundles.py``) and the artefact's writing, at the same time, once the wrapper is traced
on the example's sizes (``phases.prepare_decoder``: the core's export with the reference's
dynamic axes and assertions; ``finish_export`` writes) -> verify in tract
(``verify.py``) -> move into place (``fastnnef/exporter_run.py``: staging, timings).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import torch

from fastnnef.check import TractArtefact
from fastnnef.compress import DEFAULT_COMPRESSION_REGISTRY
from fastnnef.exceptions import (
    T2NError,
    T2NErrorInvalidArgument,
    T2NErrorIOPytorchTractNotISO,
    T2NErrorNotImplemented,
)
from fastnnef.export import finish_export
from fastnnef.exporter_run import files_in, staged_export, timed
from fastnnef.fx_graph.repeats import layers_captured_once
from fastnnef.inference_target.tract import TractCheckTolerance
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.llm.architectures import KVLayout, kv_layout, tested_list
from fastnnef.llm.bundles import (
    Bundle,
    TorchRunner,
    fast_cpu_kernels,
    same_sizes,
    sample_tokens,
    trace_new_tokens,
    write_modes_json,
)
from fastnnef.llm.hub import DEFAULT_HF_DOWNLOAD_N_RETRIES
from fastnnef.llm.load import Checkpoint, load_checkpoint, resolve_source
from fastnnef.llm.mla import traceable_mla
from fastnnef.llm.moe import dense_experts, moe_export_forms
from fastnnef.llm.options import AttnImplementation, DtypeStr, ExportDirStruct, LLMExportOptions
from fastnnef.llm.phases import (
    cache_dtype_of,
    check_linear_attention,
    dtype_str,
    prepare_decoder,
    reference_properties,
    show_generation,
    weight_facts,
)
from fastnnef.llm.progress import Progress
from fastnnef.llm.verify import (
    BundleCheck,
    GenerationCheck,
    check_bundle,
    check_generation,
    raise_on_failed_bundles,
)
from fastnnef.llm.wrapper import KVCacheLM, assertions
from fastnnef.log import get_logger
from fastnnef.tensor.offload import trace_on_stand_ins
from fastnnef.torch_graph.ir_naming import VariableNamingScheme

log = get_logger("fastnnef.llm")

# The LLM exporter's naming default, as torch_to_nnef_llm's (the core API's is natural_verbose).
LLM_NAMING_SCHEME = VariableNamingScheme.NATURAL_VERBOSE_CAMEL.value
GENERATED_TOKENS = 16  # greedy tokens compared between tract and PyTorch
ARTEFACT_NAME = "model.nnef.tgz"
TESTS_DIR = "tests"
BUNDLES = "bundles"  # the timings key of the PyTorch run writing TESTS_DIR, reported on its own line

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class LLMExportReport:
    """What ``dump_llm`` wrote and found."""

    export_dir: Path
    model_path: Path  # the .nnef.tgz artefact
    files: list[str]  # every file written, relative to export_dir
    modes: list[str]  # the modes of modes.json
    model_type: str
    n_parameters: int
    weight_dtype: str  # the dtype most weights have (f32, f16, bf16)
    cache_dtype: str  # the dtype of the artefact's cache inputs (tract has no bf16: f32)
    compression_method: str | None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase, and "total"
    bundle_checks: list[BundleCheck] = field(default_factory=list)
    generation: GenerationCheck | None = None
    verified: bool = False  # False with no_verify
    tract_binary: str | None = None  # tract_specific_path
    binary_checks: list[str] = field(default_factory=list)  # the bundles that binary passed

    def summary(self) -> str:
        lines = [f"exported {self.model_type} ({self.n_parameters:,} parameters, {self.weight_dtype}"
                 + (f", {self.compression_method}" if self.compression_method else "") + f") to {self.export_dir}"]
        lines.append("timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items() if k != BUNDLES))
        if BUNDLES in self.timings:
            lines.append(f"PyTorch run writing {TESTS_DIR}/ (the test bundles, one forward): "
                         f"{self.timings[BUNDLES]:.2f} s")
        if not self.verified:
            lines.append("not verified (no_verify)")
        for check in self.bundle_checks:
            lines.append(f"tract {check.name}: {'ok' if check.ok else 'FAILED'}")
        for name in self.binary_checks:
            lines.append(f"{self.tract_binary} {name}: ok")
        if self.generation is not None:
            lines.append(f"generation: {self.generation.summary()}")
        return "\n".join(lines)


def dump_llm(
    export_dirpath: PathLike,
    model_slug: str | None = None,
    local_dir: PathLike | None = None,
    force_module_dtype: str | DtypeStr | None = None,
    compression_method: str | None = None,
    compression_registry: str = DEFAULT_COMPRESSION_REGISTRY,
    naming_scheme: str | VariableNamingScheme = LLM_NAMING_SCHEME,
    num_logits_to_keep: int = 1,
    export_dir_struct: str | ExportDirStruct = ExportDirStruct.DEEP,
    dump_with_tokenizer_and_conf: bool = False,
    ignore_already_exist_dir: bool = False,
    force_f32_attention: bool = False,
    force_f32_linear_accumulator: bool = False,
    force_f32_normalization: bool = False,
    reify_sdpa_operator: bool = False,
    attn_implementation: str | AttnImplementation = AttnImplementation.AUTO,
    tract_check_io_tolerance: str | TractCheckTolerance = TractCheckTolerance.APPROXIMATE,
    test_display_token_gens: bool = False,
    sample_generation_total_size: int = 6,
    no_verify: bool = False,
    trust_remote_code: bool = False,
    tract_specific_path: PathLike | None = None,
    tract_specific_version: str | None = None,
    force_inputs_dtype: str | None = None,
    revision: str | None = None,
    hf_download_n_retries: int = DEFAULT_HF_DOWNLOAD_N_RETRIES,
    progress: Progress | None = None,
    front_end: str = "auto",
) -> LLMExportReport:
    """Export a causal LM to ``export_dirpath`` (see the module docstring).

    The parameters are torch_to_nnef_llm's ``dump_llm`` keywords that fastnnef applies
    (``fastnnef-llm --help`` describes each); ``trust_remote_code`` defaults to False.
    ``model_slug`` is a Hugging Face model id, taken from the hub cache or downloaded there
    (``llm/hub.py``: ``revision`` a branch, tag or commit; ``hf_download_n_retries`` the
    retries of transient hub failures).
    ``progress`` shows phases and the weight writing (default: on a terminal only).
    ``front_end``: ``export_model_to_nnef``'s. ``"auto"`` captures with ``torch.export``
    on fake weights (nothing read), and traces with ``torch.jit.trace`` (on value-less
    stand-ins) a model holding a module kept whole by its extractor (MoE experts as
    ``tract_moe_ffn``, selective scans, gated delta nets) or that ``torch.export`` cannot capture.

    ``tract_specific_path``: a tract binary that also checks every test bundle (through
    ``TractCli``: only the flags its version knows); the artefact then targets that
    version. ``tract_specific_version``: the tract version the artefact targets (nothing is
    downloaded: verification runs in the linked tract). They exclude each other, as in
    the reference. ``force_inputs_dtype`` (``-idt``) is accepted when it is the cache dtype
    the model gives (f32, or f16 for half-precision models); the cache takes the model's
    dtype, so ``-dt`` chooses it.

    Example::

        report = dump_llm("out/llama", local_dir="checkpoints/llama", force_module_dtype="f16")
        print(report.summary())
    """
    started = time.perf_counter()
    options = LLMExportOptions.build(
        export_dirpath=export_dirpath, model_slug=model_slug, local_dir=local_dir,
        force_module_dtype=force_module_dtype, compression_method=compression_method,
        compression_registry=compression_registry, naming_scheme=naming_scheme, num_logits_to_keep=num_logits_to_keep,
        export_dir_struct=export_dir_struct, dump_with_tokenizer_and_conf=dump_with_tokenizer_and_conf,
        ignore_already_exist_dir=ignore_already_exist_dir, force_f32_attention=force_f32_attention,
        force_f32_linear_accumulator=force_f32_linear_accumulator, force_f32_normalization=force_f32_normalization,
        reify_sdpa_operator=reify_sdpa_operator, attn_implementation=attn_implementation,
        tract_check_io_tolerance=tract_check_io_tolerance, test_display_token_gens=test_display_token_gens,
        sample_generation_total_size=sample_generation_total_size, no_verify=no_verify,
        trust_remote_code=trust_remote_code, tract_specific_path=tract_specific_path,
        tract_specific_version=tract_specific_version, force_inputs_dtype=force_inputs_dtype, revision=revision,
        hf_download_n_retries=hf_download_n_retries, progress=progress, front_end=front_end,
    )
    report = _dump(options)
    report.timings["total"] = time.perf_counter() - started
    options.progress.phase(f"done in {report.timings['total']:.1f} s: {report.model_path}")
    return report


def _dump(options: LLMExportOptions) -> LLMExportReport:
    """The export with checked options, step by step (the module docstring's steps)."""
    progress = options.progress
    timings: dict[str, float] = {}
    progress.phase("loading the checkpoint")
    with timed(timings, "load"):
        source = resolve_source(options.model_slug, options.local_dir, options.revision, options.hf_download_n_retries)
        checkpoint = load_checkpoint(source, options.torch_dtype, options.attn, options.trust_remote_code)
    model: Any = checkpoint.model
    n_parameters, weight_dtype = weight_facts(model)
    if options.compress is not None:
        progress.phase(f"compressing the weights ({options.compression_method})")
        with timed(timings, "compress"):
            options.compress(model)
    layout = kv_layout(model.config)
    total = options.sample_generation_total_size
    _check_positions(layout.max_positions, total)
    cache_dtype = cache_dtype_of(model, options.force_inputs_dtype)
    wrapper = KVCacheLM(model, layout, options.num_logits_to_keep).eval()
    check_linear_attention(wrapper, options.target_version)
    runner = TorchRunner(wrapper, model.dtype)

    with staged_export(options.target) as staging:
        model_dir, tok_dir = _layout_dirs(staging, options.struct)
        tests_dir = staging / TESTS_DIR
        tests_dir.mkdir()
        tokens = sample_tokens(checkpoint.tokenizer, _vocab_size(model), total + trace_new_tokens(total))
        artefact_path = model_dir / ARTEFACT_NAME
        target = options.tract_nnef(
            wrapper.dynamic_axes(), reference_properties(checkpoint, n_parameters, weight_dtype, cache_dtype, options)
        )
        # Traced first on the example's sizes (stand-ins read no value), so that the one
        # forward giving the test bundles runs while Rust writes the weights: two cores
        # busy instead of one after the other.
        progress.phase("tracing the model")
        traced_on = runner.example_inputs(tokens, total)
        with (timed(timings, "export"), moe_export_forms(model, target.capabilities()),
              traceable_mla(model), trace_on_stand_ins(), fast_cpu_kernels(model.dtype),
              layers_captured_once(wrapper.repeat_plan())):
            prepared = prepare_decoder(wrapper, traced_on, artefact_path, target, wrapper.io_names(),
                                       assertions(layout.max_positions, wrapper.has_past), options)

        def test_bundles() -> tuple[list[Bundle], Bundle]:
            with timed(timings, BUNDLES), dense_experts(model), fast_cpu_kernels(model.dtype):
                with _generic_wrapper_errors(checkpoint):
                    modes, example = runner.bundles(tokens, total)
                for bundle in [*modes, example]:
                    bundle.save(tests_dir)
                write_modes_json(staging, modes)
            return modes, example

        progress.phase("writing the artefact, and running the model in PyTorch for the test bundles meanwhile")
        with timed(timings, "export"), progress.writing():
            _, ran = finish_export(prepared, while_writing=test_bundles)
        assert ran is not None  # finish_export returns what while_writing returned
        modes, example = ran
        same_sizes(example, traced_on)
        if options.dump_with_tokenizer_and_conf:
            _dump_config_and_tokenizer(checkpoint, model_dir, tok_dir)

        bundle_checks: list[BundleCheck] = []
        binary_checks: list[str] = []
        generation: GenerationCheck | None = None
        if options.no_verify:
            _warn_if_untested(checkpoint)
        else:
            progress.phase("verifying in tract: test bundles and greedy generation")
            with timed(timings, "verify"):
                bundle_checks, generation = _verify(
                    artefact_path, [example, *modes], options.tolerance, options.exact(weight_dtype),
                    wrapper.empty_cache(cache_dtype), tokens[:, :total], checkpoint, layout,
                )
                if options.tract_binary is not None:
                    binary_checks = _check_with_binary(options.tract_binary, artefact_path, tests_dir,
                                                       [example, *modes], options.tolerance)
            show_generation(generation, options)
        files = files_in(staging)
        model_path = options.target / artefact_path.relative_to(staging)
    return LLMExportReport(
        export_dir=options.target, model_path=model_path, files=files,
        modes=[b.name for b in modes], model_type=checkpoint.architecture.model_type, n_parameters=n_parameters,
        weight_dtype=weight_dtype, cache_dtype=dtype_str(cache_dtype), compression_method=options.compression_method,
        timings=timings, bundle_checks=bundle_checks, generation=generation, verified=not options.no_verify,
        binary_checks=binary_checks, tract_binary=options.tract_binary_path,
    )


# --- helpers ---------------------------------------------------------------------------
def _verify(
    artefact_path: Path, bundles: list[Bundle], tolerance: str, exact: bool, empty_cache: list[torch.Tensor],
    prompt: torch.Tensor, checkpoint: Checkpoint, layout: KVLayout,
) -> tuple[list[BundleCheck], GenerationCheck]:
    """Every bundle, then greedy generation, in the linked tract; raises when a bundle
    differs from PyTorch at ``tolerance``, or when ``exact`` and the tokens differ."""
    artefact = TractArtefact.load(artefact_path)
    checks = [check_bundle(artefact, b, tolerance) for b in bundles]
    raise_on_failed_bundles(checks, tolerance)
    model = checkpoint.model
    generation = check_generation(model, artefact, empty_cache, prompt, GENERATED_TOKENS, exact,
                                  checkpoint.tokenizer, checkpoint.architecture.recompute_length(model.config))
    if not generation.ok:
        raise T2NErrorIOPytorchTractNotISO(
            f"greedy generation in tract differs from Hugging Face's for this f32 "
            f"{checkpoint.architecture.model_type} model ({_family_status(checkpoint)}): "
            f"{generation.divergence()}; layers: {layout.describe()} ({_layer_classes(model)}). "
            "Nothing was written. The generic wrapper does not export this family correctly: please report it"
        )
    if generation.first_divergence is not None:
        log.warning("generation in tract (%s) departs from PyTorch's: %s", dtype_str(model.dtype),
                    generation.divergence())
    return checks, generation


def _check_with_binary(binary: TractCli, artefact_path: Path, tests_dir: Path, bundles: list[Bundle],
                       tolerance: str) -> list[str]:
    """Every saved bundle through the tract binary's own check (its exit code decides)."""
    for bundle in bundles:
        binary.assert_io(artefact_path, tests_dir / f"{bundle.name}_inputs.npz",
                         tests_dir / f"{bundle.name}_outputs.npz", check_tolerance=tolerance)
    return [b.name for b in bundles]


def _family_status(checkpoint: Checkpoint) -> str:
    return "a tested family" if checkpoint.architecture.tested else "not a tested family"


def _layer_classes(model: Any) -> str:
    """The decoder layer classes of ``model`` (``LlamaDecoderLayer``), for messages."""
    names = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith(("Layer", "Block"))
                    and not type(m).__name__.endswith(("CacheLayer", "DynamicLayer"))})
    return ", ".join(names) or type(model).__name__


def _warn_if_untested(checkpoint: Checkpoint) -> None:
    architecture = checkpoint.architecture
    if not architecture.tested:
        log.warning(
            "model_type %r is not among the tested families and was exported without verification (-nv): "
            "the artefact may compute something else than transformers. Export without -nv to verify it "
            "(tested: %s)", architecture.model_type, tested_list(),
        )


@contextmanager
def _generic_wrapper_errors(checkpoint: Checkpoint) -> Iterator[None]:
    """The model's own errors when the generic wrapper runs it (a cache or mask layout this
    family does not take) as a fastnnef error naming the family."""
    try:
        yield
    except (RuntimeError, TypeError, ValueError, AttributeError, IndexError) as err:
        if isinstance(err, T2NError):
            raise
        architecture = checkpoint.architecture
        raise T2NErrorNotImplemented(
            f"the generic LLM wrapper cannot run this {architecture.model_type} model "
            f"({_family_status(checkpoint)}): {type(checkpoint.model).__name__} raised {type(err).__name__}: {err}"
        ) from err


def _check_positions(max_positions: int | None, total: int) -> None:
    """The traced example, the modes and the generated tokens must fit below the model's
    maximum position count (tract_assert S+P < max), where it has one."""
    needed = total + max(trace_new_tokens(total), GENERATED_TOKENS)
    if max_positions is not None and needed >= max_positions:
        raise T2NErrorInvalidArgument(
            f"the model handles positions below {max_positions}, but the export needs {needed} "
            f"(-sgts {total} prompt tokens, then {GENERATED_TOKENS} generated ones): lower -sgts"
        )


def _vocab_size(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _layout_dirs(root: Path, struct: ExportDirStruct) -> tuple[Path, Path]:
    """(model directory, tokenizer directory) of the layout."""
    if struct == ExportDirStruct.FLAT:
        return root, root
    model_dir = root / "model"
    model_dir.mkdir()
    return model_dir, root / "tokenizer"


def _dump_config_and_tokenizer(checkpoint: Checkpoint, model_dir: Path, tok_dir: Path) -> None:
    """``-dwtac``: the full config.json beside the artefact, the tokenizer's files."""
    checkpoint.model.config.to_json_file(model_dir / "config.json", use_diff=False)
    if checkpoint.tokenizer is None:
        log.warning("%s has no tokenizer: only config.json is written", checkpoint.directory)
        return
    tok_dir.mkdir(exist_ok=True)
    checkpoint.tokenizer.save_pretrained(tok_dir)


