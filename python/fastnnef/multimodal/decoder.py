"""The decoder artefact: the LLM exporter's ``KVCacheLM`` with the family's extra inputs
(modality embeddings, and what places them), its test bundles, and greedy generation
from an image prompt, end to end in tract, against Hugging Face's ``generate``.

IO, in order: ``input_ids``, ``in_cache_*`` (as the LLM exporter's), then the family's
inputs (``in_image_embeddings``, ...); outputs: ``outputs`` (logits), ``out_cache_*``,
then the family's outputs (``out_rope_deltas`` for Qwen-VL).

Bundles (``decoder/tests``, listed in ``decoder/modes.json`` except ``export``):

- ``export``: the traced example: the prompt after its first tokens (the image chunk,
  P > 0), so that S, P and the embedding count are all different sizes;
- ``prompt``: the whole image prompt (P = 0);
- ``text_generation``: the next token after it, fed the prompt's outputs (its cache and
  the family's extra outputs) back as inputs, as a runtime does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastnnef.check import TractArtefact
from fastnnef.llm.bundles import Bundle
from fastnnef.llm.verify import GenerationCheck, as_artefact_inputs, compare_generations, torch_generate
from fastnnef.llm.wrapper import KVCacheLM
from fastnnef.multimodal.family import DecoderInputs

PROMPT_INPUTS = ("input_ids", "attention_mask")  # what is not a modality input of HF's generate


@dataclass
class DecoderIO:
    """The decoder graph's names and dynamic axes."""

    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]


def decoder_io(wrapper: KVCacheLM, inputs: DecoderInputs) -> DecoderIO:
    """The wrapper's names and axes (its cache: keys and values, or a linear-attention
    layer's states), then the family's inputs."""
    names_in, names_out = wrapper.io_names()
    return DecoderIO(names_in + list(inputs.names), names_out + list(inputs.output_names),
                     {**wrapper.dynamic_axes(), **inputs.dynamic_axes})


class DecoderRunner:
    """Runs the decoder wrapper in PyTorch for the bundles and the traced example."""

    def __init__(self, wrapper: KVCacheLM, inputs: DecoderInputs, io: DecoderIO, cache_dtype: torch.dtype,
                 hidden: int):
        self.wrapper = wrapper
        self.inputs = inputs
        self.io = io
        self.cache_dtype = cache_dtype
        self.hidden = hidden
        self.n_cache = len(wrapper.io_names()[0]) - 1  # cache tensors after input_ids (none for a shared layer)

    def _run(self, name: str, values: Sequence[torch.Tensor]) -> Bundle:
        with torch.no_grad():
            outputs = self.wrapper(*values)
        return Bundle(name, dict(zip(self.io.input_names, values)), dict(zip(self.io.output_names, outputs)))

    def bundles(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor]) -> list[Bundle]:
        """``prompt`` and ``text_generation`` (module docstring)."""
        ids = processed["input_ids"]
        empty = self.wrapper.empty_cache(self.cache_dtype)
        initial = self.inputs.initial_outputs(self.hidden, self.cache_dtype)
        prompt = self._run("prompt", [ids, *empty, *self.inputs.prompt_values(processed, embeddings, initial)])
        out = list(prompt.outputs.values())
        next_id = out[0][:, -1:].argmax(-1)
        return [prompt, self._run("text_generation", [next_id, *out[1:]])]

    def export_inputs(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      placeholder_ids: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """The traced example: the prompt's text before its first placeholder split in two,
        the first part run as the past (module docstring)."""
        ids = processed["input_ids"]
        is_placeholder = torch.isin(ids[0], torch.tensor(list(placeholder_ids)))
        first = int(is_placeholder.nonzero()[0, 0]) if bool(is_placeholder.any()) else ids.shape[1] // 2
        # P of the trace: 2 or more where the text allows (a dynamic axis of 1 in the trace
        # could be taken for a static 1), before the first placeholder.
        past_len = max(1, min(max(2, first // 2), first - 1))
        empty = self.wrapper.empty_cache(self.cache_dtype)
        initial = self.inputs.initial_outputs(self.hidden, self.cache_dtype)
        past = self._run("past", [ids[:, :past_len], *empty, *initial])
        out = list(past.outputs.values())
        cache, extra = out[1 : 1 + self.n_cache], out[1 + self.n_cache :]
        return (ids[:, past_len:], *cache, *self.inputs.prompt_values(processed, embeddings, extra))


class TractMultimodalGenerator:
    """Greedy decoding with the decoder artefact and its own cache, from a prompt whose
    embeddings are given (the encoder artefacts' outputs). End-of-sequence and placeholder
    tokens are never picked, here and in Hugging Face's run: a generated placeholder would
    get the spliced embeddings fed back in the artefact, its own embedding in Hugging Face
    (trained models never generate one; tiny random ones may)."""

    def __init__(self, artefact: TractArtefact, inputs: DecoderInputs, empty_cache: Sequence[torch.Tensor],
                 hidden: int, dtype: torch.dtype, suppressed: Sequence[int]):
        self.artefact = artefact
        self.inputs = inputs
        self.empty_cache = list(empty_cache)
        self.hidden = hidden
        self.dtype = dtype
        self.suppressed = [*suppressed, *inputs.placeholder_ids]

    def generate(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor], count: int,
                 forced: Sequence[int] | None = None) -> tuple[list[int], list[np.ndarray]]:
        extras = self.inputs.prompt_values(processed, embeddings, self.inputs.initial_outputs(self.hidden, self.dtype))
        # In the artefact's input dtypes (f16 artefacts take f16); outputs fed back already are.
        values = as_artefact_inputs(self.artefact, [processed["input_ids"], *self.empty_cache, *extras])
        picks: list[int] = []
        rows: list[np.ndarray] = []
        for step in range(count):
            outputs = self.artefact.run(values)
            row = outputs[0][0, -1].astype(np.float64)
            if self.suppressed:
                row[self.suppressed] = -np.inf
            pick = int(np.argmax(row))
            picks.append(pick)
            rows.append(row)
            fed = forced[step] if forced is not None else pick
            # The cache and the extra outputs fed back, as a runtime does.
            values = [np.array([[fed]], dtype=np.int64), *outputs[1:]]
        return picks, rows


def check_generation(model: Any, generator: TractMultimodalGenerator, processed: dict[str, torch.Tensor],
                     embeddings: list[torch.Tensor], count: int, exact_required: bool,
                     tokenizer: Any | None) -> GenerationCheck:
    """Hugging Face's greedy ``generate`` on the processor's output (pixels and all) against
    tract: encoder artefacts' ``embeddings`` into the decoder artefact, then its own cache."""
    prompt = processed["input_ids"]
    modality_inputs = {k: v for k, v in processed.items() if k not in PROMPT_INPUTS}
    reference = torch_generate(model, prompt, count, generator.inputs.placeholder_ids, **modality_inputs)
    tract_tokens, rows = generator.generate(processed, embeddings, count)
    return compare_generations(
        prompt, reference, tract_tokens, rows,
        lambda: generator.generate(processed, embeddings, count, forced=reference)[0], exact_required, tokenizer,
    )

