"""Find a checkpoint (a directory, or a model id through ``hub.py``), check it, and load
it: the one place that reads weights.

``.safetensors`` checkpoints (one file, or shards listed by
``model.safetensors.index.json``) are *streamed*: the model is built with its parameters
on the ``meta`` device (its buffers, such as rotary ``inv_freq``, computed by
transformers' initialization as ``from_pretrained`` does), and each parameter is bound to an
:class:`~fastnnef.tensor.offload.OffloadedTensor` of the checkpoint, in the model's
dtype. No weight is read here; PyTorch runs read each one from a map of the file for
the op that uses it, and the export streams each from the file into its ``.dat``
member, converting the dtype or quantizing to Q4_0 on the way. Experts stored one tensor
per expert, which transformers stacks (and concatenates) into one parameter at load, are
bound to a :class:`~fastnnef.tensor.offload.ComposedOffloadedTensor` of those tensors,
composed as transformers' conversion mapping says when an op reads it or the export writes
it. Checkpoints that transformers converts otherwise, and ``.bin``/``.pt`` checkpoints,
are loaded in memory by ``from_pretrained``.

Sources: ``-d/--local-dir`` (a directory with ``config.json`` and the weights, or with
exactly one such subdirectory, as the reference accepts) or ``-s/--model-slug``,
resolved in the Hugging Face cache and downloaded there when missing (``hub.py``). Code
shipped with a checkpoint runs only with ``trust_remote_code``.

Every problem found here is a fastnnef error raised before anything is written: a
missing ``config.json``, a family known not to export (``architectures.refusal``), code that is not allowed to run,
a missing or corrupt shard, weights of the wrong shape, weights missing for the config.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fastnnef.exceptions import (
    T2NErrorCheckpoint,
    T2NErrorInvalidArgument,
    T2NErrorNotFoundFile,
)
from fastnnef.llm.architectures import Architecture, architecture_of
from fastnnef.llm.hub import DEFAULT_HF_DOWNLOAD_N_RETRIES, snapshot_dir
from fastnnef.llm.transformers_api import conversion_mapping, merge_operations
from fastnnef.log import get_logger
from fastnnef.tensor.offload import ComposedOffloadedTensor, OffloadedTensor, open_checkpoint
from fastnnef.tensor.offload_load import load_offloaded_checkpoint
from fastnnef.tensor.safetensors_file import SAFETENSORS_DTYPES

log = get_logger("fastnnef.llm")

CONFIG = "config.json"
SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_FILE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
CAUSAL_LM = "AutoModelForCausalLM"  # the auto class the LLM exporter loads with


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, no grad), its config and tokenizer."""

    directory: Path
    model: Any  # a transformers PreTrainedModel
    architecture: Architecture
    tokenizer: Any | None  # None when the checkpoint ships none (random test models)
    name_or_path: str
    streamed: bool  # weights are OffloadedTensors of the checkpoint's files, never loaded


def resolve_source(model_slug: str | None, local_dir: str | os.PathLike | None, revision: str | None = None,
                   hf_download_n_retries: int = DEFAULT_HF_DOWNLOAD_N_RETRIES) -> Path:
    """The checkpoint directory (holding config.json) for exactly one of the two sources;
    a model id comes from the Hugging Face cache, downloaded there when missing (``hub.py``)."""
    if (model_slug is None) == (local_dir is None):
        raise T2NErrorInvalidArgument(
            "give exactly one model source: -s/--model-slug (a Hugging Face model id) "
            "or -d/--local-dir (a checkpoint directory)"
        )
    if local_dir is not None:
        if revision is not None:
            raise T2NErrorInvalidArgument(
                f"--revision {revision!r} applies to -s/--model-slug only: a -d directory holds one revision"
            )
        return _config_dir(Path(local_dir))
    assert model_slug is not None
    return _config_dir(snapshot_dir(model_slug, revision, hf_download_n_retries))


