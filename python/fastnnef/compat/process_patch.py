"""A process-wide attribute patch, shared by every scope that holds it, thread-safe.

Two drop-in surfaces work as the reference (and accelerate) make them work: by replacing
functions of other libraries for the whole process while a ``with`` block runs
(``init_empty_weights``: ``nn.Module.register_parameter``/``register_buffer``;
``ctx_maybe_load_from_disk_as_offloaded``: ``torch.load``, safetensors' and PEFT's loaders).
Every thread sees the replacement while any holder is inside: that is what they are for
(loaders often read shards in worker threads), and why fastnnef's own export paths use
neither.

A ``ProcessWidePatch`` makes overlapping holders safe: the first holder to enter installs the
replacements (saving what was there), the others only count themselves in, and the saved
originals are restored exactly once, when the last holder leaves, in whatever order holders
leave (nested scopes, or threads). Each holder may bring a value (e.g. its offload
directory); replacements read the value of the newest holder still inside (``current()``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ProcessWidePatch"]

# (object, attribute name, value to set)
Replacement = tuple[Any, str, Any]


class _Holder:
    """One scope inside the patch (compared by identity), with its value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class ProcessWidePatch:
    """Replacements built by ``replacements()`` when the first holder enters, in place until
    the last one leaves. ``replacements`` runs under the patch's lock, before anything is
    replaced: it reads the originals it wraps from the objects it patches."""

    def __init__(self, replacements: Callable[[], list[Replacement]]) -> None:
        self._replacements = replacements
        self._lock = threading.Lock()
        self._holders: list[_Holder] = []  # oldest first
        self._saved: list[Replacement] = []  # the originals, while installed

    @property
    def installed(self) -> bool:
        """Whether the replacements are in place (some holder is inside)."""
        with self._lock:
            return bool(self._holders)

    def current(self) -> Any:
        """The value of the newest holder still inside (the replacements call this)."""
        with self._lock:
            if not self._holders:
                raise RuntimeError("ProcessWidePatch.current() called with no holder inside")
            return self._holders[-1].value

    @contextmanager
    def held(self, value: Any = None) -> Iterator[None]:
        """Hold the patch for the ``with`` block (installing it if no one else holds it)."""
        holder = _Holder(value)
        with self._lock:
            if not self._holders:
                self._install()
            self._holders.append(holder)
        try:
            yield
        finally:
            with self._lock:
                self._holders.remove(holder)
                if not self._holders:
                    self._restore()

    def _install(self) -> None:
        replacements = self._replacements()
        self._saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in replacements]
        try:
            for obj, attr, new in replacements:
                setattr(obj, attr, new)
        except BaseException:
            self._restore()
            raise

    def _restore(self) -> None:
        saved, self._saved = self._saved, []
        for obj, attr, original in reversed(saved):
            setattr(obj, attr, original)
