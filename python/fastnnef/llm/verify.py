"""Verification in the tract linked into fastnnef: the IO bundles, and greedy generation
with tract's KV cache against Hugging Face's own ``generate``.

- Every bundle (the traced example and each mode of ``modes.json``) is run through the
  artefact and compared with PyTorch's outputs at the requested tolerance; a failure
  fails the export whatever the dtype (for Q4_0 both engines run the same dequantized
  values).
- Generation: the artefact processes the prompt (P = 0), then generates token by token
  (S = 1) from its own output cache. Hugging Face's ``generate`` runs greedily on the
  same model, with its own cache classes and masks (sliding windows included), so a
  wrong position, mask or cache in the export shows up as different tokens. For f32
  models the tokens must be equal; otherwise (f16, bf16, Q4_0) the first divergence
  and the agreement rate are reported, not gated: the engines round half precision
  differently, one different rounding flips a close argmax and the sequences then part
  for good, so token equality says little there, while each step's numerics are gated
  by the bundles. The agreement rate is teacher-forced: at each step tract is fed
  PyTorch's previous tokens and its next token is compared.

A divergence at a near tie (tract's logits for both tokens within 1e-4 relative) is
reported as such and does not fail an f32 check: float rounding may pick either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fastnnef import _native
from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorIOPytorchTractNotISO, T2NErrorIoQuantity
from fastnnef.llm.bundles import Bundle

NEAR_TIE = 1e-4


@dataclass
class BundleCheck:
    """One bundle run through tract: per output, tract's comparison report."""

    name: str
    reports: dict[str, str]
    ok: bool


@dataclass
class GenerationCheck:
    """Greedy generation, PyTorch (Hugging Face ``generate``) against tract."""

    prompt: list[int]
    torch_tokens: list[int]
    tract_tokens: list[int]
    first_divergence: int | None  # index in the generated tokens, None when equal
    agreement: float  # teacher-forced fraction of steps where tract picks PyTorch's token
    near_tie: bool = False  # the first divergence is between two (almost) equal logits
    exact_required: bool = True  # f32 weights and compute: tokens must be equal
    texts: dict[str, str] = field(default_factory=dict)  # decoded, when a tokenizer exists

    @property
    def ok(self) -> bool:
        return not self.exact_required or self.first_divergence is None or self.near_tie

    def divergence(self) -> str:
        """Where the tokens first differ: the step, the prompt, PyTorch's and tract's tokens."""
        i = self.first_divergence
        if i is None:
            return self.summary()
        tie = ", at a near tie" if self.near_tie else ""
        return (f"at generated token {i} of {len(self.torch_tokens)} (after the {len(self.prompt)}-token prompt "
                f"{self.prompt} and {self.torch_tokens[:i]}), PyTorch picks token {self.torch_tokens[i]} and tract "
                f"{self.tract_tokens[i]}{tie}; teacher-forced agreement {self.agreement:.1%}")

    def summary(self) -> str:
        n = len(self.torch_tokens)
        if self.first_divergence is None:
            return f"{n} greedy tokens identical in tract and PyTorch"
        tie = " (at a near tie)" if self.near_tie else ""
        return (f"first divergence at generated token {self.first_divergence} of {n}{tie}, "
                f"agreement {self.agreement:.1%}")


def as_artefact_inputs(artefact: TractArtefact, values: Sequence[Any]) -> list[np.ndarray]:
    """``values`` as the artefact's input dtypes (bundles store floats as f32; an f16
    artefact takes f16, as tract's CLI check does with --allow-float-casts)."""
    if len(values) != len(artefact.input_facts):
        raise T2NErrorIoQuantity(
            f"{len(values)} input values for an artefact with {len(artefact.input_facts)} inputs "
            f"{artefact.input_names}"
        )
    arrays = []
    for value, (dtype, _) in zip(values, artefact.input_facts, strict=True):
        array = value.detach().float().numpy() if isinstance(value, torch.Tensor) and value.is_floating_point() \
            else (value.numpy() if isinstance(value, torch.Tensor) else value)
        arrays.append(array.astype(np.float16) if dtype == "f16" and array.dtype == np.float32 else array)
    return arrays


def check_bundle(artefact: TractArtefact, bundle: Bundle, tolerance: str) -> BundleCheck:
    """Run one bundle in tract and compare each output with PyTorch's at ``tolerance``."""
    got = artefact.run(as_artefact_inputs(artefact, list(bundle.inputs.values())))
    if len(got) != len(bundle.outputs):  # an output left unchecked would pass unseen
        raise T2NErrorIoQuantity(
            f"bundle {bundle.name!r} holds {len(bundle.outputs)} outputs {list(bundle.outputs)}, "
            f"tract gave {len(got)} ({artefact.output_names})"
        )
    reports: dict[str, str] = {}
    ok = True
    for (name, expected), obtained in zip(bundle.outputs.items(), got, strict=True):
        # Compared in tract's output dtype: tract's tolerance levels are looser for f16.
        want = expected.detach().float().numpy().astype(obtained.dtype)
        report = _native.compare(want, obtained, tolerance)
        reports[name] = str(report)
        ok = ok and report.ok
    return BundleCheck(bundle.name, reports, ok)


