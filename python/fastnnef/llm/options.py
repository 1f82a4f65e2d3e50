"""The choices of the LLM exporter's options, one enum each: the CLI's ``choices`` and the
API's validation both come from here."""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

import torch

from fastnnef.exceptions import T2NErrorInvalidArgument

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
