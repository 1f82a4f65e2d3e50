"""The phases that the LLM exporter (``dump_llm``, api.py) and the exporters built on it
(``dump_multimodal``) share and that know LLMs: the loaded model's dtypes, checks made
before anything is traced, the reference's properties, the decoder's export, the display of
a generation. The options they read are ``options.LLMExportOptions``; the phases that know
no model family (destination, tract target, compressor, timings, staging and the move into
place) are ``fastnnef/exporter_run.py``'s."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.export import ExportResult, PreparedExport, finish_export, options_of, prepare_export
from fastnnef.inference_target.capabilities import VERSION_GATES, TargetCapabilities
from fastnnef.inference_target.tract import TractNNEF
from fastnnef.llm.linear_attention import GATED_DELTA_NET_FEATURE
from fastnnef.llm.load import Checkpoint
from fastnnef.llm.options import LLMExportOptions
from fastnnef.llm.verify import GenerationCheck
from fastnnef.llm.wrapper import KVCacheLM
from fastnnef.log import get_logger
from fastnnef.utils import SemanticVersion


def dtype_str(dtype: torch.dtype) -> str:
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))


def weight_facts(model: Any) -> tuple[int, str]:
    """The parameter count and the dtype holding most parameters (before compression)."""
    counts: Counter[torch.dtype] = Counter()
    for p in model.parameters():
        counts[p.dtype] += p.numel()
    return sum(counts.values()), dtype_str(counts.most_common(1)[0][0])


def cache_dtype_of(model: Any, forced_inputs: str | None) -> torch.dtype:
    """The dtype of the artefact's cache (and embedding) inputs: the model's, f32 for a bf16
    model (tract has no bf16: it computes in f32 there). ``-idt`` is accepted when it names
    that dtype; the cache takes the model's, so ``-dt`` chooses it."""
    cache_dtype = model.dtype if model.dtype != torch.bfloat16 else torch.float32
    if forced_inputs is not None and forced_inputs != dtype_str(cache_dtype):
        raise T2NErrorNotImplemented(
            f"-idt/--force-inputs-dtype {forced_inputs}: the cache inputs take the model's dtype, "
            f"{dtype_str(cache_dtype)} here; load the model in {forced_inputs} with -dt/--force-module-dtype instead"
        )
    return cache_dtype


def check_linear_attention(wrapper: KVCacheLM, target_version: SemanticVersion) -> None:
    """Gated-delta-net layers need tract_transformers_gdn_recurrent (tract >= 0.23.5):
    refused before any forward for an older target."""
    caps = TargetCapabilities.tract(target_version)
    if wrapper.linear_layers and not caps.supports(GATED_DELTA_NET_FEATURE):
        raise T2NErrorNotImplemented(
            f"this model's linear-attention layers {list(wrapper.linear_layers)} (gated delta net) export as "
            f"tract_transformers_gdn_recurrent and tract_transformers_causal_conv1d_update, which tract "
            f"{target_version.to_str()} lacks: target tract {VERSION_GATES[GATED_DELTA_NET_FEATURE].first.to_str()} "
            "or newer (--tract-specific-version)"
        )


def reference_properties(
    checkpoint: Checkpoint, n_parameters: int, weight_dtype: str, cache_dtype: torch.dtype, options: LLMExportOptions,
) -> dict[str, str]:
    """The reference's extra metadata, in its order (llm-export.md §3); the compression
    method is the registry key actually applied (the reference mislabels every q4 key)."""
    props = {
        "hf_model_type": checkpoint.architecture.model_type,
        "n_parameters": str(n_parameters),
        "main_base_weight_dtype": weight_dtype,
        "forced_module_dtype": options.dtype.value if options.dtype else "",
        "as_float16": "1" if weight_dtype == "f16" else "0",
        "inputs_dtype": dtype_str(cache_dtype),
    }
    if options.compression_method is not None:
        props.update(compression_register_key=options.compression_method,
                     compression_registry=options.compression_registry, compression_method=options.compression_method)
    props["name_or_path"] = checkpoint.name_or_path
    return props


def export_decoder(
    wrapper: KVCacheLM, example_inputs: tuple[torch.Tensor, ...], path: Path, target: TractNNEF,
    io_names: tuple[list[str], list[str]], extensions: list[str], options: LLMExportOptions,
) -> ExportResult:
    """The wrapper traced once on ``example_inputs`` and written to ``path`` (a ``.tgz`` at
    compression level 0) through the core's public export, under the caller's logging as
    configured; its ``traced_outputs`` are the example's expected outputs."""
    result, _ = finish_export(prepare_decoder(wrapper, example_inputs, path, target, io_names, extensions, options))
    return result


def prepare_decoder(
    wrapper: KVCacheLM, example_inputs: tuple[torch.Tensor, ...], path: Path, target: TractNNEF,
    io_names: tuple[list[str], list[str]], extensions: list[str], options: LLMExportOptions,
) -> PreparedExport:
    """``export_decoder``'s capture and conversion, nothing written yet: the caller writes
    with ``finish_export``, which can run its own work meanwhile."""
    input_names, output_names = io_names
    export_options = options_of(
        path, input_names=input_names, output_names=output_names, compression_level=0,
        log_level=get_logger().getEffectiveLevel(), nnef_variable_naming_scheme=options.naming,
        custom_extensions=extensions, front_end=options.front_end,
    )
    # Verified, the artefact is loaded in tract right after: written through the page cache.
    return prepare_export(wrapper, example_inputs, target, export_options, read_back=not options.no_verify)


def show_generation(generation: GenerationCheck | None, options: LLMExportOptions) -> None:
    """``-td``: both continuations on stdout, as text when a tokenizer exists."""
    if not options.test_display_token_gens or generation is None:
        return
    if generation.texts:
        t = generation.texts
        sys.stdout.write(f"prompt: {t['prompt']!r}\ntorch:  {t['torch']!r}\ntract:  {t['tract']!r}\n")
    else:
        sys.stdout.write(f"prompt: {generation.prompt}\ntorch:  {generation.torch_tokens}\n"
                         f"tract:  {generation.tract_tokens}\n")