def raise_on_failed_bundles(checks: Sequence[BundleCheck], tolerance: str) -> None:
    """Raise T2NErrorIOPytorchTractNotISO naming the failed bundles and their reports."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return
    text = "\n".join(f"{c.name}: {n}: {r}" for c in failed for n, r in c.reports.items())
    message = (f"tract's outputs differ from PyTorch's at tolerance {tolerance} on bundle(s) "
               f"{', '.join(c.name for c in failed)}:\n{text}")
    raise T2NErrorIOPytorchTractNotISO(message + "\nNothing was written; a looser -tt tolerance may fit half precision")


def torch_generate(model: Any, prompt: torch.Tensor, count: int, suppressed: Sequence[int] = (),
                   **model_inputs: torch.Tensor) -> list[int]:
    """Hugging Face's greedy ``generate`` of exactly ``count`` tokens (``model_inputs``:
    what else the model takes with the prompt, e.g. a multimodal model's pixel values;
    ``suppressed``: tokens never picked, besides end-of-sequence ones).

    Only greedy search acts: the checkpoint's generation defaults (repetition penalty,
    sampling settings, banned words, ...) are set aside for the call, and end-of-sequence
    tokens are suppressed until ``count`` tokens (``min_new_tokens``), which the tract
    loop mirrors (``eos_ids``)."""
    from transformers import GenerationConfig

    eos = eos_ids(model)
    saved = model.generation_config
    # A fresh config on our own model instance, restored below: generate() fills every
    # unset field from model.generation_config.
    model.generation_config = GenerationConfig(eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
                                               suppress_tokens=list(suppressed) or None)
    try:
        with torch.no_grad():
            out = model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=False, num_beams=1,
                max_new_tokens=count, min_new_tokens=count, **model_inputs,
            )
    finally:
        model.generation_config = saved
    return [int(t) for t in out[0, prompt.shape[1]:]]


def eos_ids(model: Any) -> list[int]:
    """The end-of-sequence ids ``generate`` suppresses until the requested length."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


class TractGenerator:
    """Greedy decoding with the artefact and its own KV cache.

    ``recompute_length``: when the sequence reaches that many tokens, the whole sequence is
    re-processed with an empty cache, once, as Hugging Face's generation does for phi3
    (``Architecture.recompute_past_field``)."""

    def __init__(self, artefact: TractArtefact, empty_cache: Sequence[torch.Tensor], suppressed: Sequence[int],
                 recompute_length: int | None = None):
        self.artefact = artefact
        self.empty_cache = list(empty_cache)
        self.suppressed = list(suppressed)
        self.recompute_length = recompute_length

    def _next(self, logits: np.ndarray) -> tuple[int, np.ndarray]:
        row = logits[0, -1].astype(np.float64)
        if self.suppressed:
            row = row.copy()
            row[self.suppressed] = -np.inf
        return int(np.argmax(row)), row

    def generate(
        self, prompt: torch.Tensor, count: int, forced: Sequence[int] | None = None
    ) -> tuple[list[int], list[np.ndarray]]:
        """``count`` tokens after ``prompt``; with ``forced``, the token fed at each step
        is ``forced[i]`` (teacher forcing) instead of tract's own pick. Returns tract's
        picks and the logits rows they came from."""
        ids, *empty = as_artefact_inputs(self.artefact, [prompt, *self.empty_cache])
        sequence = [int(t) for t in prompt[0]]
        cache = empty
        picks: list[int] = []
        rows: list[np.ndarray] = []
        for step in range(count):
            if step > 0 and len(sequence) == self.recompute_length:
                ids, cache = np.array([sequence], dtype=np.int64), empty
            outputs = self.artefact.run([ids, *cache])
            pick, row = self._next(outputs[0])
            picks.append(pick)
            rows.append(row)
            cache = outputs[1:]
            fed = forced[step] if forced is not None else pick
            sequence.append(fed)
            ids = np.array([[fed]], dtype=np.int64)
        return picks, rows


def check_generation(
    model: Any, artefact: TractArtefact, empty_cache: Sequence[torch.Tensor], prompt: torch.Tensor,
    count: int, exact_required: bool, tokenizer: Any | None = None, recompute_length: int | None = None,
) -> GenerationCheck:
    """Greedy generation of ``count`` tokens in PyTorch and in tract (module docstring)."""
    reference = torch_generate(model, prompt, count)
    generator = TractGenerator(artefact, empty_cache, eos_ids(model), recompute_length)
    tract_tokens, rows = generator.generate(prompt, count)
    return compare_generations(
        prompt, reference, tract_tokens, rows, lambda: generator.generate(prompt, count, forced=reference)[0],
        exact_required, tokenizer,
    )


def compare_generations(
    prompt: torch.Tensor, reference: list[int], tract_tokens: list[int], rows: Sequence[np.ndarray],
    forced_tract: Callable[[], list[int]], exact_required: bool, tokenizer: Any | None,
) -> GenerationCheck:
    """PyTorch's and tract's greedy tokens compared: the first divergence, whether it is a
    near tie in tract's logits ``rows``, and how often tract agrees when fed PyTorch's
    tokens (``forced_tract``: tract's picks under teacher forcing, run only on divergence)."""
    divergence = next((i for i, (a, b) in enumerate(zip(reference, tract_tokens)) if a != b), None)
    near_tie, agreement = False, 1.0
    if divergence is not None:
        row = rows[divergence]
        gap = row[tract_tokens[divergence]] - row[reference[divergence]]
        near_tie = bool(gap <= NEAR_TIE * max(1.0, abs(row[tract_tokens[divergence]])))
        agreement = float(np.mean([a == b for a, b in zip(forced_tract(), reference)]))
    texts = {}
    if tokenizer is not None:
        texts = {"prompt": tokenizer.decode(prompt[0]), "torch": tokenizer.decode(reference),
                 "tract": tokenizer.decode(tract_tokens)}
    return GenerationCheck(
        prompt=[int(t) for t in prompt[0]], torch_tokens=reference, tract_tokens=tract_tokens,
        first_divergence=divergence, agreement=agreement, near_tie=near_tie, exact_required=exact_required,
        texts=texts,
    )
