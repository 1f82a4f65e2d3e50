"""``multimodal.json``: the manifest tying the encoder artefacts to the decoder artefact,
in torch_to_nnef_llm's schema (a runtime written for its exports reads ours)::

    {"decoder": {"path": "decoder/model.nnef.tgz"},
     "encoders": [{"modality": "image", "path": "vision/model.nnef.tgz",
                   "placeholder_token_id": 151655,
                   "input": {...host-side input contract...},
                   "outputs": [{"name": "out_image_embeddings", "feeds": "in_image_embeddings",
                                "shape": ["IMG_STATE", 3584], "dtype": "f32"}],
                   "deepstack": [{"layer": 0, "name": "out_image_deepstack_0",
                                  "feeds": "in_image_deepstack_0", "shape": [...], "dtype": "f32"}]}],
     "injection_layers": {"image": [0, 1, 2]}}

``deepstack`` and ``injection_layers`` appear only for families with extra injection
streams (Qwen3-VL). Each encoder entry is one :class:`EmbeddingContract`: the encoder
emits ``out_<modality>_embeddings [axis, hidden]``, the decoder takes the same tensor as
``in_<modality>_embeddings`` and splices its rows at the placeholder tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = "multimodal.json"
DECODER_DIRNAME = "decoder"  # the decoder's folder; an encoder's is its modality ("vision")
ARTEFACT_NAME = "model.nnef.tgz"
DEEPSTACK_AXIS = "IMG_DEEP"  # the row count of the DeepStack streams (torch_to_nnef_llm's symbol)


def deepstack_output_name(modality: str, index: int) -> str:
    return f"out_{modality}_deepstack_{index}"


def deepstack_input_name(modality: str, index: int) -> str:
    return f"in_{modality}_deepstack_{index}"


@dataclass(frozen=True)
class EmbeddingContract:
    """One encoder output stream and the decoder input it feeds (module docstring)."""

    modality: str  # "image", "audio"
    hidden_size: int
    placeholder_token_id: int
    dynamic_axis: str
    injection_layers: tuple[int, ...] = ()  # DeepStack: decoder layers of the extra streams
    deepstack_dynamic_axis: str = ""

    @property
    def output_name(self) -> str:
        return f"out_{self.modality}_embeddings"

    @property
    def input_name(self) -> str:
        return f"in_{self.modality}_embeddings"


@dataclass(frozen=True)
class EncoderArtefact:
    """One written encoder: its folder label ("vision"), path, contract, input contract."""

    label: str
    rel_path: str
    contract: EmbeddingContract
    input_contract: dict[str, Any] | None = None


def build_manifest(decoder_rel_path: str, encoders: list[EncoderArtefact], dtype: str) -> dict[str, Any]:
    """The manifest's content (no I/O)."""
    entries: list[dict[str, Any]] = []
    injection: dict[str, list[int]] = {}
    for encoder in encoders:
        c = encoder.contract
        entry: dict[str, Any] = {"modality": c.modality, "path": encoder.rel_path,
                                 "placeholder_token_id": c.placeholder_token_id}
        if encoder.input_contract is not None:
            entry["input"] = encoder.input_contract
        entry["outputs"] = [{"name": c.output_name, "feeds": c.input_name, "shape": [c.dynamic_axis, c.hidden_size],
                             "dtype": dtype}]
        if c.injection_layers:
            axis = c.deepstack_dynamic_axis or c.dynamic_axis
            entry["deepstack"] = [
                {"layer": layer, "name": deepstack_output_name(c.modality, i),
                 "feeds": deepstack_input_name(c.modality, i), "shape": [axis, c.hidden_size], "dtype": dtype}
                for i, layer in enumerate(c.injection_layers)
            ]
            injection[c.modality] = list(c.injection_layers)
        entries.append(entry)
    manifest: dict[str, Any] = {"decoder": {"path": decoder_rel_path}, "encoders": entries}
    if injection:
        manifest["injection_layers"] = injection
    return manifest


def write_manifest(root: Path, manifest: dict[str, Any]) -> Path:
    path = root / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2))
    return path
