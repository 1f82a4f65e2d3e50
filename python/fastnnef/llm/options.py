"""The LLM exporter's options: their choices, one enum each (the CLI's ``choices`` and the
API's validation both come from here), and ``LLMExportOptions``, the keywords ``dump_llm``
and ``dump_multimodal`` share, checked once into one frozen object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.export_options import FRONT_ENDS
from fastnnef.exporter_run import check_destination, compressor, tract_target
from fastnnef.inference_target.tract import TractCheckTolerance, TractNNEF
from fastnnef.inference_target.tract_cli import TractCli
from fastnnef.llm.progress import Progress
from fastnnef.tensor.offload import PathLike
from fastnnef.torch_graph.ir_naming import VariableNamingScheme
from fastnnef.utils import SemanticVersion

E = TypeVar("E", bound=Enum)


class DtypeStr(str, Enum):
    """``-dt/--force-module-dtype``: the dtype the model is loaded in."""

    FLOAT32 = "f32"
    FLOAT16 = "f16"
    BFLOAT16 = "bf16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.value]


class ExportDirStruct(str, Enum):
    """``--export-dir-struct``: ``deep`` puts the model in ``model/`` and the tokenizer in
    ``tokenizer/``; ``flat`` puts every file at the root, as Hugging Face repositories do."""

    DEEP = "deep"
    FLAT = "flat"


class AttnImplementation(str, Enum):
    """``--transformers-attn-implementation``: ``auto`` is eager attention (decomposed in the
    graph), or sdpa with ``--reify-sdpa-operator``."""

    AUTO = "auto"
    EAGER = "eager"
    SDPA = "sdpa"


def to_enum(enum_cls: type[E], value: Any, option: str) -> E:
    """``value`` as a member of ``enum_cls``; a clear error naming the allowed values."""
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_cls)
        raise T2NErrorInvalidArgument(f"{option}: {value!r} is not one of {allowed}") from None


@dataclass(frozen=True)
class LLMExportOptions:
    """The keywords ``dump_llm`` and ``dump_multimodal`` share, checked once before anything
    is loaded (``build``): choices as enums, the compressor from its registry, the tract
    target, the destination. ``sample_generation_total_size`` and ``export_dir_struct`` are
    ``dump_llm``'s only (``dump_multimodal`` leaves them at their defaults)."""

    target: Path  # the export directory (refused when it exists, but with -iaed)
    model_slug: str | None
    local_dir: PathLike | None
    revision: str | None
    hf_download_n_retries: int
    trust_remote_code: bool
    dtype: DtypeStr | None  # -dt; None: the checkpoint's
    compression_method: str | None
    compression_registry: str
    compress: Callable[..., nn.Module] | None  # the registry's function for compression_method
    naming: VariableNamingScheme
    num_logits_to_keep: int
    sample_generation_total_size: int
    struct: ExportDirStruct
    dump_with_tokenizer_and_conf: bool
    force_f32_attention: bool
    force_f32_linear_accumulator: bool
    force_f32_normalization: bool
    reify_sdpa_operator: bool
    attn: str  # transformers' attn_implementation (attention_choice)
    tolerance: str  # TractCheckTolerance's value
    test_display_token_gens: bool
    no_verify: bool
    tract_binary: TractCli | None  # -tsp: also checks every bundle
    target_version: SemanticVersion
    force_inputs_dtype: str | None
    progress: Progress
    front_end: str  # export_model_to_nnef's ("auto": torch.export, the tracer where it cannot serve)

    @classmethod
    def build(
        cls, *, export_dirpath: PathLike, model_slug: str | None, local_dir: PathLike | None,
        force_module_dtype: str | DtypeStr | None, compression_method: str | None, compression_registry: str,
        naming_scheme: str | VariableNamingScheme, num_logits_to_keep: int, dump_with_tokenizer_and_conf: bool,
        ignore_already_exist_dir: bool, force_f32_attention: bool, force_f32_linear_accumulator: bool,
        force_f32_normalization: bool, reify_sdpa_operator: bool, attn_implementation: str | AttnImplementation,
        tract_check_io_tolerance: str | TractCheckTolerance, test_display_token_gens: bool, no_verify: bool,
        trust_remote_code: bool, tract_specific_path: PathLike | None, tract_specific_version: str | None,
        force_inputs_dtype: str | None, revision: str | None, hf_download_n_retries: int,
        progress: Progress | None, sample_generation_total_size: int = 6,
        export_dir_struct: str | ExportDirStruct = ExportDirStruct.DEEP, front_end: str = "auto",
    ) -> LLMExportOptions:
        """The public keywords of the same names, checked in this order; raises
        ``T2NErrorInvalidArgument`` (or the compressor's, the tract binary's error) for the
        first wrong one."""
        dtype = to_enum(DtypeStr, force_module_dtype, "force_module_dtype") if force_module_dtype else None
        struct = to_enum(ExportDirStruct, export_dir_struct, "export_dir_struct")
        naming = to_enum(VariableNamingScheme, naming_scheme, "naming_scheme")
        attn = attention_choice(
            to_enum(AttnImplementation, attn_implementation, "attn_implementation"), reify_sdpa_operator
        )
        tolerance = to_enum(TractCheckTolerance, tract_check_io_tolerance, "tract_check_io_tolerance").value
        compress = compressor(compression_method, compression_registry)
        _check_counts(num_logits_to_keep, sample_generation_total_size)
        tract_binary, target_version = tract_target(tract_specific_path, tract_specific_version)
        if front_end not in FRONT_ENDS:
            raise T2NErrorInvalidArgument(f"front_end must be one of {FRONT_ENDS}, got {front_end!r}")
        return cls(
            target=check_destination(export_dirpath, ignore_already_exist_dir), model_slug=model_slug,
            local_dir=local_dir, revision=revision, hf_download_n_retries=hf_download_n_retries,
            trust_remote_code=trust_remote_code, dtype=dtype, compression_method=compression_method,
            compression_registry=compression_registry, compress=compress, naming=naming,
            num_logits_to_keep=num_logits_to_keep, sample_generation_total_size=sample_generation_total_size,
            struct=struct, dump_with_tokenizer_and_conf=dump_with_tokenizer_and_conf,
            force_f32_attention=force_f32_attention, force_f32_linear_accumulator=force_f32_linear_accumulator,
            force_f32_normalization=force_f32_normalization, reify_sdpa_operator=reify_sdpa_operator, attn=attn,
            tolerance=tolerance, test_display_token_gens=test_display_token_gens, no_verify=no_verify,
            tract_binary=tract_binary, target_version=target_version, force_inputs_dtype=force_inputs_dtype,
            progress=progress or Progress.for_terminal(), front_end=front_end,
        )

    @property
    def torch_dtype(self) -> torch.dtype | None:
        """The dtype to load the checkpoint in (None: its own)."""
        return self.dtype.torch_dtype if self.dtype else None

    @property
    def tract_binary_path(self) -> str | None:
        return str(self.tract_binary.tract_path) if self.tract_binary else None

    def exact(self, weight_dtype: str) -> bool:
        """Whether greedy tokens must equal PyTorch's (f32 weights, uncompressed: verify.py's
        docstring says why only then); bundles must pass at the tolerance whatever the dtype."""
        return weight_dtype == "f32" and self.dtype in (None, DtypeStr.FLOAT32) and self.compress is None

    def tract_nnef(self, dynamic_axes: dict[str, dict[int, str]], properties: dict[str, str]) -> TractNNEF:
        """The target of the decoder's export: this version, these axes and properties, the
        numerics options asked for; checked by the exporter itself (check_io=False)."""
        return TractNNEF(
            self.target_version, check_io=False, dynamic_axes=dynamic_axes, specific_properties=properties,
            dump_identity_properties=False, force_attention_inner_in_f32=self.force_f32_attention,
            force_linear_accumulation_in_f32=self.force_f32_linear_accumulator,
            force_norm_in_f32=self.force_f32_normalization, reify_sdpa_operator=self.reify_sdpa_operator,
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


def _check_counts(num_logits_to_keep: Any, total: Any) -> None:
    if isinstance(num_logits_to_keep, bool) or not isinstance(num_logits_to_keep, int) or num_logits_to_keep < 0:
        raise T2NErrorInvalidArgument(
            f"num_logits_to_keep must be an int >= 0 (0 keeps the logits of every position), got {num_logits_to_keep!r}"
        )
    if isinstance(total, bool) or not isinstance(total, int) or total < 2:
        raise T2NErrorInvalidArgument(
            f"sample_generation_total_size (-sgts) must be an int >= 2 (the prompt length of the test modes), "
            f"got {total!r}"
        )
