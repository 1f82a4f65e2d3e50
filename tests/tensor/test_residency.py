"""TensorResidencyPool: eviction order (LRU, FIXED), pins and leases, prefetch on worker
threads, scopes (nesting, per context), thread safety, and an export through a pool run
by tract, within the budget."""

from __future__ import annotations

import contextvars
import inspect
import random
import threading
import time

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from fastnnef.check import TractArtefact
from fastnnef.exceptions import T2NErrorMisuse, T2NErrorNotImplemented
from fastnnef.tensor.offload import OffloadedTensor, open_checkpoint
from fastnnef.tensor.offload_load import load_offloaded_checkpoint
from fastnnef.tensor.residency import ResidencyStrategy, TensorResidencyPool, active_tensor_residency
from fastnnef.utils import init_empty_weights
from tests.helpers import export_and_check

N = 1024  # elements per tensor: 4096 bytes in float32
SIZE = N * 4


@pytest.fixture
def tensors(tmp_path) -> dict[str, OffloadedTensor]:
    values = {name: torch.full((N,), float(i)) for i, name in enumerate("abcdef")}
    save_file(values, tmp_path / "t.safetensors")
    ckpt = open_checkpoint(tmp_path / "t.safetensors")
    return {name: OffloadedTensor(ckpt, name) for name in values}


def resident(pool: TensorResidencyPool, tensors: dict[str, OffloadedTensor]) -> str:
    return "".join(name for name, t in tensors.items() if pool.is_resident(t))


class GatedTensor(OffloadedTensor):
    """An offloaded tensor whose load notes its thread and waits for ``gate``."""

    gate: threading.Event
    threads: list[str]

    def _materialize(self) -> torch.Tensor:
        self.threads.append(threading.current_thread().name)
        assert self.gate.wait(60)
        return super()._materialize()


def gated(source: OffloadedTensor) -> GatedTensor:
    t = GatedTensor(source.checkpoint, source.key)
    t.gate, t.threads = threading.Event(), []
    return t


def wait_until(condition, what: str) -> None:
    # Synchronization with other threads, not a timing assertion: fails only if it never happens.
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_lru_evicts_the_least_recently_used(tensors):
    a, b, c = tensors["a"], tensors["b"], tensors["c"]
    with TensorResidencyPool(max_cached_bytes=2 * SIZE) as pool:
        assert float(pool.resolve(a)[0]) == 0.0
        pool.resolve(b)
        pool.resolve(a)  # a is now more recent than b
        pool.resolve(c)
        assert resident(pool, tensors) == "ac" and pool.resident_bytes == 2 * SIZE
        pool.resolve(b)
        assert resident(pool, tensors) == "bc"
        assert pool.stats == {"hits": 1, "loads": 4, "evictions": 2}
        pool.resolve(c.detach())  # another object over the same data: the same entry
        assert pool.stats["hits"] == 2


def test_pinned_values_stay_until_unpinned(tensors):
    a, b, c, d = (tensors[k] for k in "abcd")
    with TensorResidencyPool(max_cached_bytes=2 * SIZE) as pool:
        torch.testing.assert_close(pool.pin(a).wait(), torch.zeros(N))
        for t in (b, c, d):
            pool.resolve(t)
        assert resident(pool, tensors) == "ad" and pool.is_pinned(a)
        with pytest.raises(T2NErrorMisuse, match="^cannot evict 'a': it is leased or pinned$"):
            pool.evict(a)
        pool.unpin(a)  # back to LRU, as the most recent
        pool.resolve(b)
        assert resident(pool, tensors) == "ab" and not pool.is_pinned(a)
        with pytest.raises(T2NErrorMisuse, match="^'c' is not pinned in this pool$"):
            pool.unpin(c)


def test_fixed_keeps_the_first_values_that_fit(tensors):
    a, b, c = tensors["a"], tensors["b"], tensors["c"]
    with TensorResidencyPool(max_cached_bytes=2 * SIZE, strategy=ResidencyStrategy.FIXED) as pool:
        pool.resolve(a)
        pool.resolve(b)
        torch.testing.assert_close(pool.resolve(c), torch.full((N,), 2.0))  # handed out, not kept
        assert resident(pool, tensors) == "ab"
        pool.resolve(a)
        pool.resolve(c)
        assert pool.stats == {"hits": 1, "loads": 4, "evictions": 2}
        with pytest.raises(T2NErrorMisuse, match=r"^pin\(\) needs ResidencyStrategy.LRU"):
            pool.pin(c)
        pool.evict(a)  # an explicit eviction frees its room: the next value that fits stays
        pool.resolve(c)
        assert resident(pool, tensors) == "bc"


