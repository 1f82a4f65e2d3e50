"""Voxtral: a Whisper-style audio tower on fixed chunks, consecutive frames stacked into
one projector input, a Llama/Mistral decoder with 1-D positions.

Encoder (``audio/model.nnef.tgz``, the reference's): ``input_features [1, mel_bins,
2 * max_source_positions]`` (ONE chunk of a clip's log-mel features: the feature
extractor pads each clip to a whole number of chunks and the host splits it) to
``out_audio_embeddings [max_source_positions * d_model / intermediate_size, hidden]``:
the tower (no mask: Voxtral attends to the padding too, as Hugging Face does) then every
``intermediate_size / d_model`` consecutive frames concatenated and projected. Every row
is an audio token of the prompt: a clip of C chunks has C times that many.

Decoder: ``in_audio_embeddings [AUD, hidden]`` after the cache (the prompt's chunks,
concatenated), spliced at the ``[AUDIO]`` tokens, passed through as
``out_audio_embeddings``.

Sample inputs without ``mistral_common``: Hugging Face's ``VoxtralProcessor`` builds audio
prompts only through mistral_common's tokenizer (which pins an older numpy), so this
family makes its sample itself, as mistral_common lays it out: the checkpoint's
``WhisperFeatureExtractor`` (``preprocessor_config.json``) for the features, the
checkpoint's tokenizer (``tokenizer.json``, or ``tekken.json`` converted by transformers)
for the text, and ``[BEGIN_AUDIO]`` followed by ``[AUDIO]`` (``config.audio_token_id``)
once per audio token of each clip.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fastnnef.exceptions import T2NErrorInvalidArgument, T2NErrorNotFoundFile
from fastnnef.multimodal.family import EncoderSpec, Family, Sample
from fastnnef.multimodal.samples import sample_audio
from fastnnef.multimodal.splice import SplicedEmbeddings

FEATURE_EXTRACTOR_FILE = "preprocessor_config.json"
MISTRAL_TOKENIZER_FILE = "tekken.json"
TOKENIZER_FILES = ("tokenizer.json", MISTRAL_TOKENIZER_FILE)
# The chat and audio control tokens of Mistral's tokenizers (used when the tokenizer has them).
INST, END_INST, BEGIN_AUDIO = "[INST]", "[/INST]", "[BEGIN_AUDIO]"
TEXT = ("describe this", "and this", "in a few words please")  # around the two sample clips


class VoxtralEncoder(nn.Module):
    """Hugging Face's audio tower and projector, on one chunk (``get_audio_features``)."""

    def __init__(self, tower: Any, projector: Any, stacked_width: int):
        super().__init__()
        self.tower = tower
        self.projector = projector
        self.stacked_width = stacked_width  # audio_config.intermediate_size: frames stacked per row

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        hidden = self.tower(input_features).last_hidden_state
        return self.projector(hidden.reshape(-1, self.stacked_width))


def tokens_per_chunk(audio_config: Any) -> int:
    """The audio tokens (encoder rows) one chunk becomes."""
    return int(audio_config.max_source_positions) * int(audio_config.hidden_size) // int(
        audio_config.intermediate_size)


def chunk_frames(audio_config: Any) -> int:
    """The mel frames of one chunk: the tower's positions before its stride-2 convolution."""
    return 2 * int(audio_config.max_source_positions)


@dataclass
class VoxtralInputs:
    """What makes Voxtral's sample prompt (this family's stand-in for the processor):
    the checkpoint's feature extractor and text tokenizer, with the config's numbers."""

    feature_extractor: Any
    tokenizer: Any
    audio_token_id: int
    tokens_per_chunk: int
    chunk_frames: int
    bos_token_id: int | None  # the tokenizer's, else the config's (tekken.json's converted one has none)
    source: Path  # the checkpoint folder (its tekken.json is copied by save_pretrained)

    def chunks(self, clip: Any) -> torch.Tensor:
        """``[chunks, mel_bins, chunk_frames]``: the clip padded to whole chunks (as
        VoxtralProcessor pads it) and split."""
        extractor = self.feature_extractor
        features = extractor(clip, sampling_rate=extractor.sampling_rate, padding=True, truncation=False,
                             pad_to_multiple_of=extractor.n_samples, return_tensors="pt")["input_features"]
        return features.reshape(extractor.feature_size, -1, self.chunk_frames).transpose(0, 1)

    def token_id(self, token: str) -> int | None:
        """``token``'s id, or None when the tokenizer does not know it."""
        found = self.tokenizer.convert_tokens_to_ids(token)
        return None if found is None or found == self.tokenizer.unk_token_id else int(found)

    def save_pretrained(self, directory: Path) -> None:
        """The feature extractor and tokenizer (-dwtac), and the Mistral tokenizer file if any."""
        self.feature_extractor.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        tekken = self.source / MISTRAL_TOKENIZER_FILE
        if tekken.is_file():
            shutil.copyfile(tekken, Path(directory) / MISTRAL_TOKENIZER_FILE)


