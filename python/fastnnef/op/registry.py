"""The op registry: aten kind -> handler, registered by decorator.

A handler is a small pure function ``fn(ctx, *args) -> NTensor | list[NTensor]``. The
decorator declares how the node's inputs are read (``args="t i I?"``), so handler bodies
never unpack TorchScript values, and optionally the first tract version it needs
(``since="0.22.0"``); lookup picks the newest handler whose ``since`` <= the target.

A node with a complex input or output only reaches handlers registered with
``complex=True`` (complex values are real tensors with a trailing (re, im) axis, which a
real handler would misread); such a handler also serves real nodes of a kind that has no
real handler.

Argument kinds (space separated, one per aten input; ``?`` suffix = may be None):

=====  ===============================================================================
``t``  tensor -> ``NTensor`` (parameters and constants become variables or literals)
``x``  tensor or Python number -> ``NTensor`` or ``int``/``float``/``bool``
``i``  static int            ``f``  float (ints accepted)     ``b``  bool
``s``  str                   ``n``  any constant, raw (dtype codes, devices, None...)
``I``  list of static ints   ``D``  list of dims, ints or ``Sym`` for dynamic axes
``L``  list of tensors       ``*``  ignore this input and all the following ones
``_``  ignore this input
=====  ===============================================================================
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

from fastnnef.exceptions import T2NErrorConsistency
from fastnnef.utils import SemanticVersion

_KINDS = frozenset("t x i f b s n I D L * _".split())


@dataclass(frozen=True)
class HandlerSpec:
    kind: str
    fn: Callable[..., Any]
    arg_kinds: tuple[str, ...]
    since: Optional[SemanticVersion]
    complex: bool = False

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0] if self.fn.__doc__ else ""


class OpRegistry:
    """aten kind -> handlers (several when version-gated)."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[HandlerSpec]] = {}

    def register(
        self, *kinds: str, args: str, since: Optional[str] = None, complex: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        arg_kinds = tuple(args.split())
        for token in arg_kinds:
            if token.rstrip("?") not in _KINDS:
                raise T2NErrorConsistency(f"unknown argument kind {token!r} in {args!r}")
        version = SemanticVersion.from_str(since) if since else None

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            for kind in kinds:
                specs = self._handlers.setdefault(kind, [])
                if any(s.since == version and s.complex == complex for s in specs):
                    raise T2NErrorConsistency(
                        f"{kind} registered twice (since={since}): {fn.__module__}.{fn.__name__}"
                    )
                specs.append(HandlerSpec(kind, fn, arg_kinds, version, complex))
                specs.sort(key=lambda s: s.since or SemanticVersion(major=0, minor=0, patch=0))
            return fn

        return decorate

    def lookup(self, kind: str, version: Optional[SemanticVersion], complex: bool = False) -> Optional[HandlerSpec]:
        """The newest handler usable at tract ``version`` (``None``: not tract, so only
        handlers without ``since``) for a node with (``complex``) or without complex
        values; in-place ``op_`` falls back to ``op``."""
        for candidate in (kind, kind[:-1] if kind.endswith("_") and not kind.endswith("__") else None):
            if candidate is None:
                continue
            known = self._handlers.get(candidate, [])
            real = [s for s in known if not s.complex]
            specs = [s for s in known if s.complex] if complex else real or known
            if specs:
                usable = [s for s in specs if s.since is None or (version is not None and s.since <= version)]
                if usable:
                    return usable[-1]
                return specs[0]  # too new for the target: the caller reports the gate
        return None

    def kinds(self) -> list[str]:
        return sorted(self._handlers)


DEFAULT_REGISTRY = OpRegistry()
handler = DEFAULT_REGISTRY.register

# Every handler family, imported explicitly (one module per family under op/aten/).
FAMILIES = (
    "fastnnef.op.aten.activation",
    "fastnnef.op.aten.arithmetic",
    "fastnnef.op.aten.linalg",
    "fastnnef.op.aten.conv",
    "fastnnef.op.aten.pool",
    "fastnnef.op.aten.norm",
    "fastnnef.op.aten.shape",
    "fastnnef.op.aten.indexing",
    "fastnnef.op.aten.reduce",
    "fastnnef.op.aten.creation",
    "fastnnef.op.aten.attention",
    "fastnnef.op.aten.resize",
    "fastnnef.op.aten.recurrent",
    "fastnnef.op.aten.pointwise",
    "fastnnef.op.aten.special",
    "fastnnef.op.aten.cumulative",
    "fastnnef.op.aten.distance",
    "fastnnef.op.aten.loss",
    "fastnnef.op.aten.layout",
    "fastnnef.op.aten.diagonal",
    "fastnnef.op.aten.scatter",
    "fastnnef.op.aten.lookup",
    "fastnnef.op.aten.transformer",
    "fastnnef.op.aten.quantized",
    "fastnnef.op.aten.complex",
    "fastnnef.op.aten.spectral",
    "fastnnef.op.aten.sampling",
    "fastnnef.op.aten.inplace",
    "fastnnef.op.aten.sorting",
)
_loaded = False


def load_handlers() -> OpRegistry:
    """Import every family once; an empty registry is an error, not a silent no-op."""
    global _loaded
    if not _loaded:
        for module in FAMILIES:
            importlib.import_module(module)
        _loaded = True
        if not DEFAULT_REGISTRY.kinds():
            raise T2NErrorConsistency("no op handler is registered")
    return DEFAULT_REGISTRY
