"""A cache of materialized offloaded tensors, with prefetch on worker threads
(torch_to_nnef's ``tensor.residency``).

Without a pool, every torch op on an :class:`~fastnnef.tensor.offload.OffloadedTensor`
materializes it (maps its bytes, converts or dequantizes them) and drops the result after
the op. Inside ``pool.scope()``, materializations go through the pool instead: a weight
used by several ops (a tied embedding, a layer applied twice, the trace then a check) is
materialized once and kept while the budget allows, and ``prefetch`` does the work (the
disk reads included) ahead, on worker threads.

Strategies (what stays cached past the current use):

- ``LRU`` (default): over ``max_cached_bytes``, the least recently used values go first;
  ``pin`` exempts a value until ``unpin``.
- ``FIXED``: the first values that fit in ``max_cached_bytes`` stay for the pool's life;
  later ones are handed out without being kept. ``pin`` does not apply.

Leased values (``acquire``) and values in the middle of a load are never evicted. The
budget bounds what the pool *keeps*; a value larger than it is still handed to its caller,
then dropped. Keys are the data, not the Python object: ``w``, ``w.detach()`` and the
parameter made from it share one entry.

Values are shared between their users: do not write into a view of one (offloaded tensors
are read-only; writing into the tensor itself already raises). ``acquire(mode="read_write")``
is refused for that reason, so ``flush`` only waits for loads in progress: there is never
anything to write back (the reference writes modified values back to its offload files).

Example::

    with TensorResidencyPool(max_cached_bytes=2 << 30, max_workers=2) as pool, pool.scope():
        for layer in model.layers[:2]:
            pool.prefetch(layer.mlp.up_proj.weight)
        export_model_to_nnef(model, x, "llm.nnef.tgz", TractNNEF.latest())
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import threading
from collections.abc import Iterator
from typing import Any

import torch

from fastnnef.exceptions import T2NErrorMisuse, T2NErrorNotImplemented
from fastnnef.log import get_logger
from fastnnef.tensor.offload import OffloadedTensor, materialize_through
from fastnnef.tensor.offload import active_tensor_residency as active_tensor_residency  # re-exported: what scope() sets

log = get_logger()

Device = int | str | torch.device

_PAGE = 4096


class ResidencyStrategy(enum.Enum):
    """What a :class:`TensorResidencyPool` keeps past the current use (module docstring)."""

    LRU = "lru"
    FIXED = "fixed"


@dataclasses.dataclass
class _Entry:
    source: OffloadedTensor  # keeps the checkpoint (part of the key) alive
    device: torch.device
    future: concurrent.futures.Future[torch.Tensor]
    value: torch.Tensor | None = None  # set once loaded
    nbytes: int = 0
    leases: int = 0
    pinned: bool = False
    fixed: bool = False  # admitted for good by FIXED


class TensorPrefetch:
    """A load started by :meth:`TensorResidencyPool.prefetch` or ``pin``."""

    def __init__(self, future: concurrent.futures.Future[torch.Tensor]) -> None:
        self._future = future

    def wait(self) -> torch.Tensor:
        """The value, once loaded (re-raises the load's error)."""
        return self._future.result()

    def done(self) -> bool:
        """Whether the load has finished (or failed)."""
        return self._future.done()


class TensorResidencyLease:
    """``with pool.acquire(t) as value:`` — ``value`` stays resident inside the block."""

    def __init__(self, pool: TensorResidencyPool, source: OffloadedTensor, device: torch.device) -> None:
        self._pool = pool
        self._source = source
        self._device = device
        self._key: tuple[Any, ...] | None = None

    def __enter__(self) -> torch.Tensor:
        if self._key is not None:
            raise T2NErrorMisuse("this lease is already held; call pool.acquire() again for another")
        self._key, value = self._pool._lease(self._source, self._device)
        return value

    def __exit__(self, *exc: Any) -> None:
        key, self._key = self._key, None
        if key is not None:
            self._pool._release(key)


class TensorResidencyPool:
    """Keeps materialized offloaded tensors across uses, within ``max_cached_bytes``
    (``None``: no limit), loading ahead on ``max_workers`` threads; thread-safe.

    Use it as a context manager (``close()`` on exit) and activate it with ``scope()``.
    """

    def __init__(
        self,
        max_cached_bytes: int | None = None,
        max_workers: int = 1,
        strategy: ResidencyStrategy = ResidencyStrategy.LRU,
    ) -> None:
        if max_cached_bytes is not None and (not isinstance(max_cached_bytes, int) or max_cached_bytes < 0):
            raise T2NErrorMisuse(f"max_cached_bytes must be None or an int >= 0, got {max_cached_bytes!r}")
        if not isinstance(max_workers, int) or max_workers < 1:
            raise T2NErrorMisuse(f"max_workers must be an int >= 1, got {max_workers!r}")
        if not isinstance(strategy, ResidencyStrategy):
            raise T2NErrorMisuse(
                f"strategy must be ResidencyStrategy.LRU or ResidencyStrategy.FIXED, got {strategy!r}"
            )
        self.max_cached_bytes = max_cached_bytes
        self.strategy = strategy
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="fastnnef-residency")
        self._lock = threading.RLock()
        # Least recently used first: a use moves its entry to the end.
        self._entries: collections.OrderedDict[tuple[Any, ...], _Entry] = collections.OrderedDict()
        self._held = 0  # bytes of the loaded values in _entries
        self._fixed = 0  # of which admitted for good by FIXED
        self._closed = False
        self._stats = {"hits": 0, "loads": 0, "evictions": 0}

    # --- state --------------------------------------------------------------------------
    @property
    def resident_bytes(self) -> int:
        """Bytes of the values the pool holds now."""
        with self._lock:
            return self._held

    @property
    def stats(self) -> dict[str, int]:
        """``hits`` (served from the cache or a load in progress), ``loads`` (started),
        ``evictions`` (values dropped by the budget or ``evict``)."""
        with self._lock:
            return dict(self._stats)

    def is_resident(self, source: OffloadedTensor) -> bool:
        """Whether ``source``'s value is loaded and held by the pool."""
        with self._lock:
            entry = self._entries.get(_key(_check(source)))
            return entry is not None and entry.value is not None

    def is_pinned(self, source: OffloadedTensor) -> bool:
        self._lru_only("is_pinned")
        with self._lock:
            entry = self._entries.get(_key(_check(source)))
            return entry is not None and entry.pinned

    # --- loading ------------------------------------------------------------------------
    def prefetch(self, source: OffloadedTensor, device: Device | None = None) -> TensorPrefetch:
        """Start loading ``source`` on a worker thread (reading its bytes from disk) unless
        it is resident or loading; returns a handle to wait on."""
        return TensorPrefetch(self._get(_check(source), _device(source, device), background=True)[1].future)

    def resolve(self, source: OffloadedTensor, device: Device | None = None) -> torch.Tensor:
        """``source``'s value: from the pool, or loaded now in this thread (what
        ``OffloadedTensor`` materialization calls inside :meth:`scope`)."""
        _, entry = self._get(_check(source), _device(source, device), background=False)
        value = entry.future.result()
        with self._lock:
            self._evict_to_budget()
        return value

    def acquire(self, source: OffloadedTensor, device: Device | None = None,
                mode: str = "read") -> TensorResidencyLease:
        """A lease: ``with pool.acquire(t) as value:`` keeps ``value`` resident in the block.
        Only ``mode="read"``: offloaded tensors are read-only in fastnnef."""
        if mode == "read_write":
            raise T2NErrorNotImplemented(
                "acquire(mode='read_write'): offloaded tensors are read-only in fastnnef (their checkpoint is "
                "never written); modify a copy (value.clone()) and offload it with "
                "OffloadedTensor.from_original_tensor"
            )
        if mode != "read":
            raise T2NErrorMisuse(f"mode must be 'read', got {mode!r}")
        return TensorResidencyLease(self, _check(source), _device(source, device))

    def pin(self, source: OffloadedTensor, device: Device | None = None) -> TensorPrefetch:
        """Load ``source`` (on a worker) and keep it until :meth:`unpin` (LRU only)."""
        self._lru_only("pin")
        _, entry = self._get(_check(source), _device(source, device), background=True, pin=True)
        return TensorPrefetch(entry.future)

    def unpin(self, source: OffloadedTensor) -> None:
        self._lru_only("unpin")
        with self._lock:
            entry = self._entries.get(_key(_check(source)))
            if entry is None or not entry.pinned:
                raise T2NErrorMisuse(f"{source.key!r} is not pinned in this pool")
            entry.pinned = False
            self._entries.move_to_end(_key(source))
            self._evict_to_budget()

    def flush(self, source: OffloadedTensor | None = None) -> None:
        """Wait for the loads in progress (of ``source`` only, if given). Values are never
        modified, so there is nothing to write back."""
        with self._lock:
            entries = list(self._entries.values()) if source is None else [self._entries.get(_key(_check(source)))]
        for entry in entries:
            if entry is not None:
                concurrent.futures.wait([entry.future])

    def evict(self, source: OffloadedTensor) -> None:
        """Drop ``source``'s value now (after its load, if one is in progress); raises
        ``T2NErrorMisuse`` if it is leased or pinned."""
        key = _key(_check(source))
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return
        concurrent.futures.wait([entry.future])
        with self._lock:
            if self._entries.get(key) is not entry:
                return
            if entry.leases or entry.pinned:
                raise T2NErrorMisuse(f"cannot evict {source.key!r}: it is leased or pinned")
            self._drop(key)

    @contextlib.contextmanager
    def scope(self, device: Device | None = None) -> Iterator[TensorResidencyPool]:
        """Inside, offloaded tensors materialize through this pool (on ``device`` if given).
        Scopes nest (the innermost pool serves) and are per thread / asyncio task."""
        self._check_open()
        with materialize_through(self, None if device is None else torch.device(device)):
            yield self

    def close(self) -> None:
        """Wait for loads, drop every value, stop the workers; idempotent. Raises
        ``T2NErrorMisuse`` while a lease is held."""
        with self._lock:
            if self._closed:
                return
            if any(e.leases for e in self._entries.values()):
                raise T2NErrorMisuse("cannot close the pool while a lease is held (exit the acquire() blocks first)")
            self._closed = True
            pending = [e.future for e in self._entries.values()]
        concurrent.futures.wait(pending)
        self._executor.shutdown(wait=True)
        with self._lock:
            self._entries.clear()
            self._held = self._fixed = 0

    def __enter__(self) -> TensorResidencyPool:
        self._check_open()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        except T2NErrorMisuse:
            if exc is None:
                raise
            log.exception("could not close the tensor residency pool while handling another error")

    # --- internals ----------------------------------------------------------------------
    def _get(
        self, source: OffloadedTensor, device: torch.device, background: bool, pin: bool = False, lease: bool = False
    ) -> tuple[tuple[Any, ...], _Entry]:
        """The entry of ``source`` (created, and its load started, if absent)."""
        key = _key(source)
        with self._lock:
            self._check_open()
            entry = self._entries.get(key)
            created = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry(source, device, concurrent.futures.Future())
                self._stats["loads"] += 1
            elif entry.device != device:
                raise T2NErrorMisuse(
                    f"{source.key!r} is resident on {entry.device}; evict it before asking for {device}"
                )
            else:
                self._stats["hits"] += 1
            entry.pinned |= pin
            entry.leases += int(lease)
            self._entries.move_to_end(key)
            if created and background:  # under the lock: close() cannot shut the workers down in between
                self._executor.submit(self._load, key, entry, True)
        if created and not background:  # outside the lock: other users wait on the future, not on the lock
            self._load(key, entry, False)
        return key, entry

    def _load(self, key: tuple[Any, ...], entry: _Entry, read_ahead: bool) -> None:
        try:
            value = entry.source._materialize()
            if value.device != entry.device:
                value = value.to(entry.device)
            if read_ahead and value.numel():
                _read_pages(value)
        except BaseException as err:  # noqa: BLE001 - handed to every waiter
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]  # a later use retries
            entry.future.set_exception(err)
            return
        with self._lock:
            entry.value = value
            entry.nbytes = value.numel() * value.element_size()
            if self._entries.get(key) is entry:  # not dropped by close() meanwhile
                self._held += entry.nbytes
                if self.strategy is ResidencyStrategy.FIXED:
                    budget = self.max_cached_bytes
                    entry.fixed = budget is None or self._fixed + entry.nbytes <= budget
                    self._fixed += entry.nbytes if entry.fixed else 0
            entry.future.set_result(value)
            self._evict_to_budget()

    def _lease(self, source: OffloadedTensor, device: torch.device) -> tuple[tuple[Any, ...], torch.Tensor]:
        key, entry = self._get(source, device, background=False, lease=True)
        try:
            return key, entry.future.result()
        except BaseException:
            with self._lock:
                entry.leases -= 1
            raise

    def _release(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.leases < 1:
                raise T2NErrorMisuse("this lease is not held")
            entry.leases -= 1
            self._entries.move_to_end(key)
            self._evict_to_budget()

    def _evict_to_budget(self) -> None:
        # Called with the lock held. Evictable: loaded, not leased, not pinned, not fixed.
        if self.max_cached_bytes is None or self._held <= self.max_cached_bytes:
            return
        for key, entry in list(self._entries.items()):
            if self._held <= self.max_cached_bytes:
                return
            if entry.value is not None and not (entry.leases or entry.pinned or entry.fixed):
                self._drop(key)

    def _drop(self, key: tuple[Any, ...]) -> None:
        entry = self._entries.pop(key)
        self._held -= entry.nbytes
        self._fixed -= entry.nbytes if entry.fixed else 0
        self._stats["evictions"] += 1
        log.debug("residency: dropped %s (%d bytes)", entry.source.key, entry.nbytes)

    def _check_open(self) -> None:
        if self._closed:
            raise T2NErrorMisuse("this TensorResidencyPool is closed; create a new one")

    def _lru_only(self, what: str) -> None:
        if self.strategy is not ResidencyStrategy.LRU:
            raise T2NErrorMisuse(f"{what}() needs ResidencyStrategy.LRU: FIXED keeps its first values and pins nothing")


def _check(source: Any) -> OffloadedTensor:
    if not isinstance(source, OffloadedTensor):
        raise T2NErrorMisuse(f"TensorResidencyPool manages OffloadedTensor values, got {type(source).__name__}")
    return source


def _key(source: OffloadedTensor) -> tuple[Any, ...]:
    # The data, not the object: detach()/nn.Parameter() give new objects over the same
    # checkpoint tensor. The entry holds the source, hence the checkpoint: its id is stable.
    return (id(source.checkpoint), source.key, source.dtype, source.q4_0, source.packed)


def _device(source: OffloadedTensor, device: Device | None) -> torch.device:
    return torch.device(device) if device is not None else source.device


def _read_pages(value: torch.Tensor) -> None:
    """Read one byte per page of ``value`` so that a value mapped from its file is in
    memory before its first use (torch releases the GIL in the sum)."""
    flat = value.reshape(-1).view(torch.uint8) if value.is_contiguous() else value.contiguous().view(torch.uint8)
    flat[::_PAGE].sum()
