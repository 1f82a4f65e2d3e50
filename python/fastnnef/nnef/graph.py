"""The NNEF graph as fastnnef builds it: tensors, operations, variables, extensions.

The graph knows nothing of torch's IR; op handlers build it through ``NNEFGraph.op``.
Tensor shapes hold ``fastnnef.dim.Size``s: ints, or ``DimExpr`` expressions (``S``, ``P+S``,
written bare in the graph text) for dynamic axes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastnnef.dim import Size
from fastnnef.exceptions import (
    T2NErrorInvalidArgument,
    T2NErrorNotImplemented,
    T2NErrorStrictNNEFSpec,
)

if TYPE_CHECKING:  # payloads reference torch data; the graph only carries them
    from fastnnef.nnef.payload import AnyPayload

NNEF_KEYWORDS = frozenset(
    "version extension fragment graph tensor integer scalar logical string true false "
    "for in if else yield length_of shape_of range_of".split()
)
_IDENT_BAD = re.compile(r"[^A-Za-z0-9_]")


def sanitize_identifier(name: str) -> str:
    """Map any string onto a valid NNEF identifier (tract's lexical rules, §6.2)."""
    ident = _IDENT_BAD.sub("_", name) or "v"
    if ident[0].isdigit():
        ident = "v" + ident
    if ident in NNEF_KEYWORDS:
        ident += "_"
    return ident


@dataclass(frozen=True, eq=False)
class NTensor:
    """A value of the graph: its identifier, tract datum type and shape."""

    name: str
    dtype: str
    shape: tuple[Size, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)


@dataclass(frozen=True)
class Tuple:
    """An NNEF tuple literal ``(a, b)`` (lists are written from Python lists)."""

    items: tuple[Any, ...]


@dataclass
class NVariable:
    """A weight stored in ``<label>.dat``; its payload references the torch data (no copy)."""

    tensor: NTensor
    label: str
    payload: AnyPayload


@dataclass
class NOp:
    """One assignment ``outputs = kind(args..., attrs...)``."""

    kind: str
    args: tuple[Any, ...]
    attrs: dict[str, Any]
    outputs: tuple[NTensor, ...]


@dataclass
class NExternal:
    """A graph input declaration."""

    tensor: NTensor


@dataclass
class NAlias:
    """``out = copy(src)``-style alias, used for outputs that must carry their own name."""

    tensor: NTensor
    source: NTensor


Statement = NOp | NExternal | NVariable | NAlias

@dataclass
class NNEFGraph:
    """A whole ``graph.nnef`` (+ ``graph.quant``) document being built."""

    name: str = "network"
    strict: bool = False  # KhronosNNEF: no tract extensions allowed
    # The tract registries the target has (None: any); using another one is an error.
    available_registries: frozenset[str] | None = None
    inputs: list[NTensor] = field(default_factory=list)
    outputs: list[NTensor] = field(default_factory=list)
    body: list[Statement] = field(default_factory=list)
    variables: dict[str, NVariable] = field(default_factory=dict)
    registries: list[str] = field(default_factory=list)
    extensions: list[str] = field(default_factory=list)
    fragments: dict[str, str] = field(default_factory=dict)
    _used_names: set[str] = field(default_factory=set)
    _name_counters: dict[str, int] = field(default_factory=dict)
    _reserved: set[str] = field(default_factory=set)  # output names, claimed by their producer

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    # --- names ------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A new unique identifier derived from ``base``; linear-time over a whole export."""
        base = sanitize_identifier(base)
        if base not in self._used_names and base not in self._reserved:
            self._used_names.add(base)
            return base
        n = self._name_counters.get(base, 0)
        while True:
            n += 1
            candidate = f"{base}_{n}"
            if candidate not in self._used_names and candidate not in self._reserved:
                self._name_counters[base] = n
                self._used_names.add(candidate)
                return candidate

    def reserve_name(self, name: str, claim_later: bool = False) -> None:
        """Claim an exact identifier (user-given IO names); error if taken or invalid.
        With ``claim_later`` the name is kept free for ``op(..., exact=True)``."""
        if sanitize_identifier(name) != name:
            raise T2NErrorInvalidArgument(
                f"{name!r} is not a valid NNEF identifier: use letters, digits and '_' "
                "only, not starting with a digit, and no NNEF keyword"
            )
        if name in self._used_names or name in self._reserved:
            raise T2NErrorInvalidArgument(f"the name {name!r} is used twice in the graph")
        if claim_later:
            self._reserved.add(name)
        else:
            self._used_names.add(name)

    def claim(self, name: str) -> str:
        """Take a name reserved with ``reserve_name(..., claim_later=True)``."""
        self._reserved.discard(name)
        self._used_names.add(name)
        return name

    # --- building -----------------------------------------------------------------------
    def add_input(self, name: str, dtype: str, shape: Sequence[Size]) -> NTensor:
        tensor = NTensor(name, dtype, tuple(shape))
        self.inputs.append(tensor)
        self.body.append(NExternal(tensor))
        return tensor

    def add_variable(self, name: str, label: str, payload: AnyPayload, dtype: str, shape: Sequence[Size]) -> NTensor:
        """Declare a weight; a label already declared returns its existing tensor (tied weights)."""
        known = self.variables.get(label)
        if known is not None:
            return known.tensor
        tensor = NTensor(self.fresh_name(name), dtype, tuple(shape))
        var = NVariable(tensor, label, payload)
        self.variables[label] = var
        self.body.append(var)
        return tensor

    def op(
        self,
        kind: str,
        args: Iterable[Any],
        attrs: dict[str, Any] | None = None,
        *,
        name: str,
        dtype: str,
        shape: Sequence[Size],
        exact: bool = False,
    ) -> NTensor:
        """Append a single-output op; ``name`` is a base, made unique here, or with
        ``exact`` a reserved output name claimed as is."""
        name = self.claim(name) if exact and name in self._reserved else self.fresh_name(name)
        out = NTensor(name, dtype, tuple(shape))
        self.op_multi(kind, args, attrs, outputs=(out,))
        return out

    def op_multi(
        self, kind: str, args: Iterable[Any], attrs: dict[str, Any] | None, *, outputs: Sequence[NTensor]
    ) -> tuple[NTensor, ...]:
        """Append an op whose output tensors the caller has named (``fresh_name``); the
        registry it needs is noted by the caller (op/builder.py, from its declaration)."""
        op = NOp(kind, tuple(args), dict(attrs or {}), tuple(outputs))
        self.body.append(op)
        return op.outputs

    def alias(self, name: str, source: NTensor) -> NTensor:
        tensor = NTensor(name, source.dtype, source.shape)
        self.body.append(NAlias(tensor, source))
        return tensor

    def use_registry(self, registry: str, needed_by: str = "") -> None:
        if self.strict:
            by = f" (for {needed_by})" if needed_by else ""
            raise T2NErrorStrictNNEFSpec(
                f"this graph needs the tract registry {registry!r}{by}, which strict NNEF "
                "(KhronosNNEF) does not have: export with TractNNEF instead"
            )
        if self.available_registries is not None and registry not in self.available_registries:
            by = f" (for {needed_by})" if needed_by else ""
            raise T2NErrorNotImplemented(
                f"this graph needs the tract registry {registry!r}{by}, which the target tract "
                "version does not have: raise the TractNNEF version"
            )
        if registry not in self.registries:
            self.registries.append(registry)