def load_inputs(directory: Path, trust_remote_code: bool) -> VoxtralInputs:
    """The checkpoint's feature extractor and tokenizer (module docstring); a clear error
    when either is missing or does not load."""
    from transformers import AutoConfig, AutoTokenizer, WhisperFeatureExtractor

    if not (directory / FEATURE_EXTRACTOR_FILE).is_file():
        raise T2NErrorNotFoundFile(
            f"{directory} has no {FEATURE_EXTRACTOR_FILE}: a Voxtral export needs the checkpoint's feature extractor "
            "to turn the sample audio into mel features; copy it from the original checkpoint"
        )
    try:
        extractor = WhisperFeatureExtractor.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise T2NErrorInvalidArgument(f"the feature extractor in {directory} does not load: {err}") from err
    fixes = ("add a tokenizer.json beside the weights (transformers.integrations.mistral.convert_tekken_tokenizer"
             "('tekken.json').save_pretrained(dir) converts a tekken.json), or install mistral-common (pip install "
             "mistral-common; it needs numpy < 2.4 on Python 3.12 and older)")
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise T2NErrorNotFoundFile(
            f"{directory} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): fastnnef builds Voxtral's sample prompt "
            f"with it; copy it from the original checkpoint, or {fixes}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True,
                                                  trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - tokenizer backends raise many types
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        raise T2NErrorInvalidArgument(
            f"the tokenizer in {directory} does not load ({reason}); fastnnef builds Voxtral's sample prompt with "
            f"it, without mistral_common. Either {fixes}"
        ) from err
    config = AutoConfig.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
    frames = chunk_frames(config.audio_config)
    if int(extractor.nb_max_frames) != frames:
        raise T2NErrorInvalidArgument(
            f"the feature extractor in {directory} makes chunks of {extractor.nb_max_frames} mel frames, but the "
            f"audio tower takes {frames} (2 x audio_config.max_source_positions): they are not the same checkpoint's"
        )
    if config.audio_token_id is None:
        raise T2NErrorInvalidArgument(f"{directory}/config.json has no audio_token_id: the [AUDIO] placeholder's id")
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else config.text_config.bos_token_id
    return VoxtralInputs(extractor, tokenizer, int(config.audio_token_id), tokens_per_chunk(config.audio_config),
                         frames, None if bos is None else int(bos), directory)


def _sample(inputs: VoxtralInputs) -> Sample:
    """``<s>[INST]`` text ``[BEGIN_AUDIO]`` + one ``[AUDIO]`` per audio token, for each
    clip, text ``[/INST]`` (mistral_common's layout; the controls the tokenizer lacks are
    left out)."""
    tokenizer = inputs.tokenizer
    clips = [inputs.chunks(clip) for clip in sample_audio(inputs.feature_extractor.sampling_rate)]

    def text(words: str) -> list[int]:
        return list(tokenizer.encode(words, add_special_tokens=False))

    def control(token: str) -> list[int]:
        found = inputs.token_id(token)
        return [] if found is None else [found]

    bos = [] if inputs.bos_token_id is None else [inputs.bos_token_id]
    ids = [*bos, *control(INST), *text(TEXT[0])]
    for index, chunks in enumerate(clips):
        ids += [*control(BEGIN_AUDIO), *[inputs.audio_token_id] * (len(chunks) * inputs.tokens_per_chunk)]
        ids += text(TEXT[index + 1]) if index + 1 < len(TEXT) else []
    ids += control(END_INST)
    input_ids = torch.tensor([ids], dtype=torch.int64)
    features = torch.cat(clips)
    processed = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "input_features": features}
    items = [{"input_features": features[i : i + 1]} for i in range(features.shape[0])]
    return Sample(processed, [items])


def _reference(model: Any, item: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model.model.get_audio_features(item["input_features"]).pooler_output]


def _input_contract(config: Any) -> dict[str, Any]:
    return {
        "name": "input_features",
        "layout": [1, int(config.audio_config.num_mel_bins), chunk_frames(config.audio_config)],
        "host_prep": ("Pad each clip to a whole number of chunks and take its log-mel input_features as the "
                      "feature extractor makes them (WhisperFeatureExtractor, pad_to_multiple_of=n_samples); feed "
                      "ONE chunk at a time; every row of out_audio_embeddings is an audio token, chunks "
                      "concatenated in prompt order"),
    }


FAMILY = Family(
    model_type="voxtral",
    models="Voxtral",
    tower_attr="audio_config",
    auto_class="AutoModelForMultimodalLM",
    encoders=(
        EncoderSpec(
            modality="audio", embeds="audio", placeholder_attr="audio_token_id", dynamic_axis="AUD",
            input_names=("input_features",), dynamic_axes={},
            build=lambda model: VoxtralEncoder(model.model.audio_tower, model.model.multi_modal_projector,
                                               int(model.config.audio_config.intermediate_size)),
            graph_inputs=lambda model, item: (item["input_features"],), reference=_reference,
            input_contract=_input_contract, fixed_size=True,
        ),
    ),
    decoder_inputs=lambda model: SplicedEmbeddings(int(model.config.audio_token_id), "audio", "AUD"),
    decoder_modules=("model.language_model", "lm_head"),
    sample=_sample,
    load_processor=load_inputs,
)
