"""Modality embeddings spliced into the decoder's token embeddings, in the traced graph.

The i-th placeholder token of the prompt (in reading order) receives row i of the
encoder's embeddings; every other token keeps its own embedding. Written as a gather from
a bank whose row 0 is zeros (``where`` picks the token's own embedding there), never as
boolean indexing or ``masked_scatter``, whose output shapes depend on the data: the graph
stays symbolic in the prompt length and in the number of embeddings, and a chunk without
placeholders (generation steps) takes an empty ``[0, hidden]`` input. A chunk whose
placeholder count is not the row count (a placeholder token the model generated, fed with
no embeddings or with the prompt's passed back) splices nothing: its placeholders stay
text, as in Hugging Face, whose generation steps splice nothing (and no gather reads past
the rows).

:class:`SplicedEmbeddings` is the decoder input of the families whose decoder only needs
that (1-D positions): ``in_<modality>_embeddings`` in, passed through as
``out_<modality>_embeddings`` (torch_to_nnef_llm's decoder IO).
"""

from __future__ import annotations

from typing import Any

import torch

from fastnnef.multimodal.family import DecoderInputs


def complete_placeholders(placeholders: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``placeholders [1, S]`` (bool) if the chunk holds exactly one per row of
    ``features [N, H]``, else none (module docstring)."""
    return placeholders & (placeholders.to(torch.int64).sum() == features.shape[0])


def gathered_rows(placeholders: torch.Tensor, features: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[1, S, H]`` (``like``'s shape and dtype): row i of ``features [N, H]`` at the i-th
    position where ``placeholders [1, S]`` (bool) is set, zeros elsewhere (everywhere when
    the counts differ: ``complete_placeholders``)."""
    placeholders = complete_placeholders(placeholders, features)
    slot = torch.cumsum(placeholders.to(torch.int64), dim=1) * placeholders.to(torch.int64)  # 1-based, 0 elsewhere
    bank = torch.cat([like.new_zeros(1, like.shape[-1]), features.to(like.dtype)], dim=0)
    return bank.index_select(0, slot.reshape(-1)).reshape(like.shape)


def splice_embeddings(inputs_embeds: torch.Tensor, placeholders: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``inputs_embeds [1, S, H]`` with the rows of ``features [N, H]`` at the positions
    where ``placeholders [1, S]`` (bool) is set, in order (``complete_placeholders``)."""
    placeholders = complete_placeholders(placeholders, features)
    return torch.where(placeholders[..., None], gathered_rows(placeholders, features, inputs_embeds), inputs_embeds)


class SplicedEmbeddings(DecoderInputs):
    """Embeddings of ``modality`` ("image", "audio") spliced at the placeholder token
    ``token_id``, their row count the symbol ``axis``; 1-D positions."""

    def __init__(self, token_id: int, modality: str = "image", axis: str = "IMG"):
        self.token_id = token_id
        self.placeholder_ids = (token_id,)
        self.names = (f"in_{modality}_embeddings",)
        self.output_names = (f"out_{modality}_embeddings",)
        self.dynamic_axes = {self.names[0]: {0: axis}}

    def feed(self, model: Any, input_ids: torch.Tensor, past: int,
             extras: tuple[torch.Tensor, ...],
             masks: dict[str, torch.Tensor]) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
        (images,) = extras
        embeds = splice_embeddings(model.get_input_embeddings()(input_ids), input_ids == self.token_id, images)
        positions = torch.arange(past, past + input_ids.shape[1])[None]
        return {"inputs_embeds": embeds, "position_ids": positions}, (images,)

    def initial_outputs(self, hidden: int, dtype: torch.dtype) -> list[torch.Tensor]:
        return [torch.zeros((0, hidden), dtype=dtype)]

    def prompt_values(self, processed: dict[str, torch.Tensor], embeddings: list[torch.Tensor],
                      previous: list[torch.Tensor]) -> list[torch.Tensor]:
        return [embeddings[0]]
