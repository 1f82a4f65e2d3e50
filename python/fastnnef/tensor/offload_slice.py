"""A slice of an offloaded weight that stays offloaded: ``OffloadedSlice``.

Slicing an :class:`~fastnnef.tensor.offload.OffloadedTensor` with torch materializes it
(one op, one tensor in memory), and whoever keeps the result keeps that memory: an export
that needs a part of a weight as its own variable (the gate half of transformers' fused
gate/up experts parameter, written for ``tract_moe_ffn``) would hold every layer's part
until the artefact is written. An ``OffloadedSlice`` is that part as a reference: its
value is read from the source when an op or the writer needs it, and dropped after.
"""

from __future__ import annotations

from typing import Any

import torch

from fastnnef import _native
from fastnnef.exceptions import T2NErrorNotImplemented
from fastnnef.tensor.offload import OffloadedTensor


class OffloadedSlice(OffloadedTensor):
    """``source[..., start:stop:step, ...]`` along ``axis``, read only when used."""

    source: OffloadedTensor
    axis: int
    start: int
    stop: int
    step: int

    @staticmethod
    def __new__(cls, *args: Any, **kwargs: Any) -> OffloadedSlice:
        raise T2NErrorNotImplemented("build an OffloadedSlice with OffloadedSlice.of()")

    @classmethod
    def of(cls, source: OffloadedTensor, axis: int, start: int, stop: int, step: int = 1) -> OffloadedSlice:
        """The slice ``start:stop:step`` of ``source`` along ``axis`` (nothing read). A Q4_0
        source is sliced only across whole rows (not along its last axis), so that the
        slice's Q4_0 blocks are the source's."""
        axis = axis % source.dim()
        if source.q4_0 and axis == source.dim() - 1:
            raise T2NErrorNotImplemented(f"{source.key!r} is Q4_0: its last axis cannot be sliced without re-blocking")
        index = (slice(None),) * axis + (slice(start, stop, step),)
        shape = tuple(torch.empty(source.shape, device="meta")[index].shape)
        key = f"{source.key}[{':,' * axis}{start}:{stop}:{step}]"
        self = cls._wrap(shape, source.dtype, source.checkpoint, key, source.stored_dtype, q4_0=source.q4_0,
                         packed=False)
        self.source, self.axis, self.start, self.stop, self.step = source, axis, start, stop, step
        self.nnef_name = None
        return self

    def _index(self) -> tuple:
        return (slice(None),) * self.axis + (slice(self.start, self.stop, self.step),)

    def _materialize(self) -> torch.Tensor:
        return self.source._materialize()[self._index()].contiguous()

    def check(self, label: str, encoding: str) -> None:
        _native.dat_payload_size(label, list(self.shape), encoding)

    def streams_as(self, encoding: str) -> bool:
        return False  # a part of one checkpoint tensor: written from its value

    def written_values(self) -> torch.Tensor:
        return self.source.written_values()[self._index()].contiguous()

    def _shallow(self, dtype: torch.dtype | None = None, q4_0: bool | None = None) -> OffloadedSlice:
        source = self.source._shallow(dtype, q4_0)
        new = OffloadedSlice.of(source, self.axis, self.start, self.stop, self.step)
        new.nnef_name = self.nnef_name
        return new

    # torch's signature (its stub's, as mypy reads it, does not match its own code)
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"OffloadedSlice({self.key}, shape={tuple(self.shape)}, dtype={self.dtype}, q4_0={self.q4_0})"
