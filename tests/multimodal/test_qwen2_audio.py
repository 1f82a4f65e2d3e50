"""Qwen2-Audio, beyond ``test_families.py``: the prompt's audio tokens are the rows the
manifest's host step keeps, and the decoder artefact on a one-clip prompt (not the traced
one) gives Hugging Face's last logits on the mel features."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastnnef.check import TractArtefact
from fastnnef.multimodal.qwen2_audio import FAMILY

NAME = "qwen2_audio"


def _model_and_processor(mm_checkpoint: Callable[..., Path]) -> tuple[Any, Any]:
    import transformers

    directory = mm_checkpoint(NAME)
    model = transformers.AutoModelForMultimodalLM.from_pretrained(directory).eval()
    return model, transformers.AutoProcessor.from_pretrained(directory)


def test_audio_tokens_are_the_rows_kept(mm_checkpoint: Callable[..., Path]) -> None:
    model, processor = _model_and_processor(mm_checkpoint)
    sample = FAMILY.sample(processor)
    kept = [FAMILY.encoders[0].rows(item) for item in sample.items[0]]
    rows = [FAMILY.encoders[0].reference(model, item)[0].shape[0] for item in sample.items[0]]
    assert sample.inputs["input_ids"].eq(model.config.audio_token_id).sum() == sum(kept)
    # Two clips of different lengths, each keeping fewer rows than its padded window: the crop matters.
    assert len(set(kept)) == 2 and all(0 < n < r for n, r in zip(kept, rows))


def test_decoder_on_a_one_clip_prompt(exported: Callable[[str], Any], mm_checkpoint: Callable[..., Path]) -> None:
    """One clip (the export traced two): the kept rows spliced; last logits equal Hugging
    Face's forward on the mel features."""
    from fastnnef.multimodal.samples import SAMPLING_RATE, sample_audio

    model, processor = _model_and_processor(mm_checkpoint)
    rate = processor.feature_extractor.sampling_rate or SAMPLING_RATE
    text = "what is <|audio_bos|><|AUDIO|><|audio_eos|> this"
    inputs = dict(processor(text=[text], audio=sample_audio(rate)[1:], sampling_rate=rate, return_tensors="pt"))
    item = {name: inputs[name] for name in ("input_features", "feature_attention_mask")}
    rows = FAMILY.encoders[0].reference(model, item)[0][: FAMILY.encoders[0].rows(item)]
    with torch.no_grad():
        want = model(**inputs).logits[:, -1:].numpy()
    decoder = TractArtefact.load(exported(NAME).export_dir / "decoder" / "model.nnef.tgz")
    config = model.config.text_config
    head_dim = config.hidden_size // config.num_attention_heads
    empty = [np.zeros((1, config.num_key_value_heads, 0, head_dim), np.float32)] * (2 * config.num_hidden_layers)
    got = decoder.run([inputs["input_ids"].numpy(), *empty, rows.numpy()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_generated_audio_token_stays_text(exported: Callable[[str], Any], mm_checkpoint: Callable[..., Path]) -> None:
    """An <|AUDIO|> token in a chunk whose rows do not match (the model generating one, fed
    no embeddings or the prompt's passed back) is embedded as text, as in Hugging Face,
    whose generation steps splice nothing (an empty input used to read past its rows)."""
    model, _ = _model_and_processor(mm_checkpoint)
    decoder = TractArtefact.load(exported(NAME).export_dir / "decoder" / "model.nnef.tgz")
    ids = torch.tensor([[5, model.config.audio_token_id, 6]])
    config = model.config.text_config
    head_dim = config.hidden_size // config.num_attention_heads
    empty = [np.zeros((1, config.num_key_value_heads, 0, head_dim), np.float32)] * (2 * config.num_hidden_layers)
    with torch.no_grad():
        want = model(input_ids=ids).logits[:, -1:].numpy()
    for rows in (0, 3):
        got = decoder.run([ids.numpy(), *empty, np.ones((rows, config.hidden_size), np.float32)])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
