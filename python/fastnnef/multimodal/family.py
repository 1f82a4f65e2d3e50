"""What the multimodal exporter knows of one family: its encoders (tower + projector, the
graph each becomes, how the processor's output feeds it, how Hugging Face computes the
same embeddings) and the decoder's extra inputs (``llm.wrapper.ExtraInputs``).

The family modules (``qwen2_5_vl.py``, ...) each define one :class:`Family`; the table of
them is ``families.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class EncoderSpec:
    """One encoder graph: ``<modality>/model.nnef.tgz``, emitting ``out_<embeds>_embeddings``."""

    modality: str  # the folder and the manifest's encoder label: "vision", "audio"
    embeds: str  # the contract's modality: "image" (in/out_image_embeddings), "audio"
    placeholder_attr: str  # the config attribute holding the placeholder token id
    dynamic_axis: str  # the symbol of the embeddings' row count, shared with the decoder input
    input_names: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]]
    build: Callable[[Any], nn.Module]  # the traced module (tower + projector) of the HF model
    # The encoder graph's inputs for ONE item (an image: ``Sample.items``).
    graph_inputs: Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, ...]]
    # Hugging Face's own outputs for that item, in the graph's output order: the
    # embeddings the decoder receives in HF, then any extra streams (DeepStack).
    reference: Callable[[Any, dict[str, torch.Tensor]], list[torch.Tensor]]
    # The manifest's host-side input contract (how to shape the processor's tensor).
    input_contract: Callable[[Any], dict[str, Any]]
    extra_output_names: Callable[[Any], list[str]] = lambda config: []  # DeepStack streams
    # The decoder layers the extra streams are added at (the manifest's injection_layers).
    injection_layers: Callable[[Any], tuple[int, ...]] = lambda config: ()
    fixed_size: bool = False  # the tower takes one image size only (no dynamic patch count)
    # How many of an item's output rows the decoder takes (None: all): an encoder of fixed
    # input size emits rows for its padding too, which the runtime drops.
    rows: Callable[[dict[str, torch.Tensor]], int] | None = None
    # The item the encoder is traced on, from the sample's items (default: the first). A
    # dynamic axis must not be 1 in the trace: the export would take it for a static 1.
    trace_item: Callable[[list[dict[str, torch.Tensor]]], dict[str, torch.Tensor]] = lambda items: items[0]

    @property
    def output_name(self) -> str:
        return f"out_{self.embeds}_embeddings"


@dataclass
class Sample:
    """The sample prompt with its media through the processor."""

    inputs: dict[str, torch.Tensor]  # the processor's output, as Hugging Face's generate takes it
    # Per encoder, per item in prompt order: that item's own tensors (one image's pixels...).
    items: list[list[dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class Family:
    """A multimodal ``model_type``: its encoders and its decoder's extra inputs."""

    model_type: str
    models: str  # the model families it covers, for docs and messages
    tower_attr: str  # the config attribute the modality tower is built from ("vision_config")
    auto_class: str  # the transformers auto class that builds the whole model
    encoders: tuple[EncoderSpec, ...]
    decoder_inputs: Callable[[Any], DecoderInputs]  # from the HF model
    decoder_modules: tuple[str, ...]  # the decoder's module paths in the HF model (what -c compresses)
    # The sample prompt holding the sample media (samples.py), through the processor.
    sample: Callable[[Any], Sample]
    # What ``sample`` takes, from the checkpoint folder (and trust_remote_code); None: the
    # checkpoint's processor (AutoProcessor). A family whose processor needs a package we
    # cannot depend on (Voxtral's: mistral_common) loads its own parts.
    load_processor: Callable[[Path, bool], Any] | None = None


class DecoderInputs(ABC):
    """The decoder's inputs after the cache (an ``llm.wrapper.ExtraInputs``), named, with
    their values for a prompt and for a generation step."""

    names: tuple[str, ...]
    output_names: tuple[str, ...] = ()
    dynamic_axes: dict[str, dict[int, str]]
    placeholder_ids: tuple[int, ...]  # the tokens whose embeddings are replaced

    @property
    def count(self) -> int:
        return len(self.names)

    @abstractmethod
    def feed(
        self, model: Any, input_ids: torch.Tensor, past: int, extras: tuple[torch.Tensor, ...],
        masks: dict[str, torch.Tensor],
    ) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        """``ExtraInputs.feed``: the model's ``inputs_embeds``/``position_ids`` (and
        ``attention_masks`` when the family widens the causal ones), extra outputs."""

    @abstractmethod
    def initial_outputs(self, hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
        """The extra outputs "before the first chunk": what a chunk without placeholders
        is fed first (no embeddings: ``[0, hidden]``). After a chunk, the runtime feeds
        its extra outputs back as these inputs, as it does the cache."""

    @abstractmethod
    def prompt_values(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      previous: list[torch.Tensor]) -> list[torch.Tensor]:
        """The values of these inputs for a chunk holding every placeholder of the prompt:
        ``processed`` is the processor's output, ``embeddings`` the encoders' outputs (every
        output of each encoder in order, items concatenated), ``previous`` the preceding
        chunk's extra outputs."""
