"""Tiny random-weight multimodal checkpoints with their processors, built offline: configs,
a word-level tokenizer holding the family's special tokens, and the family's image
processor constructed from parameters (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

INIT = 0.3  # as tests/llm/tiny.py: random models with varied greedy continuations
WORDS = ("describe this picture in a few words please what do you see here it is a small image of "
         "red green blue sky sea tree house cat dog and the").split()


def _word_tokenizer(specials: list[str]) -> Any:
    """A word-level fast tokenizer: <unk> <s> </s>, the words, then ``specials``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in [*sorted(set(WORDS)), *specials]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>")
    fast.add_special_tokens({"additional_special_tokens": specials})
    return fast


def _qwen2_5_vl() -> tuple[Any, Any]:
    specials = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]
    tokenizer = _word_tokenizer(specials)
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in specials}
    config = transformers.Qwen2_5_VLConfig(
        text_config=dict(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=256,
            initializer_range=INIT, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                     "mrope_section": [2, 3, 3]},
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=4, in_channels=3, patch_size=2,
            spatial_merge_size=2, temporal_patch_size=2, window_size=8, out_hidden_size=64,
            fullatt_block_indexes=[1], initializer_range=INIT,
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        initializer_range=INIT, tie_word_embeddings=False,
    )
    image_processor = transformers.Qwen2VLImageProcessor(
        patch_size=2, merge_size=2, temporal_patch_size=2, min_pixels=16, max_pixels=48 * 48,
    )
    video_processor = transformers.Qwen2VLVideoProcessor(patch_size=2, merge_size=2, temporal_patch_size=2)
    processor = transformers.Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                                 video_processor=video_processor)
    return config, processor


def _idefics3(tied: bool = False) -> tuple[Any, Any]:
    grid = [f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)]
    specials = ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>", *grid]
    tokenizer = _word_tokenizer(specials)
    config = transformers.Idefics3Config(
        text_config=dict(
            model_type="llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=256, initializer_range=INIT,
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=16, patch_size=4, initializer_range=INIT),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=2, initializer_range=INIT,
        tie_word_embeddings=tied, pad_token_id=0,
    )
    # Tiles of 16 x 16 pixels (16 patches, 4 tokens after the pixel shuffle); images resized
    # to at most 32 pixels on their longest edge, so that they are split into up to 2 x 2 tiles.
    image_processor = transformers.Idefics3ImageProcessor(size={"longest_edge": 32},
                                                          max_image_size={"longest_edge": 16})
    processor = transformers.Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4)
    return config, processor


def _mistral3() -> tuple[Any, Any]:
    specials = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]
    tokenizer = _word_tokenizer(specials)
    config = transformers.Mistral3Config(
        text_config=dict(
            model_type="mistral", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=len(tokenizer), max_position_embeddings=256,
            initializer_range=INIT, bos_token_id=1, eos_token_id=2, pad_token_id=0, sliding_window=None,
        ),
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, head_dim=8, image_size=64, patch_size=2, initializer_range=INIT),
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"), spatial_merge_size=2, vision_feature_layer=-1,
        multimodal_projector_bias=False, initializer_range=INIT, tie_word_embeddings=False,
    )
    # Images resized to at most 32 pixels on their longest edge, in whole 2 x 2 patch blocks.
    image_processor = transformers.PixtralImageProcessor(patch_size={"height": 4, "width": 4},
                                                         size={"longest_edge": 32})
    processor = transformers.PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=2,
                                              spatial_merge_size=2)
    return config, processor


def _gemma3() -> tuple[Any, Any]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for word in [*sorted(set(WORDS)), "Here", "original", "image", "crops", ",", ":", "are", "some", "was",
                 "split", "into", *specials]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                              "image_token": "<image_soft_token>"},
    )
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in specials}
    config = transformers.Gemma3Config(
        text_config=dict(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=len(tokenizer), max_position_embeddings=256, initializer_range=INIT,
            sliding_window=8, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16,
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=16, patch_size=4, initializer_range=INIT),
        mm_tokens_per_image=4, boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"], initializer_range=INIT, tie_word_embeddings=False,
    )
    # 16 x 16 images; pan and scan cuts the wide sample images into crops (a count per image).
    image_processor = transformers.Gemma3ImageProcessor(
        size={"height": 16, "width": 16}, do_pan_and_scan=True, pan_and_scan_min_crop_size=8,
        pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2,
    )
    processor = transformers.Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_length=4)
    return config, processor


