"""Modality embeddings spliced into the decoder's token embeddings, in the traced graph.

The i-th placeholder token of the prompt (in reading order) receives row i of the
encoder's embeddings; every other token keeps its own embedding. Written as a gather from
a bank whose row 0 is zeros (``where`` picks the token's own embedding there), never as
boolean indexing or ``masked_scatter``, whose output shapes depend on the data: the graph
stays symbolic in the prompt length and in the number of embeddings, and a chunk without
placeholders (generation steps) takes an empty ``[0, hidden]`` input.
"""

from __future__ import annotations

import torch


def splice_embeddings(inputs_embeds: torch.Tensor, placeholders: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``inputs_embeds [1, S, H]`` with the rows of ``features [N, H]`` at the positions
    where ``placeholders [1, S]`` (bool) is set, in order."""
    slot = torch.cumsum(placeholders.to(torch.int64), dim=1) * placeholders.to(torch.int64)  # 1-based, 0 elsewhere
    bank = torch.cat([inputs_embeds.new_zeros(1, inputs_embeds.shape[-1]), features.to(inputs_embeds.dtype)], dim=0)
    gathered = bank.index_select(0, slot.reshape(-1)).reshape(inputs_embeds.shape)
    return torch.where(placeholders[..., None], gathered, inputs_embeds)