def test_values_larger_than_the_budget_are_handed_out_not_kept(tensors):
    with TensorResidencyPool(max_cached_bytes=SIZE // 2) as pool:
        torch.testing.assert_close(pool.resolve(tensors["b"]), torch.ones(N))
        assert pool.resident_bytes == 0 and not pool.is_resident(tensors["b"])


def test_leases_keep_values_resident(tensors):
    a, b = tensors["a"], tensors["b"]
    pool = TensorResidencyPool(max_cached_bytes=SIZE)
    with pool.acquire(a) as value:
        assert float(value[0]) == 0.0
        pool.resolve(b)  # over budget: b, not the leased a, goes
        assert resident(pool, tensors) == "a"
        with pytest.raises(T2NErrorMisuse, match="^cannot evict 'a'"):
            pool.evict(a)
        with pytest.raises(T2NErrorMisuse, match="^cannot close the pool while a lease is held"):
            pool.close()
    assert resident(pool, tensors) == "a"
    with pytest.raises(T2NErrorNotImplemented, match=r"^acquire\(mode='read_write'\): offloaded tensors are read-only"):
        pool.acquire(a, mode="read_write")
    pool.close()
    with pytest.raises(T2NErrorMisuse, match="^this TensorResidencyPool is closed; create a new one$"):
        pool.resolve(a)


def test_prefetch_loads_on_a_worker_thread(tensors):
    g = gated(tensors["c"])
    with TensorResidencyPool(max_workers=2) as pool:
        handle = pool.prefetch(g)
        assert not handle.done()  # returned while the load waits on the gate
        g.gate.set()
        torch.testing.assert_close(handle.wait(), torch.full((N,), 2.0))
        assert g.threads == ["fastnnef-residency_0"]
        pool.flush()
        assert pool.is_resident(g) and pool.stats["loads"] == 1


def test_concurrent_uses_share_one_load(tensors):
    g = gated(tensors["d"])
    results: list[torch.Tensor] = []
    with TensorResidencyPool() as pool:
        threads = [threading.Thread(target=lambda: results.append(pool.resolve(g))) for _ in range(8)]
        for t in threads:
            t.start()
        wait_until(lambda: sum(pool.stats.values()) == 8, "every thread asked for the tensor")
        g.gate.set()
        for t in threads:
            t.join()
    assert pool.stats == {"hits": 7, "loads": 1, "evictions": 0} and len(g.threads) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)


class FailingOnceTensor(OffloadedTensor):
    """An offloaded tensor whose first load fails (a read error)."""

    failed: bool = False

    def _materialize(self) -> torch.Tensor:
        if not self.failed:
            self.failed = True
            raise OSError("read error")
        return super()._materialize()


def test_a_failed_load_raises_to_its_waiter_and_is_retried(tensors):
    t = FailingOnceTensor(tensors["b"].checkpoint, "b")
    with TensorResidencyPool() as pool:
        handle = pool.prefetch(t)
        with pytest.raises(OSError, match="^read error$"):
            handle.wait()
        assert not pool.is_resident(t)
        torch.testing.assert_close(pool.resolve(t), torch.ones(N))  # the failed entry was dropped
        assert pool.stats["loads"] == 2 and pool.is_resident(t)


