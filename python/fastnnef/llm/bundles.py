"""Sample tokens, PyTorch's outputs on them, and the ``tests/`` IO bundles of the artefact.

Files (the names torch_to_nnef_llm 0.24.12 writes, keys = the graph's IO names, floats
stored as f32, ``input_ids`` as int64):

- ``tests/export_{inputs,outputs}.npz``: the example the graph is traced on: S new
  tokens continuing the prompt mode, whose cache is the past (P = N). S and P are both
  > 1 and different, so the trace cannot mistake one axis for the other; the past is
  real, not random numbers. Its outputs come from the same forward as the modes' (the
  prompt and its S continuation tokens at once): each forward of a large model reads
  every weight, so the trace itself needs no weight values (``trace_on_stand_ins``);
- ``tests/<mode>_{inputs,outputs}.npz`` for the modes of ``modes.json``, N = ``-sgts``:

  ==================  =====================================  ===================
  mode                input_ids                              past
  ==================  =====================================  ===================
  prompt              tokens 0..N-1                          empty (P = 0)
  prompt_with_past    tokens N//2..N-1 (a continuation)      cache of 0..N//2-1
  text_generation     token N-1                              cache of 0..N-2
  ==================  =====================================  ===================

Unlike the reference, ``prompt_with_past`` and ``text_generation`` continue the text
(the reference repeats tokens after their own past), so one forward of the prompt and
the S tokens after it gives every mode's expected outputs and the traced example's,
and ``modes.json`` lists exactly the files written. A model with linear-attention or state-space layers
also runs the past of each mode and the traced example: their states after a prefix are
not a slice of the states after the whole text.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastnnef.exceptions import T2NErrorConsistency, T2NErrorInvalidArgument
from fastnnef.llm.wrapper import KVCacheLM


@contextlib.contextmanager
def fast_cpu_kernels(dtype: torch.dtype) -> Iterator[None]:
    """Torch's CPU kernels for ``dtype`` where oneDNN's are slow: without AVX512-FP16 or
    AMX-FP16, oneDNN runs f16 matmuls in reference kernels, ~40x slower than torch's own
    (a [32, 15, 128] x [32, 128, 15] attention product: 0.65 s against 16 ms), which
    dominated the forward of an f16 model. Other dtypes keep oneDNN (bf16 is fast there)."""
    enabled = torch._C._get_mkldnn_enabled()
    if dtype == torch.float16:
        torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


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

    def _past(self, ids: torch.Tensor, cache: list[torch.Tensor], past: int) -> list[torch.Tensor]:
        """The cache after the first ``past`` tokens of ``ids``, whose full forward gave
        ``cache``: a slice of it, or a forward of the prefix when linear-attention or state-space states
        are part of it (see the module docstring)."""
        if not self.wrapper.state_layers:
            return [c[:, :, :past] for c in cache]
        if past == 0:
            return self.wrapper.empty_cache(self.cache_dtype)
        with torch.no_grad():
            _, *prefix = self.every_position(ids[:, :past], *self.wrapper.empty_cache(self.cache_dtype))
        return prefix

    def example_inputs(self, tokens: torch.Tensor, total: int) -> tuple[torch.Tensor, ...]:
        """The inputs of ``bundles``' traced example without its forward: the same tokens,
        and a past of ``total`` positions of zeros (zero states). The capture runs on
        stand-ins, which read no value: only the sizes and dtypes count, and
        ``same_sizes`` checks them against the example's once the forward has run."""
        new = trace_new_tokens(total)
        return tokens[:, total: total + new], *self.wrapper.empty_cache(self.cache_dtype, total)

    def bundles(self, tokens: torch.Tensor, total: int) -> tuple[list[Bundle], Bundle]:
        """The three modes on the first ``total`` tokens, and the traced example (the
        ``trace_new_tokens(total)`` tokens after them, the prompt's cache as the past),
        from ONE forward of the prompt and those tokens.

        The modes split the same text into a past and new tokens, and attention is
        causal: each case's outputs are the text's logits at its new positions (the last
        ``num_logits_to_keep`` of them) and the cache of its past and new positions.
        Each forward of a large model reads every weight, so one is run, not four (two
        for a model with linear-attention or state-space layers, whose states are not sliced)."""
        new = trace_new_tokens(total)
        ids = tokens[:, : total + new]
        empty = self.wrapper.empty_cache(self.cache_dtype)
        with torch.no_grad():
            logits, *cache = self.every_position(ids if not self.wrapper.state_layers else ids[:, :total], *empty)
        modes = [self._case(name, ids, logits, cache, past, total) for name, past in
                 zip(MODES, (0, total // 2, total - 1))]
        past = list(modes[0].outputs.values())[1:]
        inputs = dict(zip(self.input_names, (ids[:, total:], *past)))
        if self.wrapper.state_layers:
            with torch.no_grad():
                outputs = dict(zip(self.output_names, self.wrapper(*inputs.values())))
            return modes, Bundle("export", inputs, outputs)
        return modes, self._case("export", ids, logits, cache, total, total + new)

    def _case(self, name: str, ids: torch.Tensor, logits: torch.Tensor, cache: list[torch.Tensor],
              past: int, end: int) -> Bundle:
        """Tokens ``past..end-1`` of ``ids`` after the cache of the first ``past``, from the
        forward of ``ids`` (or of its first ``end`` tokens) that gave ``logits`` and ``cache``."""
        new_logits = logits[:, past:end]
        keep = self.wrapper.num_logits_to_keep
        if keep:
            new_logits = new_logits[:, -keep:]
        until_end = cache if cache[0].shape[2] == end or self.wrapper.state_layers else [c[:, :, :end] for c in cache]
        inputs = (ids[:, past:end], *self._past(ids, cache, past))
        return Bundle(name, dict(zip(self.input_names, inputs)), dict(zip(self.output_names, (new_logits, *until_end))))


def same_sizes(example: Bundle, traced_on: Sequence[torch.Tensor]) -> None:
    """Raise unless the example's inputs have the sizes and dtypes of those the artefact
    was traced on (``TorchRunner.example_inputs``)."""
    got = [(tuple(t.shape), t.dtype) for t in example.inputs.values()]
    traced = [(tuple(t.shape), t.dtype) for t in traced_on]
    if got != traced:
        raise T2NErrorConsistency(
            f"the test bundles' example inputs {got} differ from those the artefact was traced on {traced}: "
            "please report this model"
        )


def write_modes_json(root: Path, bundles: Sequence[Bundle]) -> Path:
    path = root / MODES_JSON
    path.write_text(json.dumps({"pytorch_supported_modes": [b.name for b in bundles]}))
    return path