def _qwen3_vl() -> tuple[Any, Any]:
    specials = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]
    tokenizer = _word_tokenizer(specials)
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in specials}
    config = transformers.Qwen3VLConfig(
        text_config=dict(
            num_hidden_layers=3, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=len(tokenizer), max_position_embeddings=256, initializer_range=INIT,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                             "mrope_interleaved": True},
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(
            depth=3, hidden_size=32, intermediate_size=64, num_heads=4, in_channels=3, patch_size=2,
            spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16,
            deepstack_visual_indexes=[0, 1], initializer_range=INIT,
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        initializer_range=INIT, tie_word_embeddings=False,
    )
    image_processor = transformers.Qwen2VLImageProcessor(
        patch_size=2, merge_size=2, temporal_patch_size=2, min_pixels=16, max_pixels=48 * 48,
    )
    video_processor = transformers.Qwen3VLVideoProcessor(patch_size=2, merge_size=2, temporal_patch_size=2)
    processor = transformers.Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                              video_processor=video_processor)
    return config, processor


def _qwen2_audio() -> tuple[Any, Any]:
    specials = ["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"]
    tokenizer = _word_tokenizer(specials)
    config = transformers.Qwen2AudioConfig(
        text_config=dict(
            model_type="qwen2", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=256, initializer_range=INIT,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
        ),
        audio_config=dict(num_mel_bins=16, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                          d_model=32, max_source_positions=50, initializer_range=INIT),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"), initializer_range=INIT,
    )
    # 1-second windows of 100 frames (hop 160 at 16 kHz): the encoder's 50 positions after its stride-2 conv.
    feature_extractor = transformers.WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160,
                                                             chunk_length=1, n_fft=400)
    processor = transformers.Qwen2AudioProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer)
    return config, processor


FAMILIES: dict[str, Callable[[], tuple[Any, Any]]] = {
    "qwen2_audio": _qwen2_audio,
    "qwen3_vl": _qwen3_vl,
    "gemma3": _gemma3,
    "mistral3": _mistral3,
    "qwen2_5_vl": _qwen2_5_vl,
    "idefics3": _idefics3,
    "idefics3-tied": lambda: _idefics3(tied=True),  # the LM head is the token embedding
}


def _smolvlm() -> tuple[Any, Any]:
    """Idefics3's tiny model and processor parameters under SmolVLM's classes."""
    idefics3, processor = _idefics3()
    config = transformers.SmolVLMConfig(**{k: v for k, v in idefics3.to_dict().items() if k != "model_type"})
    image_processor = transformers.SmolVLMImageProcessor(size={"longest_edge": 32},
                                                         max_image_size={"longest_edge": 16})
    video_processor = transformers.SmolVLMVideoProcessor()
    return config, transformers.SmolVLMProcessor(image_processor=image_processor, tokenizer=processor.tokenizer,
                                                 video_processor=video_processor, image_seq_len=4)


FAMILIES["smolvlm"] = _smolvlm


def save(name: str, directory: Path, processor: bool = True) -> Path:
    """The tiny checkpoint of family ``name`` (seeded random weights) and, unless told
    otherwise, its processor, saved in ``directory``."""
    config, proc = FAMILIES[name]()
    torch.manual_seed(0)
    from fastnnef.multimodal.families import FAMILIES as EXPORTED

    model = getattr(transformers, EXPORTED[name.split("-")[0]].auto_class).from_config(config).eval()
    model.save_pretrained(directory)
    if processor:
        proc.save_pretrained(directory)
    return directory


