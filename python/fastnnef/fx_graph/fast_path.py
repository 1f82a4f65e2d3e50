"""torch's eager fast paths that ``torch.export`` does not take, reproduced on the path it does.

``nn.TransformerEncoder`` given a padding mask runs eagerly on nested tensors (its "fast
path"): the padded positions never reach the layers and come back as exact zeros before the
final norm. Under ``torch.export`` the same call takes the slow path (torch skips the fast
path while compiling), where the layers compute values at the padded positions too. The
other positions agree (padding is masked out of attention on both paths), so the capture
equals the eager model once the last layer's output is zeroed where the mask pads, which is
what ``zero_padding_like_eager`` does while the program is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn


@contextmanager
def nested_encoders_seen(model: nn.Module) -> Iterator[list[nn.TransformerEncoder]]:
    """While the eager run is inside, collect the encoders of ``model`` that ran their
    layers on nested tensors (their first layer receives a nested input)."""
    seen: list[nn.TransformerEncoder] = []
    with ExitStack() as hooks:
        for module in model.modules():
            if isinstance(module, nn.TransformerEncoder) and len(module.layers) > 0:
                def note(layer: nn.Module, args: tuple[Any, ...], encoder: nn.TransformerEncoder = module) -> None:
                    if args and isinstance(args[0], torch.Tensor) and args[0].is_nested and encoder not in seen:
                        seen.append(encoder)
                hooks.callback(module.layers[0].register_forward_pre_hook(note).remove)
        yield seen


@contextmanager
def zero_padding_like_eager(encoders: list[nn.TransformerEncoder]) -> Iterator[None]:
    """While the capture is inside, each of ``encoders`` (those that ran nested eagerly)
    zeroes its last layer's output where its padding mask pads, as the nested run does."""
    with ExitStack() as hooks:
        for encoder in encoders:
            batch_first = encoder.layers[0].self_attn.batch_first
            hook = _zero_padding(batch_first)
            hooks.callback(encoder.layers[-1].register_forward_hook(hook, with_kwargs=True).remove)
        yield


def _zero_padding(batch_first: bool) -> Any:
    """A forward hook of the last layer: its ``src_key_padding_mask`` ([B, S], bool or the
    additive float form the encoder makes of it) is non-zero where a position pads."""
    def hook(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: torch.Tensor) -> torch.Tensor:
        mask = kwargs.get("src_key_padding_mask")
        if mask is None:
            return output
        pads = mask != 0
        if not batch_first:
            pads = pads.transpose(0, 1)  # [S, B] like the output
        return output.masked_fill(pads.unsqueeze(-1), 0.0)
    return hook
