"""The phases that the LLM exporter (``dump_llm``, api.py) and the exporters built on it
(``dump_multimodal``) share: options turned into transformers' and tract's choices, checks
made before anything is loaded or traced, the compressor, timings, the reference's
properties, the display of a generation, and the move of a finished export into place."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fastnnef.compress import dynamic_load_registry
from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotImplemented
from fastnnef.inference_target.base import as_version
from fastnnef.inference_target.capabilities import VERSION_GATES, TargetCapabilities
from fastnnef.inference_target.tract import TractNNEF
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.llm.linear_attention import GATED_DELTA_NET_FEATURE
from fastnnef.llm.load import Checkpoint
from fastnnef.llm.options import AttnImplementation, DtypeStr
from fastnnef.llm.verify import GenerationCheck
from fastnnef.llm.wrapper import KVCacheLM
from fastnnef.tensor.offload import PathLike
from fastnnef.utils import SemanticVersion


def dtype_str(dtype: torch.dtype) -> str:
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))


def main_dtype(model: Any) -> str:
    """The dtype holding most parameters (before compression)."""
    counts: Counter[torch.dtype] = Counter()
    for p in model.parameters():
        counts[p.dtype] += p.numel()
    return dtype_str(counts.most_common(1)[0][0])


def check_inputs_dtype(forced: str | None, cache_dtype: torch.dtype) -> None:
    if forced is not None and forced != dtype_str(cache_dtype):
        raise T2NErrorNotImplemented(
            f"-idt/--force-inputs-dtype {forced}: the cache inputs take the model's dtype, {dtype_str(cache_dtype)} "
            f"here; load the model in {forced} with -dt/--force-module-dtype instead"
        )


def attention_choice(choice: AttnImplementation, reify_sdpa: bool) -> str:
    """transformers' attn_implementation: eager by default (decomposed attention in the
    graph), sdpa when SDPA is reified, or what was asked."""
    if choice == AttnImplementation.AUTO:
        return AttnImplementation.SDPA.value if reify_sdpa else AttnImplementation.EAGER.value
    if reify_sdpa and choice != AttnImplementation.SDPA:
        raise T2NErrorInvalidArgument(
            "--reify-sdpa-operator needs sdpa attention: use --transformers-attn-implementation sdpa (or auto)"
        )
    return choice.value


def tract_target(path: PathLike | None, version: str | None) -> tuple[TractCli | None, SemanticVersion]:
    """The tract binary that also checks the bundles (None: only the linked tract), and the
    version the artefact targets: the binary's, the one asked for, or the latest."""
    if path is not None and version is not None:
        raise T2NErrorInvalidArgument(
            "--tract-specific-path and --tract-specific-version exclude each other (as in torch_to_nnef_llm): the "
            "binary's version is the target version"
        )
    if path is not None:
        binary = TractCli(Path(path))
        return binary, binary.version
    if version is not None:
        return None, as_version(version)
    return None, TractNNEF.latest_version()


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


def compressor(method: str | None, registry_path: str) -> Any:
    if method is None:
        return None
    registry = dynamic_load_registry(registry_path)
    if method not in registry:
        raise T2NErrorInvalidArgument(
            f"compression method {method!r} is not in {registry_path}; available: {', '.join(sorted(registry))}"
        )
    return registry[method]


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def reference_properties(
    checkpoint: Checkpoint, n_parameters: int, weight_dtype: str, forced: DtypeStr | None,
    cache_dtype: torch.dtype, compression_method: str | None, compression_registry: str,
) -> dict[str, str]:
    """The reference's extra metadata, in its order (llm-export.md §3); the compression
    method is the registry key actually applied (the reference mislabels every q4 key)."""
    props = {
        "hf_model_type": checkpoint.architecture.model_type,
        "n_parameters": str(n_parameters),
        "main_base_weight_dtype": weight_dtype,
        "forced_module_dtype": forced.value if forced else "",
        "as_float16": "1" if weight_dtype == "f16" else "0",
        "inputs_dtype": dtype_str(cache_dtype),
    }
    if compression_method is not None:
        props.update(compression_register_key=compression_method, compression_registry=compression_registry,
                     compression_method=compression_method)
    props["name_or_path"] = checkpoint.name_or_path
    return props


def move_into_place(staging: Path, target: Path) -> None:
    """Rename the finished directory into place; into an existing one (-iaed), move each
    file, replacing files of the same name."""
    if not target.exists():
        os.replace(staging, target)
        return
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            dest = target / path.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
    shutil.rmtree(staging)


def display_generation(generation: GenerationCheck) -> str:
    """``-td``: both continuations, as text when a tokenizer exists."""
    if generation.texts:
        t = generation.texts
        return f"prompt: {t['prompt']!r}\ntorch:  {t['torch']!r}\ntract:  {t['tract']!r}\n"
    return f"prompt: {generation.prompt}\ntorch:  {generation.torch_tokens}\ntract:  {generation.tract_tokens}\n"