def _qwen3_5(moe: bool = False) -> tuple[Any, Any]:
    """Qwen3-VL's tiny processor; a hybrid decoder in the published checkpoints' kind of
    layer order (gated-delta-net layers first, then a full-attention one: here two and one,
    as transformers derives it from full_attention_interval), mrope on half of each head
    (interleaved sections of 2, 1 and 1 pairs); a tower without DeepStack."""
    _, processor = _qwen3_vl()
    ids = {s: processor.tokenizer.convert_tokens_to_ids(s)
           for s in ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>")}
    experts = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=32) if moe else {}
    config = (transformers.Qwen3_5MoeConfig if moe else transformers.Qwen3_5Config)(
        text_config=dict(
            num_hidden_layers=3, full_attention_interval=3,
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, vocab_size=len(processor.tokenizer), max_position_embeddings=256,
            initializer_range=INIT, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True},
            **experts,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=4, in_channels=3, patch_size=2,
            spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16,
            # The dense model's image embeddings nearer the text embeddings' scale: at INIT they
            # came out 25x larger (RMS 7 against 0.3), and one small key element among large ones
            # then moved by f32 rounding beyond the elementwise tolerance (tract 3.1e-4 from PyTorch
            # on 0.07, 8e-5 of its vector; PyTorch's own AVX2 and AVX-512 runs 6.5e-4 apart).
            # Not the MoE model's: at INIT / 2 PyTorch's two forwards of it (our wrapper and Hugging
            # Face's) then differ by 1.5e-3 on the image prompt (not investigated; a near tie of
            # two experts' routing scores would do it).
            initializer_range=INIT if moe else INIT / 2,
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    return config, processor


FAMILIES["qwen3_5"] = _qwen3_5
FAMILIES["qwen3_5_moe"] = lambda: _qwen3_5(moe=True)


def _qwen3_vl_moe() -> tuple[Any, Any]:
    """Qwen3-VL's tiny model and processor, its decoder's MLPs sparse MoE blocks (4 experts, 2 routed)."""
    dense, processor = _qwen3_vl()
    values = dense.to_dict()
    text = {k: v for k, v in values.pop("text_config").items() if k != "model_type"}
    vision = {k: v for k, v in values.pop("vision_config").items() if k != "model_type"}
    text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
    top = {k: values[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
                                  "tie_word_embeddings")}
    return transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision, **top), processor


FAMILIES["qwen3_vl_moe"] = _qwen3_vl_moe


class _VoxtralFiles:
    """A Voxtral checkpoint's non-weight files as the hub ships them: the feature extractor's
    ``preprocessor_config.json`` and a Mistral ``tekken.json`` (no tokenizer.json, no
    processor config: VoxtralProcessor needs mistral_common, which fastnnef does without)."""

    def __init__(self, feature_extractor: Any, tekken: dict[str, Any]):
        self.feature_extractor = feature_extractor
        self.tekken = tekken

    def save_pretrained(self, directory: Path) -> None:
        import json

        self.feature_extractor.save_pretrained(directory)
        (Path(directory) / "tekken.json").write_text(json.dumps(self.tekken))


# Mistral's control tokens at their tekken.json ranks (mistral_common's table; [AUDIO] 24 and
# [BEGIN_AUDIO] 25 as in Voxtral's), enough for mistral_common to load it as a v7 tokenizer.
_TEKKEN_SPECIALS = dict(enumerate((
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
))) | {24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 34: "[TRANSCRIBE]"}
_TEKKEN_SPECIAL_COUNT = 40


def _tekken() -> dict[str, Any]:
    """A tiny byte-level tekken.json (the format transformers converts without mistral_common):
    the 256 bytes, then every prefix of the sample words (with and without a leading space),
    so that each word is one token."""
    import base64

    pieces = [bytes([b]) for b in range(256)]
    for word in sorted(set(WORDS)):
        for text in (word, " " + word):
            raw = text.encode()
            pieces += [raw[:n] for n in range(2, len(raw) + 1) if raw[:n] not in pieces]
    specials = [{"rank": r, "token_str": _TEKKEN_SPECIALS.get(r, f"<SPECIAL_{r}>"), "is_control": True}
                for r in range(max(_TEKKEN_SPECIALS) + 1)]
    return {
        "config": {"pattern": r"\s?\w+|\s?[^\s\w]+|\s+", "num_vocab_tokens": len(pieces),
                   "default_vocab_size": _TEKKEN_SPECIAL_COUNT + len(pieces),
                   "default_num_special_tokens": _TEKKEN_SPECIAL_COUNT, "version": "v7"},
        "vocab": [{"rank": r, "token_bytes": base64.b64encode(p).decode(), "token_str": None}
                  for r, p in enumerate(pieces)],
        "special_tokens": specials,
    }