def _config_dir(path: Path) -> Path:
    if not path.is_dir():
        raise T2NErrorNotFoundFile(f"checkpoint directory {path} does not exist")
    if (path / CONFIG).is_file():
        return path
    nested = [p for p in sorted(path.iterdir()) if (p / CONFIG).is_file()]
    if len(nested) == 1:
        return nested[0]
    found = f"several subdirectories hold one ({', '.join(p.name for p in nested)})" if nested else "none found"
    raise T2NErrorNotFoundFile(
        f"no {CONFIG} in {path} ({found}): point -d at a Hugging Face checkpoint directory "
        f"({CONFIG} plus *.safetensors weights)"
    )


def read_config(directory: Path, trust_remote_code: bool) -> Any:
    """The transformers config, after refusing code that is not allowed to run."""
    try:
        raw = json.loads((directory / CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise T2NErrorInvalidArgument(f"{directory / CONFIG} is not valid JSON: {err}") from err
    if not isinstance(raw, dict):
        raise T2NErrorInvalidArgument(f"{directory / CONFIG} does not hold a JSON object")
    if raw.get("auto_map") and not trust_remote_code:
        raise T2NErrorInvalidArgument(
            f"{directory} ships its own model code (auto_map in {CONFIG}: {sorted(raw['auto_map'])}), which "
            "fastnnef does not run unless allowed: pass --trust-remote-code (trust_remote_code=True) if you "
            "trust that code"
        )
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as err:
        raise T2NErrorInvalidArgument(f"transformers cannot read {directory / CONFIG}: {err}") from err


def _weight_files(directory: Path) -> list[Path]:
    """The safetensors files the checkpoint consists of (listed by its index, when sharded)."""
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as err:
            raise T2NErrorInvalidArgument(f"{index} is not a valid safetensors index: {err}") from err
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise T2NErrorNotFoundFile(
                f"{index} lists shards missing from {directory}: {', '.join(missing)}; the checkpoint is "
                "incomplete (finish the download or re-save it)"
            )
        return [directory / n for n in names]
    files = sorted(directory.glob("*.safetensors"))
    if not files and not any(directory.glob("*.bin")):
        raise T2NErrorNotFoundFile(
            f"no weights in {directory}: expected model.safetensors, sharded model-*.safetensors with "
            f"{SAFETENSORS_INDEX}, or pytorch_model.bin"
        )
    return files


def _auto_class(name: str) -> Any:
    """The transformers auto class that builds the model (``AutoModelForCausalLM`` for the
    LLM exporter, ``AutoModelForImageTextToText`` for multimodal checkpoints)."""
    import transformers

    return getattr(transformers, name)


def check_weights(directory: Path, config: Any, trust_remote_code: bool, auto_class: str = CAUSAL_LM) -> None:
    """Read every shard's header (not its data): a truncated or corrupt shard, or a weight
    whose shape differs from what the config builds, is reported by name."""
    from safetensors import safe_open

    with torch.device("meta"):  # shapes only: no memory for the weights
        # A copy: building a model settles fields of its config (attention implementation).
        skeleton = _auto_class(auto_class).from_config(copy.deepcopy(config), trust_remote_code=trust_remote_code)
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    wrong: list[str] = []
    for path in _weight_files(directory):
        try:
            with safe_open(str(path), framework="pt") as shard:
                for key in shard.keys():
                    shape = tuple(shard.get_slice(key).get_shape())
                    if key in expected and expected[key] != shape:
                        wrong.append(f"{key} is {list(shape)} in {path.name}, the config needs {list(expected[key])}")
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error type
            raise T2NErrorInvalidArgument(
                f"checkpoint shard {path} is corrupt or truncated ({err}): re-download or re-save it"
            ) from err
    if wrong:
        raise T2NErrorInvalidArgument(f"weights of {directory} do not fit its {CONFIG}: {_listed(wrong, '; ')}")


def load_checkpoint(
    directory: Path,
    dtype: torch.dtype | None,
    attn_implementation: str,
    trust_remote_code: bool,
    auto_class: str = CAUSAL_LM,
) -> Checkpoint:
    """Check and load the checkpoint in ``directory`` (see the module docstring) with the
    transformers auto class named ``auto_class``."""
    config = read_config(directory, trust_remote_code)
    architecture = architecture_of(config)
    files = _weight_files(directory)
    model = None
    source = _streamable(directory, files)
    if source is not None:
        model = _stream_weights(source, config, dtype, attn_implementation, trust_remote_code, auto_class)
    if model is None:
        check_weights(directory, config, trust_remote_code, auto_class)
        model = _load_weights(directory, config, dtype, attn_implementation, trust_remote_code, auto_class)
    model.eval()
    model.requires_grad_(False)
    return Checkpoint(
        directory=directory, model=model, architecture=architecture,
        tokenizer=load_tokenizer(directory, trust_remote_code),
        name_or_path=str(getattr(config, "_name_or_path", "") or directory),
        streamed=any(isinstance(p, OffloadedTensor) for p in model.parameters()),
    )


def _streamable(directory: Path, files: list[Path]) -> Path | None:
    """The file that opens the checkpoint for streaming, the one ``from_pretrained``
    reads (the index, else ``model.safetensors``, else the only ``.safetensors`` file),
    or None for checkpoints streaming does not read (``.bin``, several ``.safetensors``
    files without an index)."""
    for name in (SAFETENSORS_INDEX, SAFETENSORS_FILE):
        if (directory / name).is_file():
            return directory / name
    return files[0] if len(files) == 1 else None


def _stream_weights(
    source: Path, config: Any, dtype: torch.dtype | None, attn_implementation: str, trust_remote_code: bool,
    auto_class: str,
) -> Any | None:
    """The model with every parameter an OffloadedTensor of ``source``, or None when
    transformers must convert some checkpoint tensors at load in a way not supported here
    (see the module docstring).
    Missing, unexpected and wrongly shaped weights raise before anything is bound."""
    try:
        ckpt = open_checkpoint(source)
    except T2NErrorCheckpoint as err:
        raise T2NErrorInvalidArgument(
            f"checkpoint shard {source} is corrupt or truncated ({err}): re-download or re-save it"
        ) from err
    model_dtype = dtype or _auto_dtype(config, ckpt)
    # Built on meta: nothing is allocated, not even transiently (a parameter created on
    # the CPU then moved would still cost its size in address space).
    with torch.device("meta"):
        model: Any = _auto_class(auto_class).from_config(
            config, dtype=model_dtype, attn_implementation=attn_implementation, trust_remote_code=trust_remote_code,
        )
    # Buffers are not in checkpoints (rotary inv_freq, embedding scales): real storage,
    # filled by transformers' own initialization, as from_pretrained fills them.
    for module in model.modules():
        for attr, buffer in module._buffers.items():
            if buffer is not None and buffer.is_meta:
                module._buffers[attr] = torch.empty_like(buffer, device="cpu")
    model.initialize_weights()
    found = _checkpoint_names(model, ckpt, source.parent)
    if found is None:
        log.info("%s stores weights that transformers converts at load: loading them in memory", source)
        return None
    names, composed = found
    load_offloaded_checkpoint(model, ckpt, strict=False, key_map=lambda name: names.get(name, name), composed=composed)
    return model


def _auto_dtype(config: Any, ckpt: Any) -> torch.dtype:
    """``from_pretrained(dtype="auto")``'s choice: the config's dtype, else the dtype of
    the checkpoint's first floating-point tensor."""
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype):
        return dtype
    for key in ckpt.keys():
        found = SAFETENSORS_DTYPES.get(ckpt.info(key)[0])
        if found is not None and found.is_floating_point:
            return found
    return torch.float32


def _checkpoint_names(
    model: Any, ckpt: Any, directory: Path
) -> tuple[dict[str, str], dict[str, ComposedOffloadedTensor]] | None:
    """Model state name -> checkpoint key, renamed as ``from_pretrained`` renames them
    (transformers' conversion mapping, base-model prefix), and the parameters composed of
    several checkpoint tensors (see :func:`_composed`); None when a checkpoint tensor
    needs a conversion not supported here. Raises on weights missing for the config, of
    the wrong shape, or unused by the model."""
    state = model.state_dict(keep_vars=True)
    rename = _renamer(model, state)
    names: dict[str, str] = {}
    # model name -> (converter, {source pattern: checkpoint keys})
    converted: dict[str, tuple[Any, dict[str, list[str]]]] = {}
    unexpected: list[str] = []
    for key in ckpt.keys():
        name, conversion = rename(key)
        if name not in state:
            unexpected.append(key)
        elif conversion is None:
            names[name] = key
        else:
            converter, pattern = conversion
            converted.setdefault(name, (converter, {}))[1].setdefault(pattern, []).append(key)
    composed: dict[str, ComposedOffloadedTensor] = {}
    for name, (converter, sources) in converted.items():
        made = _composed(ckpt, name, converter, sources, state[name].dtype, directory)
        if made is None:
            return None
        composed[name] = made
    # Tied weights: one tensor under several names, found under any of them.
    groups: dict[int, list[str]] = {}
    for name, tensor in state.items():
        groups.setdefault(id(tensor), []).append(name)
    found = names.keys() | composed.keys()
    _refuse_missing(directory, [group[0] for group in groups.values() if not any(n in found for n in group)])
    wrong = []
    for name, key in names.items():
        _, shape, path = ckpt.info(key)
        if tuple(shape) != tuple(state[name].shape):
            wrong.append(f"{key} is {list(shape)} in {Path(path).name}, the config needs {list(state[name].shape)}")
    for name, tensor in composed.items():
        if tuple(tensor.shape) != tuple(state[name].shape):
            wrong.append(f"{name} composed of {tensor.key} is {list(tensor.shape)}, the config needs "
                         f"{list(state[name].shape)}")
    if wrong:
        raise T2NErrorInvalidArgument(f"weights of {directory} do not fit its {CONFIG}: {_listed(wrong, '; ')}")
    unexpected = [k for k in unexpected if not _ignorable(model, k)]
    if unexpected:
        raise T2NErrorInvalidArgument(
            f"{directory} holds weights its {CONFIG} does not use: {_listed(unexpected)}; the checkpoint belongs "
            "to another configuration"
        )
    return names, composed


def _composed(
    ckpt: Any, name: str, converter: Any, sources: dict[str, list[str]], dtype: torch.dtype, directory: Path
) -> ComposedOffloadedTensor | None:
    """The parameter ``name`` that ``converter`` makes of the checkpoint tensors
    ``sources`` (by source pattern), read only when used, or None for conversions not
    supported here (logged). Supported: transformers' ``MergeModulelist`` (a stack of the tensors of each pattern,
    in transformers' key order) optionally followed by ``Concatenate`` of the stacks, in
    the converter's pattern order (mixtral's and qwen2_moe's experts)."""
    MergeModulelist, Concatenate, dot_natural_key = merge_operations()
    ops = list(converter.operations)
    kinds = [type(op) for op in ops]
    if kinds not in ([MergeModulelist], [MergeModulelist, Concatenate]) or (
        getattr(converter, "quantization_operation", None) is not None
    ):
        log.debug("not streaming %s: conversion %s is not a stack (and concatenation) of tensors",
                  converter.target_patterns, [k.__name__ for k in kinds])
        return None
    if len(ops) == 1 and len(sources) != 1:
        log.debug("not streaming %s: several patterns merged without a concatenation", converter.target_patterns)
        return None
    counts = {p: len(sources.get(p, ())) for p in converter.source_patterns}
    if len(set(counts.values())) > 1:
        found = ", ".join(f"{n} for {p!r}" for p, n in counts.items())
        raise T2NErrorInvalidArgument(
            f"weights of {directory} do not fit its {CONFIG}: {name} is made of one tensor per expert and "
            f"projection, but the checkpoint holds {found}: some are missing"
        )
    # As Concatenate: the converter's pattern order; as from_pretrained: keys in natural order.
    groups = [sorted(sources[p], key=dot_natural_key) for p in converter.source_patterns]
    try:
        pieces = [[OffloadedTensor(ckpt, key, dtype) for key in group] for group in groups]
        return ComposedOffloadedTensor.compose(
            pieces, ops[0].dim, ops[1].dim if len(ops) == 2 else None, dtype
        )
    except T2NErrorCheckpoint as err:
        raise T2NErrorInvalidArgument(f"weights of {directory} do not fit its {CONFIG}: {err}") from err


def _renamer(model: Any, state: dict[str, Any]) -> Any:
    """``checkpoint key -> (model name, the converter beyond a rename that applies, or
    None)``, as ``from_pretrained`` maps keys (transformers' conversion mapping, then the
    base-model prefix); names unchanged when this transformers has no such mapping."""
    mapping = conversion_mapping(model)
    if mapping is None:
        return lambda key: (key, None)
    renamings, converters, rename_source_key = mapping
    prefix = model.base_model_prefix

    def rename(key: str) -> tuple[str, tuple[Any, str] | None]:
        name, pattern = rename_source_key(key, renamings, converters, prefix, state)
        if name not in state and key in state:  # as from_pretrained: a key needing no rename
            name, pattern = rename_source_key(key, [], [], prefix, state)
        if pattern is None:
            return name, None
        return name, (next(c for c in converters if pattern in c.source_patterns), pattern)

    return rename


def _ignorable(model: Any, key: str) -> bool:
    """Checkpoint tensors ``from_pretrained`` ignores without a warning: those the model
    declares ignorable, and buffers the model computes itself (old checkpoints saved
    rotary ``inv_freq`` and ``position_ids``)."""
    patterns = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    patterns += [r"rotary_emb\.inv_freq", r"(^|\.)position_ids$"]
    non_persistent = {f"{m}.{b}" if m else b for m, module in model.named_modules()
                      for b in module._non_persistent_buffers_set}
    return key in non_persistent or any(re.search(p, key) for p in patterns)


def _load_weights(
    directory: Path, config: Any, dtype: torch.dtype | None, attn_implementation: str, trust_remote_code: bool,
    auto_class: str,
) -> Any:
    """``from_pretrained`` in the checkpoint's dtype (or ``dtype``), so weights are loaded
    once, never converted after loading. Weights the config needs but the checkpoint
    lacks would be random: refused."""
    model: Any
    info: dict[str, Any]
    try:
        model, info = _auto_class(auto_class).from_pretrained(
            directory, config=config, dtype=dtype or "auto", attn_implementation=attn_implementation,
            local_files_only=True, trust_remote_code=trust_remote_code, output_loading_info=True,
        )
    except (OSError, RuntimeError, ValueError) as err:
        raise T2NErrorInvalidArgument(f"transformers cannot load the weights in {directory}: {err}") from err
    _refuse_missing(directory, sorted(info.get("missing_keys") or ()))
    return model


def _refuse_missing(directory: Path, missing: list[str]) -> None:
    if missing:
        raise T2NErrorInvalidArgument(
            f"weights missing from {directory} for its {CONFIG}: {_listed(missing)}; they would be "
            "random: the checkpoint is incomplete or belongs to another configuration"
        )


def _listed(items: list[str], sep: str = ", ") -> str:
    """The first five items, and how many more."""
    more = f" (and {len(items) - 5} more)" if len(items) > 5 else ""
    return sep.join(items[:5]) + more


def load_tokenizer(directory: Path, trust_remote_code: bool) -> Any | None:
    """The checkpoint's tokenizer, or None when it ships none (or one that fails to load:
    a tokenizer is only needed for sample text, -td and -dwtac)."""
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - tokenizer backends raise many types
        log.warning("the tokenizer in %s does not load (%s): using token ids without text", directory, err)
        return None
