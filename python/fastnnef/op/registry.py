"""The op registry: aten kind -> handler, registered by decorator.

A handler is a small pure function ``fn(ctx, *args) -> NTensor | list[NTensor]``. The
decorator declares how the node's inputs are read (``args="t i I?"``), so handler bodies
never see the IR's values, and optionally the version gate it needs (``since=`` a name of
``VERSION_GATES`` in inference_target/capabilities.py, e.g. ``since="scatter_reductions"``);
lookup picks the newest handler whose gate is open for the target.

One aten kind can have several schema overloads whose inputs differ (``lstm.input`` and
``lstm.data``, ``sort`` and ``sort.stable``): each gets its own handler, named by
``overload=``; the first one (in registration order) whose argument kinds fit the node's
inputs runs (op/context.py ``bind_args``).

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
``I``  list of static ints   ``D``  list of dims, ints or ``DimExpr`` for dynamic axes
``L``  list of tensors       ``O``  list of optional tensors (``Tensor?[]``: ``None`` items)
``v``  any value as it is: a tensor -> ``NTensor``, a constant -> its Python value (``None``,
       str, complex, lists...), a size of a dynamic axis -> ``DimExpr``
``*``  ignore this input and all the following ones
``_``  ignore this input
=====  ===============================================================================

What the declaration cannot say (the node's aten kind, the torch dtype or traced shape of an
input, whether an input is a tensor) the handler asks ``OpContext``: ``ctx.kind``,
``ctx.input_dtype(i)``, ``ctx.traced_shape(i)``, ``ctx.is_tensor(i)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastnnef.exceptions import T2NErrorConsistency
from fastnnef.inference_target.capabilities import VERSION_GATES
from fastnnef.utils import SemanticVersion

_KINDS = frozenset("t x i f b s n v I D L O * _".split())


@dataclass(frozen=True)
class HandlerSpec:
    kind: str
    fn: Callable[..., Any]
    arg_kinds: tuple[str, ...]
    since: SemanticVersion | None
    complex: bool = False
    overload: str = ""

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0] if self.fn.__doc__ else ""


class OpRegistry:
    """aten kind -> handlers (several when version-gated)."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[HandlerSpec]] = {}

    def register(
        self, *kinds: str, args: str, since: str | SemanticVersion | None = None,
        complex: bool = False, overload: str = "",
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``fn`` handles ``kinds``. ``since``: the name of the version gate the
        emitted ops need (a ``SemanticVersion`` only for plugins, op/extras.py);
        ``overload``: names one of several schema overloads of a kind (see above)."""
        arg_kinds = tuple(args.split())
        for token in arg_kinds:
            if token.rstrip("?") not in _KINDS:
                raise T2NErrorConsistency(f"unknown argument kind {token!r} in {args!r}")
        version = _gate_version(since)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            for kind in kinds:
                specs = self._handlers.setdefault(kind, [])
                if any(s.since == version and s.complex == complex and s.overload == overload for s in specs):
                    raise T2NErrorConsistency(
                        f"{kind} registered twice (since={since}): {fn.__module__}.{fn.__name__}"
                    )
                specs.append(HandlerSpec(kind, fn, arg_kinds, version, complex, overload))
                specs.sort(key=lambda s: s.since or SemanticVersion(major=0, minor=0, patch=0))
            return fn

        return decorate

    def lookup(self, kind: str, version: SemanticVersion | None, complex: bool = False) -> HandlerSpec | None:
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
                if usable:  # the newest gate; its first overload (the others: overloads())
                    return next(s for s in usable if s.since == usable[-1].since)
                return specs[0]  # too new for the target: the caller reports the gate
        return None

    def overloads(self, spec: HandlerSpec) -> list[HandlerSpec]:
        """``spec`` and the handlers of the other schema overloads of its kind at the same
        gate, in registration order."""
        return [
            s for s in self._handlers[spec.kind] if s.since == spec.since and s.complex == spec.complex
        ]

    def kinds(self) -> list[str]:
        return sorted(self._handlers)


def _gate_version(since: str | SemanticVersion | None) -> SemanticVersion | None:
    """The first tract version of gate ``since`` (a ``VERSION_GATES`` name)."""
    if since is None or isinstance(since, SemanticVersion):
        return since
    gate = VERSION_GATES.get(since)
    if gate is None:
        raise T2NErrorConsistency(
            f"since={since!r} is not a version gate; name one of VERSION_GATES "
            f"(inference_target/capabilities.py), adding it there if needed: {sorted(VERSION_GATES)}"
        )
    return gate.first


DEFAULT_REGISTRY = OpRegistry()
handler = DEFAULT_REGISTRY.register