def _voxtral() -> tuple[Any, Any]:
    tekken = _tekken()
    config = transformers.VoxtralConfig(
        text_config=dict(
            model_type="llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=tekken["config"]["default_vocab_size"],
            max_position_embeddings=256, initializer_range=INIT, bos_token_id=1, eos_token_id=2, pad_token_id=None,
            tie_word_embeddings=False,
        ),
        # 50 positions per chunk, every 2 frames stacked (intermediate_size = 2 * d_model): 25 audio tokens.
        audio_config=dict(num_mel_bins=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                          hidden_size=32, max_source_positions=50, initializer_range=INIT),
        audio_token_id=24, initializer_range=INIT,
    )
    # 1-second chunks of 100 frames (hop 160 at 16 kHz): the tower's 50 positions after its stride-2 conv.
    feature_extractor = transformers.WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160,
                                                             chunk_length=1, n_fft=400)
    return config, _VoxtralFiles(feature_extractor, tekken)


FAMILIES["voxtral"] = _voxtral


def _gemma4() -> tuple[Any, Any]:
    """Gemma 4: its tokenizer's image and audio tokens (the processor adds a video one), an
    image processor of patches of 4 pixels pooled 2 x 2 (at most 70 soft tokens, its
    smallest budget: the sample images give 63 and 65); a decoder with per-layer input
    embeddings, KV sharing, global layers wider than the sliding ones, and image tokens
    seeing each other on sliding layers (use_bidirectional_attention="vision")."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|image>", "<image|>", "<|image|>", "<|audio>", "<audio|>", "<|audio|>"]
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for word in [*sorted(set(WORDS)), *specials]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        extra_special_tokens={"boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>",
                              "boa_token": "<|audio>", "eoa_token": "<audio|>", "audio_token": "<|audio|>"},
    )
    image_processor = transformers.Gemma4ImageProcessor(patch_size=4, max_soft_tokens=70, pooling_kernel_size=2)
    processor = transformers.Gemma4Processor(
        feature_extractor=transformers.Gemma4AudioFeatureExtractor(), image_processor=image_processor,
        tokenizer=tokenizer, video_processor=transformers.Gemma4VideoProcessor(), image_seq_length=70,
    )
    ids = {s: processor.tokenizer.convert_tokens_to_ids(s) for s in [*specials, processor.video_token]}
    vocab_size = len(processor.tokenizer)
    config = transformers.Gemma4Config(
        text_config=dict(
            num_hidden_layers=4, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, global_head_dim=16, attention_k_eq_v=True, num_global_key_value_heads=1,
            vocab_size=vocab_size, max_position_embeddings=256, initializer_range=INIT, sliding_window=8,
            num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2,
            hidden_size_per_layer_input=8, vocab_size_per_layer_input=vocab_size, final_logit_softcapping=30.0,
            use_bidirectional_attention="vision", bos_token_id=1, eos_token_id=2, pad_token_id=0,
        ),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=2, head_dim=8, patch_size=4, pooling_kernel_size=2,
                           position_embedding_size=64, initializer_range=INIT),
        audio_config=None, image_token_id=ids["<|image|>"], boi_token_id=ids["<|image>"],
        eoi_token_id=ids["<image|>"], audio_token_id=ids["<|audio|>"], boa_token_id=ids["<|audio>"],
        eoa_token_index=ids["<audio|>"], video_token_id=ids[processor.video_token], initializer_range=INIT,
        tie_word_embeddings=False,
    )
    return config, processor


FAMILIES["gemma4"] = _gemma4
