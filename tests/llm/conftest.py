"""Tiny checkpoints saved once per session (``save_pretrained`` of random-weight models),
optionally with a word-level tokenizer built offline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.llm.tiny import VOCAB, save

# transformers deprecates its own helpers on the traced path.
pytest.importorskip("transformers")


def save_tokenizer(directory: Path) -> None:
    """A word-level tokenizer over the sample text's words (ids below the tiny vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from fastnnef.llm.bundles import SAMPLE_TEXT

    words = sorted({w for w in pre_tokenizers.Whitespace().pre_tokenize_str(SAMPLE_TEXT + " Once upon a time")
                    for w in [w[0]]})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    assert len(vocab) <= VOCAB
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``checkpoint(name, dtype=torch.float32, tokenizer=False)`` -> a saved checkpoint
    directory, built once per session and argument set. Tests must not modify it."""
    made: dict[tuple, Path] = {}

    def make(name: str, dtype: torch.dtype = torch.float32, tokenizer: bool = False) -> Path:
        key = (name, dtype, tokenizer)
        if key not in made:
            directory = tmp_path_factory.mktemp(f"ckpt-{name}")
            save(name, directory, dtype)
            if tokenizer:
                save_tokenizer(directory)
            made[key] = directory
        return made[key]

    return make
