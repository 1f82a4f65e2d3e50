"""``dump_multimodal``: export a vision-language (or audio-language) checkpoint as one
decoder artefact and one encoder artefact per modality, tied by ``multimodal.json``,
verified end to end in tract, and report.

Layout (torch_to_nnef_llm's)::

    <export_dir>/multimodal.json
    <export_dir>/decoder/model.nnef.tgz, decoder/modes.json, decoder/tests/*.npz
                 (+ config.json and the processor's files with -dwtac)
    <export_dir>/vision/model.nnef.tgz, vision/tests/export_*.npz

Steps: the family from ``config.json`` (``families.py``; a text-only config, or one
without its tower, is refused before loading) -> the processor (required: it makes the
sample prompt) -> the checkpoint, weights streamed as the LLM exporter streams them
(``llm/load.py``) -> the sample prompt with two images through the processor -> optional
compression of the decoder's weights (towers stay uncompressed, as in the reference) ->
the decoder (``decoder.py``) and each encoder (``encoder.py``) traced and written ->
verification in tract: the encoders against Hugging Face at both image sizes, the
decoder's bundles, then greedy generation from the image prompt with the ENCODER
ARTEFACTS' embeddings against Hugging Face's ``generate`` on the pixels -> the manifest
-> everything moved into place. As in ``dump_llm``, it is built under a temporary name and
an error leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import torch
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.compress import DEFAULT_COMPRESSION_REGISTRY
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorIOPytorchTractNotISO, T2NErrorNotFoundFile
from fastnnef.exporter_run import files_in, staged_export, timed
from fastnnef.fx_graph.repeats import layers_captured_once
from fastnnef.inference_target.tract import TractCheckTolerance
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.llm.api import LLM_NAMING_SCHEME
from fastnnef.llm.architectures import kv_layout
from fastnnef.llm.bundles import Bundle, write_modes_json
from fastnnef.llm.hub import DEFAULT_HF_DOWNLOAD_N_RETRIES
from fastnnef.llm.load import CONFIG, Checkpoint, load_checkpoint, resolve_source
from fastnnef.llm.moe import dense_experts, moe_export_forms
from fastnnef.llm.options import AttnImplementation, DtypeStr, LLMExportOptions
from fastnnef.llm.phases import (
    cache_dtype_of,
    check_linear_attention,
    dtype_str,
    export_decoder,
    reference_properties,
    show_generation,
    weight_facts,
)
from fastnnef.llm.progress import Progress
from fastnnef.llm.verify import BundleCheck, GenerationCheck, check_bundle, eos_ids, raise_on_failed_bundles
from fastnnef.llm.wrapper import KVCacheLM, assertions
from fastnnef.log import get_logger
from fastnnef.multimodal.decoder import (
    DecoderRunner,
    TractMultimodalGenerator,
    check_generation,
    decoder_io,
)
from fastnnef.multimodal.encoder import EncoderCheck, check_encoder, concatenated, export_encoder, run_encoder
from fastnnef.multimodal.families import family_of
from fastnnef.multimodal.family import Family, Sample
from fastnnef.multimodal.manifest import (
    ARTEFACT_NAME,
    DECODER_DIRNAME,
    DEEPSTACK_AXIS,
    MANIFEST_NAME,
    EmbeddingContract,
    EncoderArtefact,
    build_manifest,
    write_manifest,
)
from fastnnef.torch_graph.ir_naming import VariableNamingScheme

log = get_logger("fastnnef.multimodal")

GENERATED_TOKENS = 16
TESTS_DIR = "tests"
# Files that make a saved processor (one of them is enough for AutoProcessor).
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class MultimodalExportReport:
    """What ``dump_multimodal`` wrote and found (``LLMExportReport``'s fields, per graph)."""

    export_dir: Path
    manifest_path: Path
    decoder_path: Path
    encoder_paths: dict[str, Path]  # modality folder ("vision") -> its artefact
    files: list[str]  # every file written, relative to export_dir
    model_type: str
    n_parameters: int
    weight_dtype: str
    inputs_dtype: str  # the dtype of the cache and embedding inputs
    compression_method: str | None
    timings: dict[str, float] = field(default_factory=dict)
    encoder_checks: list[EncoderCheck] = field(default_factory=list)
    bundle_checks: list[BundleCheck] = field(default_factory=list)
    generation: GenerationCheck | None = None
    verified: bool = False
    binary_checks: list[str] = field(default_factory=list)  # "<artefact> <bundle>" checked by tract_binary
    tract_binary: str | None = None  # --tract-specific-path

    def summary(self) -> str:
        lines = [f"exported {self.model_type} ({self.n_parameters:,} parameters, {self.weight_dtype}"
                 + (f", decoder {self.compression_method}" if self.compression_method else "")
                 + f") to {self.export_dir}: decoder + {', '.join(self.encoder_paths)} + {MANIFEST_NAME}"]
        lines.append("timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))
        if not self.verified:
            lines.append("not verified (no_verify)")
        for check in self.encoder_checks:
            lines.append(f"tract {check.label} encoder, item {check.item} {check.input_shape}: "
                         f"{'ok' if check.ok else 'FAILED'}")
        for bundle in self.bundle_checks:
            lines.append(f"tract decoder {bundle.name}: {'ok' if bundle.ok else 'FAILED'}")
        for name in self.binary_checks:
            lines.append(f"{self.tract_binary} {name}: ok")
        if self.generation is not None:
            lines.append(f"generation from the sample prompt: {self.generation.summary()}")
        return "\n".join(lines)


def dump_multimodal(
    export_dirpath: PathLike,
    model_slug: str | None = None,
    local_dir: PathLike | None = None,
    force_module_dtype: str | DtypeStr | None = None,
    compression_method: str | None = None,
    compression_registry: str = DEFAULT_COMPRESSION_REGISTRY,
    naming_scheme: str | VariableNamingScheme = LLM_NAMING_SCHEME,
    num_logits_to_keep: int = 1,
    dump_with_tokenizer_and_conf: bool = False,
    ignore_already_exist_dir: bool = False,
    force_f32_attention: bool = False,
    force_f32_linear_accumulator: bool = False,
    force_f32_normalization: bool = False,
    reify_sdpa_operator: bool = False,
    attn_implementation: str | AttnImplementation = AttnImplementation.AUTO,
    tract_check_io_tolerance: str | TractCheckTolerance = TractCheckTolerance.APPROXIMATE,
    test_display_token_gens: bool = False,
    no_verify: bool = False,
    trust_remote_code: bool = False,
    tract_specific_path: PathLike | None = None,
    tract_specific_version: str | None = None,
    force_inputs_dtype: str | None = None,
    revision: str | None = None,
    hf_download_n_retries: int = DEFAULT_HF_DOWNLOAD_N_RETRIES,
    progress: Progress | None = None,
    front_end: str = "auto",
) -> MultimodalExportReport:
    """Export a multimodal checkpoint to ``export_dirpath`` (see the
    module docstring). The keywords are ``dump_llm``'s (``fastnnef-multimodal --help``
    describes each); the families are ``families.FAMILIES``. ``front_end`` is
    ``export_model_to_nnef``'s, for the encoders and the decoder.

    Example::

        report = dump_multimodal("out/qwen-vl", local_dir="checkpoints/Qwen2.5-VL-3B-Instruct")
        print(report.summary())
    """
    started = time.perf_counter()
    options = LLMExportOptions.build(
        export_dirpath=export_dirpath, model_slug=model_slug, local_dir=local_dir,
        force_module_dtype=force_module_dtype, compression_method=compression_method,
        compression_registry=compression_registry, naming_scheme=naming_scheme, num_logits_to_keep=num_logits_to_keep,
        dump_with_tokenizer_and_conf=dump_with_tokenizer_and_conf, ignore_already_exist_dir=ignore_already_exist_dir,
        force_f32_attention=force_f32_attention, force_f32_linear_accumulator=force_f32_linear_accumulator,
        force_f32_normalization=force_f32_normalization, reify_sdpa_operator=reify_sdpa_operator,
        attn_implementation=attn_implementation, tract_check_io_tolerance=tract_check_io_tolerance,
        test_display_token_gens=test_display_token_gens, no_verify=no_verify, trust_remote_code=trust_remote_code,
        tract_specific_path=tract_specific_path, tract_specific_version=tract_specific_version,
        force_inputs_dtype=force_inputs_dtype, revision=revision, hf_download_n_retries=hf_download_n_retries,
        progress=progress, front_end=front_end,
    )
    report = _dump(options)
    report.timings["total"] = time.perf_counter() - started
    options.progress.phase(f"done in {report.timings['total']:.1f} s: {report.manifest_path}")
    return report


def _dump(options: LLMExportOptions) -> MultimodalExportReport:
    """The export with checked options, step by step (the module docstring's steps)."""
    progress = options.progress
    timings: dict[str, float] = {}
    progress.phase("loading the checkpoint and its processor")
    with timed(timings, "load"):
        directory = resolve_source(options.model_slug, options.local_dir, options.revision,
                                   options.hf_download_n_retries)
        family = family_of(_raw_config(directory))
        processor = (family.load_processor or _load_processor)(directory, options.trust_remote_code)
        checkpoint = load_checkpoint(directory, options.torch_dtype, options.attn, options.trust_remote_code,
                                     auto_class=family.auto_class)
    model: Any = checkpoint.model
    n_parameters, weight_dtype = weight_facts(model)
    cache_dtype = cache_dtype_of(model, options.force_inputs_dtype)
    layout = kv_layout(model.config)
    hidden = int(model.config.get_text_config(decoder=True).hidden_size)
    sample = _sample(family, processor, directory)
    processed = sample.inputs
    _check_positions(layout.max_positions, processed["input_ids"].shape[1])
    contracts = [_contract(family, i, model.config, hidden) for i in range(len(family.encoders))]
    inputs = family.decoder_inputs(model)

    progress.phase("running the model in PyTorch for the test bundles")
    with timed(timings, "bundles"), torch.no_grad():
        reference = [t for spec, items in zip(family.encoders, sample.items)
                     for t in concatenated(spec, items, [spec.reference(model, item) for item in items])]
    # Encoders first (uncompressed); the decoder's weights are compressed after.
    with staged_export(options.target) as staging:
        encoder_artefacts: list[EncoderArtefact] = []
        encoder_paths: dict[str, Path] = {}
        for spec, contract, items in zip(family.encoders, contracts, sample.items):
            progress.phase(f"tracing and writing the {spec.modality} encoder")
            folder = staging / spec.modality
            folder.mkdir()
            with timed(timings, f"export {spec.modality}"):
                export_encoder(spec, model, items, folder / ARTEFACT_NAME, options.target_version, options.naming,
                               folder / TESTS_DIR, options.front_end)
            rel = f"{spec.modality}/{ARTEFACT_NAME}"
            encoder_paths[spec.modality] = options.target / rel
            encoder_artefacts.append(EncoderArtefact(spec.modality, rel, contract, spec.input_contract(model.config)))

        if options.compress is not None:
            progress.phase(f"compressing the decoder's weights ({options.compression_method})")
            with timed(timings, "compress"):
                options.compress(_decoder_part(model, family))
        decoder_dir = staging / DECODER_DIRNAME
        tests_dir = decoder_dir / TESTS_DIR
        tests_dir.mkdir(parents=True)
        wrapper = KVCacheLM(model, layout, options.num_logits_to_keep, inputs).eval()
        check_linear_attention(wrapper, options.target_version)
        io = decoder_io(wrapper, inputs)
        runner = DecoderRunner(wrapper, inputs, io, cache_dtype, hidden)
        with timed(timings, "bundles"), dense_experts(model):
            modes = runner.bundles(processed, reference)
            for bundle in modes:
                bundle.save(tests_dir)
            write_modes_json(decoder_dir, modes)
            placeholders = [c.placeholder_token_id for c in contracts]
            example_inputs = runner.export_inputs(processed, reference, placeholders)

        progress.phase("tracing and writing the decoder")
        decoder_path = decoder_dir / ARTEFACT_NAME
        target = options.tract_nnef(
            io.dynamic_axes, reference_properties(checkpoint, n_parameters, weight_dtype, cache_dtype, options)
        )
        # MoE blocks: one tract_moe_ffn where the target has it, else the dense form.
        with timed(timings, "export decoder"), moe_export_forms(model, target.capabilities()), \
                progress.writing(), layers_captured_once(wrapper.repeat_plan()):
            exported = export_decoder(wrapper, example_inputs, decoder_path, target,
                                      (io.input_names, io.output_names), assertions(layout.max_positions), options)
        example = Bundle("export", dict(zip(io.input_names, example_inputs)),
                         dict(zip(io.output_names, exported.traced_outputs)))
        example.save(tests_dir)
        if options.dump_with_tokenizer_and_conf:
            model.config.to_json_file(decoder_dir / CONFIG, use_diff=False)
            processor.save_pretrained(decoder_dir)

        encoder_checks: list[EncoderCheck] = []
        bundle_checks: list[BundleCheck] = []
        binary_checks: list[str] = []
        generation: GenerationCheck | None = None
        if not options.no_verify:
            progress.phase("verifying in tract: encoders, decoder bundles, generation from the image prompt")
            with timed(timings, "verify"):
                encoder_checks, bundle_checks, generation = _verify(
                    family, model, checkpoint, sample, staging, encoder_artefacts, decoder_path,
                    [example, *modes], inputs, wrapper.empty_cache(cache_dtype), hidden, cache_dtype,
                    options.tolerance, options.exact(weight_dtype),
                )
                if options.tract_binary is not None:
                    binary_checks = _check_with_binary(options.tract_binary, staging, encoder_artefacts,
                                                       decoder_path, [example, *modes], options.tolerance)
            show_generation(generation, options)
        manifest = build_manifest(f"{DECODER_DIRNAME}/{ARTEFACT_NAME}", encoder_artefacts, dtype_str(cache_dtype))
        write_manifest(staging, manifest)
        files = files_in(staging)
    return MultimodalExportReport(
        export_dir=options.target, manifest_path=options.target / MANIFEST_NAME,
        decoder_path=options.target / DECODER_DIRNAME / ARTEFACT_NAME, encoder_paths=encoder_paths, files=files,
        model_type=family.model_type, n_parameters=n_parameters, weight_dtype=weight_dtype,
        inputs_dtype=dtype_str(cache_dtype), compression_method=options.compression_method, timings=timings,
        encoder_checks=encoder_checks, bundle_checks=bundle_checks, generation=generation,
        verified=not options.no_verify, binary_checks=binary_checks, tract_binary=options.tract_binary_path,
    )


# --- helpers ---------------------------------------------------------------------------
def _check_with_binary(binary: TractCli, staging: Path, encoders: list[EncoderArtefact], decoder_path: Path,
                       decoder_bundles: list[Bundle], tolerance: str) -> list[str]:
    """Every saved bundle, the encoders' and the decoder's, through the tract binary's own
    check (its exit code decides; ``TractCli`` passes only the flags its version knows)."""
    checked = []
    for encoder in encoders:
        artefact = staging / encoder.rel_path
        tests = artefact.parent / TESTS_DIR
        binary.assert_io(artefact, tests / "export_inputs.npz", tests / "export_outputs.npz",
                         check_tolerance=tolerance)
        checked.append(f"{encoder.label} export")
    tests = decoder_path.parent / TESTS_DIR
    for bundle in decoder_bundles:
        binary.assert_io(decoder_path, tests / f"{bundle.name}_inputs.npz", tests / f"{bundle.name}_outputs.npz",
                         check_tolerance=tolerance)
        checked.append(f"{DECODER_DIRNAME} {bundle.name}")
    return checked


def _verify(
    family: Family, model: Any, checkpoint: Checkpoint, sample: Sample, staging: Path,
    encoders: list[EncoderArtefact], decoder_path: Path, bundles: list[Bundle], inputs: Any,
    empty_cache: list[torch.Tensor], hidden: int, cache_dtype: torch.dtype, tolerance: str, exact: bool,
) -> tuple[list[EncoderCheck], list[BundleCheck], GenerationCheck]:
    """Encoders against Hugging Face, the decoder's bundles, then generation from the image
    prompt with the encoder artefacts' outputs; raises on the first failure."""
    encoder_checks: list[EncoderCheck] = []
    embeddings: list[torch.Tensor] = []
    for spec, encoder, items in zip(family.encoders, encoders, sample.items):
        # Loaded by a call of its own: tract holds an artefact's weights in memory, and the
        # encoder's are freed before the decoder's are loaded (peak: the larger, not both).
        got = run_encoder(TractArtefact.load(staging / encoder.rel_path), spec, model, items)
        checks = check_encoder(spec, model, items, got, tolerance)
        failed = [c for c in checks if not c.ok]
        if failed:
            raise T2NErrorIOPytorchTractNotISO(
                f"the {spec.modality} encoder's embeddings in tract differ from Hugging Face's at tolerance "
                f"{tolerance}: " + "; ".join(f"item {c.item} {c.input_shape}: {c.report}" for c in failed)
                + ". Nothing was written"
            )
        encoder_checks += checks
        embeddings += [t.to(cache_dtype) for t in concatenated(spec, items, got)]
    decoder = TractArtefact.load(decoder_path)
    bundle_checks = [check_bundle(decoder, b, tolerance) for b in bundles]
    raise_on_failed_bundles(bundle_checks, tolerance)
    generator = TractMultimodalGenerator(decoder, inputs, empty_cache, hidden, cache_dtype, eos_ids(model))
    generation = check_generation(model, generator, sample.inputs, embeddings, GENERATED_TOKENS, exact,
                                  checkpoint.tokenizer)
    if not generation.ok:
        raise T2NErrorIOPytorchTractNotISO(
            f"greedy generation from the image prompt in tract (encoder and decoder artefacts) differs from "
            f"Hugging Face's for this f32 {family.model_type} model: {generation.divergence()}. Nothing was written"
        )
    if generation.first_divergence is not None:
        log.warning("generation in tract departs from PyTorch's: %s", generation.divergence())
    return encoder_checks, bundle_checks, generation


def _raw_config(directory: Path) -> dict[str, Any]:
    try:
        raw = json.loads((directory / CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise T2NErrorInvalidArgument(f"{directory / CONFIG} is not valid JSON: {err}") from err
    if not isinstance(raw, dict):
        raise T2NErrorInvalidArgument(f"{directory / CONFIG} does not hold a JSON object")
    return raw


def _load_processor(directory: Path, trust_remote_code: bool) -> Any:
    """The checkpoint's processor: it turns the sample images and prompt into the model's
    inputs (placeholders expanded), so the export cannot be verified without it."""
    if not any((directory / name).is_file() for name in PROCESSOR_FILES):
        raise T2NErrorNotFoundFile(
            f"{directory} has no processor ({' or '.join(PROCESSOR_FILES)}): a multimodal export needs the "
            "checkpoint's processor to build its sample prompt; save it beside the weights "
            "(processor.save_pretrained) or copy its files from the original checkpoint"
        )
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, ImportError, TypeError) as err:
        raise T2NErrorInvalidArgument(f"the processor in {directory} does not load: {err}") from err


def _sample(family: Family, processor: Any, directory: Path) -> Sample:
    """The family's sample prompt through the checkpoint's processor; a processor that
    cannot make it (another family's, a broken one) is named."""
    try:
        return family.sample(processor)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:
        raise T2NErrorInvalidArgument(
            f"the processor in {directory} ({type(processor).__name__}) cannot build the {family.model_type} sample "
            f"prompt: {type(err).__name__}: {err}; it must be the checkpoint's own processor"
        ) from err


def _contract(family: Family, index: int, config: Any, hidden: int) -> EmbeddingContract:
    spec = family.encoders[index]
    placeholder = getattr(config, spec.placeholder_attr, None)
    if placeholder is None:
        raise T2NErrorInvalidArgument(
            f"config.json has no {spec.placeholder_attr}: the decoder cannot find where the {spec.embeds} "
            "embeddings go without the placeholder token id"
        )
    layers = spec.injection_layers(config)
    return EmbeddingContract(spec.embeds, hidden, int(placeholder), spec.dynamic_axis, layers,
                             DEEPSTACK_AXIS if layers else "")


def _check_positions(max_positions: int | None, prompt: int) -> None:
    if max_positions is not None and prompt + GENERATED_TOKENS >= max_positions:
        raise T2NErrorInvalidArgument(
            f"the model handles positions below {max_positions}, but the sample image prompt ({prompt} tokens) "
            f"and {GENERATED_TOKENS} generated tokens need {prompt + GENERATED_TOKENS}"
        )


def _decoder_part(model: Any, family: Family) -> nn.Module:
    """A container whose children are the model's decoder modules under their own paths
    (``model.language_model``, ``lm_head``), so compression names their weights as it
    would in the whole model and leaves the towers alone. The model is not modified."""
    root = nn.Module()
    for path in family.decoder_modules:
        holder = root
        parts = path.split(".")
        for part in parts[:-1]:
            if part not in holder._modules:
                holder.add_module(part, nn.Module())
            holder = holder._modules[part]  # type: ignore[assignment]
        holder.add_module(parts[-1], model.get_submodule(path))
    return root