def test_thread_safety_under_a_small_budget(tensors):
    names = list(tensors)
    errors: list[BaseException] = []
    with TensorResidencyPool(max_cached_bytes=2 * SIZE, max_workers=2) as pool:

        def work(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(300):
                    name = rng.choice(names)
                    kind = rng.random()
                    if kind < 0.2:
                        with pool.acquire(tensors[name]) as value:
                            assert float(value[-1]) == names.index(name)
                    elif kind < 0.4:
                        pool.prefetch(tensors[name])
                    else:
                        assert float(pool.resolve(tensors[name])[0]) == names.index(name)
            except BaseException as err:  # noqa: BLE001 - reported by the main thread
                errors.append(err)

        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pool.flush()
        pool.resolve(tensors["a"])  # any access enforces the budget once loads are done
        assert errors == []
        assert pool.resident_bytes <= 2 * SIZE
        stats = pool.stats
        assert stats["loads"] - stats["evictions"] == len(resident(pool, tensors))


def test_scopes_nest_and_stay_in_their_context(tensors):
    a = tensors["a"]
    assert active_tensor_residency() is None
    with TensorResidencyPool() as outer, TensorResidencyPool() as inner:
        with outer.scope():
            a * 2  # an op materializes through the active pool
            with inner.scope():
                a * 2
                a * 2
                assert active_tensor_residency() == (inner, None)
                seen: list[object] = []
                thread = threading.Thread(target=lambda: seen.append(active_tensor_residency()))
                thread.start()
                thread.join()
                assert seen == [None]  # a new thread starts outside any scope
                assert contextvars.copy_context().run(active_tensor_residency) == (inner, None)
            assert active_tensor_residency() == (outer, None)
            a * 2
        assert active_tensor_residency() is None
        a * 2
        assert outer.stats == {"hits": 1, "loads": 1, "evictions": 0}
        assert inner.stats == {"hits": 1, "loads": 1, "evictions": 0}


def test_signature_is_the_reference_one():
    params = inspect.signature(TensorResidencyPool).parameters.values()
    assert [(p.name, p.default) for p in params] == [
        ("max_cached_bytes", None), ("max_workers", 1), ("strategy", ResidencyStrategy.LRU)
    ]
    assert {m.name: m.value for m in ResidencyStrategy} == {"LRU": "lru", "FIXED": "fixed"}


def test_arguments_are_checked(tensors):
    with pytest.raises(T2NErrorMisuse, match="^max_cached_bytes must be None or an int >= 0, got -1$"):
        TensorResidencyPool(max_cached_bytes=-1)
    with pytest.raises(T2NErrorMisuse, match="^max_workers must be an int >= 1, got 0$"):
        TensorResidencyPool(max_workers=0)
    with pytest.raises(T2NErrorMisuse, match="^strategy must be ResidencyStrategy.LRU or ResidencyStrategy.FIXED"):
        TensorResidencyPool(strategy="lru")  # type: ignore[arg-type]
    with TensorResidencyPool() as pool:
        with pytest.raises(T2NErrorMisuse, match="^TensorResidencyPool manages OffloadedTensor values, got Tensor$"):
            pool.prefetch(torch.zeros(2))  # type: ignore[arg-type]
        with pytest.raises(T2NErrorMisuse, match="^mode must be 'read', got 'write'$"):
            pool.acquire(tensors["a"], mode="write")


class Shared(nn.Module):
    """One layer applied twice, and an embedding tied to the head: weights used twice."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 64)
        self.layer = nn.Linear(64, 64)
        self.head = nn.Linear(64, 16, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = torch.tanh(self.layer(torch.tanh(self.layer(h))))
        return self.head(h)


@pytest.mark.parametrize("budget", [None, 64 * 64 * 4])
def test_export_through_a_pool(tmp_path, budget):
    torch.manual_seed(0)
    reference = Shared().eval()
    state = {k: v.to(torch.bfloat16) for k, v in reference.state_dict().items() if k != "head.weight"}
    save_file(state, tmp_path / "m.safetensors")
    with init_empty_weights():
        model = Shared().eval()
    load_offloaded_checkpoint(model, tmp_path / "m.safetensors")  # bf16 on disk, f32 model: converted when read
    ids = torch.tensor([[1, 3, 5, 7, 2]])
    with TensorResidencyPool(max_cached_bytes=budget) as pool, pool.scope():
        path = export_and_check(model, ids, tmp_path, compression_level=0)
        stats = pool.stats
        assert budget is None or pool.resident_bytes <= budget
    if budget is None:  # three weights, used 2 to 4 times each: materialized once each
        assert stats["loads"] == 3 and stats["hits"] >= 3 and stats["evictions"] == 0
    else:  # the layer's weight alone fills the budget: values come and go
        assert stats["evictions"] > 0
    reference.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    (got,) = TractArtefact.load(path).run([ids])
    np.testing.assert_allclose(got, reference(ids).detach().numpy(), rtol=1e-5, atol=1e-5)
