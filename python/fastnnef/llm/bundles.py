"""Sample tokens, PyTorch's outputs on them, and the ``tests/`` IO bundles of the artefact.

Files (the names torch_to_nnef_llm 0.24.12 writes, keys = the graph's IO names, floats
stored as f32, ``input_ids`` as int64):

- ``tests/export_{inputs,outputs}.npz``: the example the graph was traced on: S new
  tokens continuing the prompt mode, whose cache is the past (P = N). S and P are both
  > 1 and different, so the trace cannot mistake one axis for the other; the past is
  real, not random numbers; the outputs are those of the traced run itself (no second
  forward: each forward of a large model reads every weight);
- ``tests/<mode>_{inputs,outputs}.npz`` for the modes of ``modes.json``, N = ``-sgts``:

  ==================  =====================================  ===================
  mode                input_ids                              past
  ==================  =====================================  ===================
  prompt              tokens 0..N-1                          empty (P = 0)
  prompt_with_past    tokens N//2..N-1 (a continuation)      cache of 0..N//2-1
  text_generation     token N-1                              cache of 0..N-2
  ==================  =====================================  ===================

Unlike the reference, ``prompt_with_past`` and ``text_generation`` continue the text
(the reference repeats tokens after their own past), so one forward of the prompt gives
every mode's expected outputs, and ``modes.json`` lists exactly the files written. A
model with linear-attention layers also runs the past of each mode: their states after
a prefix are not a slice of the states after the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastnnef.exceptions import T2NErrorInvalidArgument
from fastnnef.llm.wrapper import KVCacheLM


def trace_new_tokens(total: int) -> int:
    """S of the traced example, whose P is ``total`` (-sgts): 5, or 3 when P is 5."""
    return 5 if total != 5 else 3

MODES = ("prompt", "prompt_with_past", "text_generation")
MODES_JSON = "modes.json"

SAMPLE_TEXT = (
    "A lighthouse keeper kept a careful log of every ship that passed the rocky point. "
    "In winter the storms came early, and the lamp had to be trimmed twice each night. "
    "The keeper wrote down the wind, the tide and the colour of the sky before dawn, "
    "and the old notebooks still tell how the coast changed over forty years."
)


def sample_tokens(tokenizer: Any | None, vocab_size: int, count: int) -> torch.Tensor:
    """``[1, count]`` token ids: the sample text through the tokenizer (repeated if short),
    or, for checkpoints without one, seeded pseudo-random ids."""
    if tokenizer is None:
        generator = torch.Generator().manual_seed(0)
        return torch.randint(0, vocab_size, (1, count), generator=generator)
    ids: list[int] = list(tokenizer(SAMPLE_TEXT)["input_ids"])
    if not ids:
        raise T2NErrorInvalidArgument("the tokenizer turns the sample text into no token at all")
    while len(ids) < count:
        ids += list(tokenizer(" " + SAMPLE_TEXT, add_special_tokens=False)["input_ids"])
    return torch.tensor([ids[:count]], dtype=torch.int64)


@dataclass
class Bundle:
    """One IO case: the artefact's inputs and PyTorch's outputs, keyed by graph name."""

    name: str
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]

    def save(self, tests_dir: Path) -> list[Path]:
        paths = [tests_dir / f"{self.name}_inputs.npz", tests_dir / f"{self.name}_outputs.npz"]
        for path, tensors in zip(paths, (self.inputs, self.outputs)):
            arrays: dict[str, Any] = {k: _stored(v) for k, v in tensors.items()}
            np.savez(path, **arrays)
        return paths


def _stored(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    return (tensor.float() if tensor.is_floating_point() else tensor).numpy()


class TorchRunner:
    """Runs the wrapper in PyTorch and packs its IO as bundles."""

    def __init__(self, wrapper: KVCacheLM, cache_dtype: torch.dtype):
        self.wrapper = wrapper
        self.cache_dtype = cache_dtype
        self.input_names, self.output_names = wrapper.io_names()
        # The same model, keeping the logits of every position.
        self.every_position = KVCacheLM(wrapper.model, wrapper.layout, num_logits_to_keep=0)

    def export_inputs(self, prompt: Bundle, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The traced example's inputs: the tokens after the prompt, its cache as the past."""
        total = prompt.inputs[self.input_names[0]].shape[1]
        ids = tokens[:, total : total + trace_new_tokens(total)]
        return dict(zip(self.input_names, (ids, *list(prompt.outputs.values())[1:])))

    def _past(self, ids: torch.Tensor, cache: list[torch.Tensor], past: int) -> list[torch.Tensor]:
        """The cache after the first ``past`` tokens of ``ids``, whose full forward gave
        ``cache``: a slice of it, or a forward of the prefix when linear-attention states
        are part of it (see the module docstring)."""
        if not self.wrapper.linear_layers:
            return [c[:, :, :past] for c in cache]
        if past == 0:
            return self.wrapper.empty_cache(self.cache_dtype)
        with torch.no_grad():
            _, *prefix = self.every_position(ids[:, :past], *self.wrapper.empty_cache(self.cache_dtype))
        return prefix

    def mode_bundles(self, tokens: torch.Tensor, total: int) -> list[Bundle]:
        """The three modes on the first ``total`` tokens, from ONE forward of the prompt.

        The modes split the same prompt into a past and new tokens, and attention is
        causal: each mode's outputs are the prompt's logits at its new positions (the
        last ``num_logits_to_keep`` of them) and the cache of all ``total`` positions.
        Each forward of a large model reads every weight, so one is run, not three."""
        ids = tokens[:, :total]
        empty = self.wrapper.empty_cache(self.cache_dtype)
        with torch.no_grad():
            logits, *cache = self.every_position(ids, *empty)
        keep = self.wrapper.num_logits_to_keep
        bundles = []
        for name, past in zip(MODES, (0, total // 2, total - 1)):
            new_logits = logits[:, past:total]
            if keep:
                new_logits = new_logits[:, -keep:]
            inputs = (ids[:, past:], *self._past(ids, cache, past))
            bundles.append(Bundle(name, dict(zip(self.input_names, inputs)),
                                  dict(zip(self.output_names, (new_logits, *cache)))))
        return bundles


def write_modes_json(root: Path, bundles: Sequence[Bundle]) -> Path:
    path = root / MODES_JSON
    path.write_text(json.dumps({"pytorch_supported_modes": [b.name for b in bundles]}))
    return path
