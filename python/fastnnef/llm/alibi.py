"""ALiBi families (BLOOM, MPT): their attention biases built from the real key length.

transformers builds these biases in ways the traced wrapper cannot follow:

- BLOOM's ``build_alibi_tensor`` reads a 2-D padding mask ``[batch, keys]``, which it turns
  into key positions by a cumulative sum; the wrapper passes a 4-D additive mask instead.
  Here it is given what ``generate`` gives it: a mask of ones over the ``P+S`` keys.
- MPT's ``build_mpt_alibi_tensor`` makes a table of ``max_seq_len`` biases, which each
  attention slices to the key length by Python arithmetic on sizes (frozen by a trace).
  Here the table is built for the ``P+S`` keys and the ``S`` queries, so the slice takes
  all of it at any size.

Both give exactly the values transformers computes (BLOOM's from the same mask, MPT's
the last ``P+S`` entries of its table). As elsewhere in the wrapper, the model's own
classes are untouched: ``alibi_lengths`` shadows the builder method of the instances, for
one call, and restores them on exit.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

# The builder methods of transformers' ALiBi models (BloomModel, MptModel).
BLOOM_BUILDER = "build_alibi_tensor"
MPT_BUILDER = "build_mpt_alibi_tensor"


def alibi_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` whose class builds ALiBi biases by one of the methods above."""
    return [m for m in model.modules() if callable(getattr(type(m), BLOOM_BUILDER, None))
            or callable(getattr(type(m), MPT_BUILDER, None))]


def _bloom(module: Any, keys: int, mask: torch.Tensor, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
    # generate's padding mask: int64 ones over every key.
    ones = torch.ones((mask.shape[0], keys), dtype=torch.int64)
    return type(module).build_alibi_tensor(module, ones, num_heads, dtype)


def _mpt(module: Any, keys: int, queries: int, num_heads: int, _table_length: int, alibi_bias_max: int = 8,
         device: Any = None) -> torch.Tensor:
    # MptModel passes max_seq_len as the table's length: the key count replaces it.
    table = type(module).build_mpt_alibi_tensor(module, num_heads, keys, alibi_bias_max, device)
    # [heads, 1, keys] repeated for the S queries: MPT's attention slices the query axis from
    # max(0, rows - (P + 2S)), which torch.export proves 0 for S rows (1 row: only if S >= 1).
    return table.expand(-1, queries, -1)


@contextmanager
def alibi_lengths(modules: Sequence[nn.Module], past: int, new: int) -> Iterator[None]:
    """Within the block, the ALiBi builders of ``modules`` make biases for the ``past + new``
    keys (P+S, sizes read from the inputs: symbolic in the trace)."""
    keys = past + new
    for module in modules:
        if callable(getattr(type(module), BLOOM_BUILDER, None)):
            setattr(module, BLOOM_BUILDER, functools.partial(_bloom, module, keys))
        else:
            setattr(module, MPT_BUILDER, functools.partial(_mpt, module, keys, new))
    try:
        yield
    finally:
        for module in modules:
            for name in (BLOOM_BUILDER, MPT_BUILDER):
                module.__dict__.pop(name, None)
