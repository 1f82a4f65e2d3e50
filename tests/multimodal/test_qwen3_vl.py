"""Qwen3-VL, beyond ``test_families.py`` and ``test_qwen_vl.py``: the encoder artefact's
DeepStack streams against Hugging Face's on both images, the decoder artefact's prompt
logits equal to Hugging Face's forward on the pixels (and not without the streams), the
decoder on a one-image prompt (not the traced one), and the in-graph positions against
Qwen3-VL's own ``get_rope_index`` (videos frame by frame)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastnnef.check import TractArtefact
from fastnnef.multimodal.qwen3_vl import FAMILY, Qwen3VLDecoderInputs

NAME = "qwen3_vl"


def _model_and_sample(mm_checkpoint: Callable[..., Path]) -> tuple[Any, Any]:
    import transformers

    directory = mm_checkpoint(NAME)
    model = transformers.AutoModelForImageTextToText.from_pretrained(directory).eval()
    return model, FAMILY.sample(transformers.AutoProcessor.from_pretrained(directory))


def test_encoder_streams_equal_hugging_face(exported: Callable[[str], Any],
                                            mm_checkpoint: Callable[..., Path]) -> None:
    model, sample = _model_and_sample(mm_checkpoint)
    vision = TractArtefact.load(exported(NAME).export_dir / "vision" / "model.nnef.tgz")
    for item in sample.items[0]:  # both sample images: two grids
        got = vision.run([t.numpy() for t in FAMILY.encoders[0].graph_inputs(model, item)])
        with torch.no_grad():
            want = model.model.get_image_features(item["pixel_values"], item["image_grid_thw"], return_dict=True)
        assert want.deepstack_features and len(got) == 1 + len(want.deepstack_features)
        np.testing.assert_allclose(got[0], want.pooler_output[0].numpy(), rtol=1e-4, atol=1e-4)
        for obtained, stream in zip(got[1:], want.deepstack_features):
            np.testing.assert_allclose(obtained, stream[0].numpy(), rtol=1e-4, atol=1e-4)


def test_prompt_logits_equal_hugging_face_and_need_the_streams(exported: Callable[[str], Any],
                                                               mm_checkpoint: Callable[..., Path]) -> None:
    """The decoder artefact on the whole prompt (Hugging Face's embeddings and streams, the
    ``prompt`` bundle) gives Hugging Face's last logits on the pixels; without the streams
    it does not."""
    model, sample = _model_and_sample(mm_checkpoint)
    root = exported(NAME).export_dir
    decoder = TractArtefact.load(root / "decoder" / "model.nnef.tgz")
    with np.load(root / "decoder" / "tests" / "prompt_inputs.npz") as bundle:
        values = [bundle[name] for name in decoder.input_names]
    with torch.no_grad():
        want = model(**sample.inputs).logits[:, -1:].numpy()
    np.testing.assert_allclose(decoder.run(values)[0], want, rtol=1e-4, atol=1e-4)
    without = [np.zeros_like(v) if name.startswith("in_image_deepstack") else v
               for name, v in zip(decoder.input_names, values)]
    assert np.abs(decoder.run(without)[0] - want).max() > 1e-2


@pytest.mark.parametrize("items", [
    [("image", (1, 10, 14))],
    [("image", (1, 4, 12)), ("video", (3, 4, 6)), ("image", (1, 8, 2))],
])
def test_positions_equal_get_rope_index(mm_checkpoint: Callable[..., Path],
                                        items: list[tuple[str, tuple[int, int, int]]]) -> None:
    """Images as Qwen2.5-VL's; a video's frames, separated by text (Qwen3-VL's timestamps),
    each a one-frame item: ``in_video_grid_thw`` holds one row per frame."""
    model, _ = _model_and_sample(mm_checkpoint)
    config = model.config
    token = {"image": config.image_token_id, "video": config.video_token_id}
    ids: list[int] = [5, 6]
    for kind, (t, h, w) in items:
        for _ in range(t if kind == "video" else 1):
            ids += [8, config.vision_start_token_id] + [token[kind]] * (h * w // 4) + [config.vision_end_token_id]
    input_ids = torch.tensor([ids])
    grids = {kind: torch.tensor([g for k, g in items if k == kind], dtype=torch.int64).reshape(-1, 3)
             for kind in token}
    frames = torch.repeat_interleave(grids["video"], grids["video"][:, 0], dim=0)
    frames[:, 0] = 1
    types = (input_ids == token["image"]).int() + 2 * (input_ids == token["video"]).int()
    positions, delta = Qwen3VLDecoderInputs(model).positions(input_ids, 0, grids["image"], frames,
                                                             torch.zeros((1, 1), dtype=torch.int64))
    expected, expected_delta = model.model.get_rope_index(
        input_ids, types, image_grid_thw=grids["image"], video_grid_thw=grids["video"] if len(frames) else None)
    assert torch.equal(positions, expected) and torch.equal(delta, expected_delta)


def test_decoder_on_another_prompt_than_traced(exported: Callable[[str], Any],
                                               mm_checkpoint: Callable[..., Path]) -> None:
    """A prompt with one image (the export traced two): fewer placeholders and rows, the
    graph's shapes and placeholder count stay symbolic; last logits equal Hugging Face's."""
    import transformers

    from fastnnef.multimodal.samples import sample_images

    model, _ = _model_and_sample(mm_checkpoint)
    processor = transformers.AutoProcessor.from_pretrained(mm_checkpoint(NAME))
    text = "what is in <|vision_start|><|image_pad|><|vision_end|> here"
    inputs = dict(processor(text=[text], images=sample_images()[1:], return_tensors="pt"))
    with torch.no_grad():
        features = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True)
        want = model(**inputs).logits[:, -1:].numpy()
    decoder = TractArtefact.load(exported(NAME).export_dir / "decoder" / "model.nnef.tgz")
    config = model.config.text_config
    empty = [np.zeros((1, config.num_key_value_heads, 0, config.head_dim), np.float32)] * (2 * config.num_hidden_layers)
    none = np.zeros((0, config.hidden_size), np.float32)
    values = [inputs["input_ids"].numpy(), *empty, features.pooler_output[0].numpy(), none,
              inputs["image_grid_thw"].numpy(), np.zeros((0, 3), np.int64), np.zeros((1, 1), np.int64),
              *(stream[0].numpy() for stream in features.deepstack_features)]
    np.testing.assert_allclose(decoder.run(values)[0], want, rtol=1e-4, atol=1e-4)


def test_generated_image_token_stays_text(mm_checkpoint: Callable[..., Path]) -> None:
    """A step holding an image token the model generated, fed the prompt's embeddings,
    grids and DeepStack streams back (passed-through outputs): the token keeps its own
    embedding, text positions and the rope delta, and no stream is added, as in Hugging
    Face's generation steps (the wrapper's traced code, run in PyTorch)."""
    model, _ = _model_and_sample(mm_checkpoint)
    inputs = Qwen3VLDecoderInputs(model)
    hidden = model.config.text_config.hidden_size
    ids = torch.tensor([[7, model.config.image_token_id]])
    rows = torch.ones((4, hidden))  # the prompt's one image of 2 x 2 merged patches
    delta = torch.tensor([[-3]])
    extras = (rows, torch.zeros((0, hidden)), torch.tensor([[1, 4, 4]]), torch.zeros((0, 3), dtype=torch.int64),
              delta, rows, rows)
    fed, outputs = inputs.feed(model, ids, 20, extras, {})
    assert torch.equal(fed["inputs_embeds"], model.get_input_embeddings()(ids))
    assert torch.equal(fed["position_ids"], (20 - 3 + torch.arange(2)).expand(3, 1, 2))
    assert torch.equal(outputs[4], delta)
    with torch.no_grad():  # the DeepStack hooks add zeros and go
        model(**fed)
    assert all(not layer._forward_hooks for layer in model.model.language_model.layers)
