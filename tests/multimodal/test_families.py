"""Every multimodal family end to end, from a tiny random checkpoint and its processor:
the sample prompt with two images of different sizes through the processor; each encoder
artefact in tract against Hugging Face's embeddings at both sizes; the decoder's bundles;
16 greedy tokens generated in tract from the ENCODER ARTEFACTS' embeddings spliced into
the decoder artefact, equal to Hugging Face's ``generate`` on the pixels (f32), both on
the model the export streamed and on one loaded by ``from_pretrained`` (a binding
mistake in fastnnef's loading would be on both sides of the first). One export per family
per session (``conftest.exported``)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastnnef.check import TractArtefact
from fastnnef.llm.verify import torch_generate
from fastnnef.multimodal.decoder import PROMPT_INPUTS
from fastnnef.multimodal.families import FAMILIES

pytestmark = pytest.mark.parametrize("name", sorted(FAMILIES))


def test_image_prompt_generates_as_hugging_face(exported: Callable[[str], Any], name: str) -> None:
    report = exported(name)
    assert report.verified and report.model_type == name
    generation = report.generation
    assert generation.first_divergence is None and len(generation.tract_tokens) == 16
    assert generation.tract_tokens == generation.torch_tokens
    assert [b.name for b in report.bundle_checks] == ["export", "prompt", "text_generation"]
    assert all(b.ok for b in report.bundle_checks)
    # The prompt holds every sample image's placeholders.
    manifest = json.loads(report.manifest_path.read_text())
    placeholder = manifest["encoders"][0]["placeholder_token_id"]
    assert generation.prompt.count(placeholder) > 0


def test_image_prompt_generates_as_from_pretrained(exported: Callable[[str], Any],
                                                  mm_checkpoint: Callable[..., Path], name: str) -> None:
    """tract's tokens (encoder and decoder artefacts) equal ``generate`` on the pixels by
    the model Hugging Face's ``from_pretrained`` loads from the same checkpoint."""
    generation = exported(name).generation
    model, sample = _hugging_face(mm_checkpoint(name), name)
    prompt = sample.inputs["input_ids"]
    assert prompt[0].tolist() == generation.prompt
    media = {k: v for k, v in sample.inputs.items() if k not in PROMPT_INPUTS}
    placeholders = FAMILIES[name].decoder_inputs(model).placeholder_ids
    expected = torch_generate(model, prompt, len(generation.tract_tokens), placeholders, **media)
    assert generation.tract_tokens == expected


def _hugging_face(directory: Path, name: str) -> tuple[Any, Any]:
    """The family's model loaded by ``from_pretrained`` (eager attention, as the export's),
    and the sample prompt through the checkpoint's processor."""
    import transformers

    family = FAMILIES[name]
    model = getattr(transformers, family.auto_class).from_pretrained(directory, attn_implementation="eager").eval()
    processor = (family.load_processor(directory, False) if family.load_processor
                 else transformers.AutoProcessor.from_pretrained(directory))
    return model, family.sample(processor)


def test_encoders_checked_at_two_processor_sizes(exported: Callable[[str], Any], name: str) -> None:
    checks = exported(name).encoder_checks
    assert [c.item for c in checks] == [0, 1] and all(c.ok for c in checks)
    if not FAMILIES[name].encoders[0].fixed_size:
        assert checks[0].input_shape != checks[1].input_shape  # the dynamic axes are exercised


def test_layout_manifest_and_io_names(exported: Callable[[str], Any], name: str) -> None:
    report = exported(name)
    root = report.export_dir
    family = FAMILIES[name]
    assert set(report.files) >= {"multimodal.json", "decoder/model.nnef.tgz", "decoder/modes.json",
                                 "decoder/tests/prompt_inputs.npz", "decoder/tests/text_generation_outputs.npz",
                                 *(f"{e.modality}/model.nnef.tgz" for e in family.encoders),
                                 *(f"{e.modality}/tests/export_inputs.npz" for e in family.encoders)}
    manifest = json.loads((root / "multimodal.json").read_text())
    assert manifest["decoder"] == {"path": "decoder/model.nnef.tgz"}
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    # Layer 0's cache: keys, or a gated-delta-net layer's states (Qwen3.5).
    assert decoder.input_names[0] == "input_ids" and decoder.output_names[0] == "outputs"
    assert decoder.input_names[1] in ("in_cache_key_0", "in_cache_conv_0")
    for spec, entry in zip(family.encoders, manifest["encoders"]):
        assert entry["modality"] == spec.embeds and entry["path"] == f"{spec.modality}/model.nnef.tgz"
        (output,) = entry["outputs"]
        assert output["name"] == f"out_{spec.embeds}_embeddings" and output["feeds"] == f"in_{spec.embeds}_embeddings"
        assert output["shape"][0] == spec.dynamic_axis and output["dtype"] == "f32"
        assert output["feeds"] in decoder.input_names
        encoder = TractArtefact.load(root / spec.modality / "model.nnef.tgz")
        assert encoder.input_names == list(spec.input_names) and encoder.output_names[0] == output["name"]
    with np.load(root / "decoder" / "tests" / "prompt_inputs.npz") as bundle:
        assert list(bundle.keys()) == decoder.input_names


def test_weights_written_once_each_in_its_own_graph(exported: Callable[[str], Any], name: str) -> None:
    root = exported(name).export_dir
    family = FAMILIES[name]

    def labels(path: Path) -> str:
        with tarfile.open(path) as tar:
            member = tar.extractfile("graph.nnef")
            assert member is not None
            return member.read().decode()

    decoder = labels(root / "decoder" / "model.nnef.tgz")
    encoders = [labels(root / e.modality / "model.nnef.tgz") for e in family.encoders]
    text_model = family.decoder_modules[0].split(".")[-1]  # language_model, text_model
    assert f"{text_model}.layers.0" in decoder and all(f"{text_model}." not in e for e in encoders)
    assert all(".layers.0." in e or ".blocks.0." in e for e in encoders)


def test_decoder_wrapper_equals_hugging_face_on_the_image_prompt(mm_checkpoint: Callable[..., Path],
                                                                   name: str) -> None:
    """The decoder wrapper's logits at EVERY prompt position (Hugging Face's embeddings
    spliced, the family's positions and masks) equal Hugging Face's forward on the pixels:
    stricter than 16 greedy tokens, which a wrong mask over the image tokens may leave
    unchanged (Gemma3's bidirectional image blocks)."""
    import torch

    from fastnnef.llm.architectures import kv_layout
    from fastnnef.llm.wrapper import KVCacheLM
    from fastnnef.multimodal.encoder import concatenated

    family = FAMILIES[name]
    model, sample = _hugging_face(mm_checkpoint(name), name)
    inputs = family.decoder_inputs(model)
    hidden = model.config.get_text_config().hidden_size
    embeddings = [t for spec, items in zip(family.encoders, sample.items)
                  for t in concatenated(spec, items, [spec.reference(model, item) for item in items])]
    wrapper = KVCacheLM(model, kv_layout(model.config), 0, inputs)
    values = inputs.prompt_values(sample.inputs, embeddings, inputs.initial_outputs(hidden, torch.float32))
    with torch.no_grad():
        logits = wrapper(sample.inputs["input_ids"], *wrapper.empty_cache(torch.float32), *values)[0]
        expected = model(**sample.inputs).logits
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
