"""The host allocators (:mod:`gpusort.memory.hostpool`), on the CPU: the run pool's leases, views, reuse, release; the cache's kept buffers."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

from gpusort.memory.hostpool import ALIGN, HostCache, HostPool


def block_pool(nbytes: int = 2**20, idle: float = 30.0) -> tuple[HostPool, list]:
    made: list = []

    def allocate(n: int) -> np.ndarray:
        made.append(np.zeros(n, np.uint8))
        return made[-1]

    return HostPool(nbytes, allocate, idle), made


def test_arrays_are_aligned_writable_and_inside_the_block():
    pool, made = block_pool()
    arrays = [pool.empty(n, dt) for n, dt in [(1, np.int8), (1000, np.int64), (0, np.float32), (77, np.uint16)]]
    assert len(made) == 1
    base = made[0].ctypes.data
    for a, (n, dt) in zip(arrays, [(1, np.int8), (1000, np.int64), (0, np.float32), (77, np.uint16)]):
        assert a.shape == (n,) and a.dtype == dt and a.flags.writeable and a.flags.c_contiguous
        assert (a.ctypes.data - base) % ALIGN == 0 and base <= a.ctypes.data < base + 2**20
        a[:] = 3
    assert pool.leased_bytes() == 5 * ALIGN  # whole pages, at least one an array: 1 + 2 + 1 + 1
    del arrays, a
    assert pool.leased_bytes() == 0


def test_a_view_keeps_its_bytes_leased_until_it_is_gone():
    pool, _ = block_pool()
    a = pool.empty(4096, np.int64)
    a[:] = np.arange(4096)
    view = a[100:200]
    del a
    gc.collect()
    assert pool.leased_bytes() == 4096 * 8
    b = pool.empty(4096, np.int64)  # must not overlap the view's bytes
    b[:] = -1
    np.testing.assert_array_equal(view, np.arange(100, 200))
    del view, b
    assert pool.leased_bytes() == 0


def test_freed_ranges_coalesce_and_a_full_pool_says_none():
    pool, made = block_pool(8 * ALIGN)
    parts = [pool.empty(ALIGN, np.uint8) for _ in range(8)]
    assert pool.empty(1, np.uint8) is None
    del parts[2], parts[2]  # the third and fourth: two neighbouring pages
    big = pool.empty(2 * ALIGN, np.uint8)
    assert big is not None and pool.empty(1, np.uint8) is None
    del parts, big
    assert pool.leased_bytes() == 0 and pool.empty(8 * ALIGN, np.uint8) is not None
    assert pool.empty(9 * ALIGN, np.uint8) is None and len(made) == 1


def test_the_block_is_dropped_only_when_idle_and_taken_again_on_demand():
    pool, made = block_pool(2**16, idle=0.05)
    assert pool.held_bytes() == 0
    a = pool.empty(10, np.int32)
    assert pool.held_bytes() == 2**16 and not pool.release()
    time.sleep(0.15)
    assert pool.held_bytes() == 2**16  # leased: kept
    del a
    deadline = time.time() + 5
    while pool.held_bytes() and time.time() < deadline:
        time.sleep(0.02)
    assert pool.held_bytes() == 0
    b = pool.empty(10, np.int32)
    assert b is not None and len(made) == 2


def test_a_block_left_idle_is_dropped_with_nobody_asking():
    """The pool lets go of its block itself: nothing holds the block once it has been idle, with no call."""
    blocks: list = []
    pool = HostPool(2**16, lambda n: blocks.append(np.zeros(n, np.uint8)) or blocks[-1], 0.05)
    a = pool.empty(10, np.int32)
    block = weakref.ref(blocks.pop())
    del a  # the last lease: the idle clock starts here, not at the pool's next call
    deadline = time.time() + 5
    while block() is not None and time.time() < deadline:
        time.sleep(0.02)
    assert block() is None and pool.held_bytes() == 0


@pytest.mark.parametrize("make, taken_back", [
    (lambda: block_pool()[0], lambda pool: pool.leased_bytes() == 0),
    (lambda: HostCache(2**20), lambda cache: cache.kept_bytes() == ALIGN),
], ids=["pool", "cache"])
def test_an_array_dropped_while_its_thread_holds_the_allocator_does_not_deadlock(make, taken_back):
    """A finalizer may run in a garbage collection on a thread inside the allocator: it must not wait for itself."""
    owner = make()
    a = owner.empty(100, np.int64)

    def drop_inside() -> None:
        nonlocal a
        with owner._lock:
            del a

    worker = threading.Thread(target=drop_inside)
    worker.start()
    worker.join(5)
    assert not worker.is_alive()
    assert taken_back(owner)


def hammer(owner) -> list[bool]:
    """8 threads, 200 times each: take a page-sized array, fill it with the thread's number, check it, drop it."""
    seen: list = []
    lock = threading.Lock()

    def work(i: int) -> None:
        for _ in range(200):
            a = owner.empty(ALIGN // 8, np.int64)
            if a is None:  # a full pool
                continue
            a[:] = i
            with lock:
                seen.append(bool((a == i).all()))
            del a

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return seen


def test_threads_lease_disjoint_bytes():
    pool, made = block_pool(64 * ALIGN)
    seen = hammer(pool)
    assert seen and all(seen) and pool.leased_bytes() == 0 and len(made) == 1


def test_a_negative_length_is_refused_and_leases_nothing():
    pool, _ = block_pool()
    with pytest.raises(ValueError, match="n=-1"):
        pool.empty(-1, np.int64)
    assert pool.leased_bytes() == 0


# --- HostCache: buffers kept for later arrays ------------------------------------------------


def test_a_cached_buffer_serves_a_later_array_of_about_its_size_only():
    cache = HostCache(2**22)
    a = cache.empty(2**16, np.int64)  # 512 KiB
    a[:] = 5
    at = a.ctypes.data
    del a
    assert cache.kept_bytes() == 2**19
    small = cache.empty(2**10, np.int64)  # far smaller: a buffer of its own, the big one stays kept
    assert small.ctypes.data != at and cache.kept_bytes() == 2**19
    b = cache.empty(2**16 - 1000, np.float64)  # 7/8 or more of the kept buffer: served from it
    assert b.ctypes.data == at and b.shape == (2**16 - 1000,) and b.dtype == np.float64
    assert b.flags.writeable and b.flags.c_contiguous and cache.kept_bytes() == 0
    b[:] = 1.5
    assert (b == 1.5).all()


def test_a_view_keeps_the_buffer_from_the_cache_until_it_is_gone():
    cache = HostCache(2**22)
    a = cache.empty(1000, np.int32)
    view = a[10:20]
    del a
    assert cache.kept_bytes() == 0
    del view
    assert cache.kept_bytes() == ALIGN


def test_the_cache_keeps_at_most_its_bytes_and_lets_go_when_idle():
    cache = HostCache(3 * ALIGN, idle_seconds=0.05)
    arrays = [cache.empty(ALIGN, np.uint8) for _ in range(5)]
    buffers = [weakref.ref(a.base.block) for a in arrays]
    del arrays
    assert cache.kept_bytes() == 3 * ALIGN
    assert sum(b() is None for b in buffers) == 2  # past the bound: let go at once
    deadline = time.time() + 5
    while any(b() is not None for b in buffers) and time.time() < deadline:
        time.sleep(0.02)
    assert cache.kept_bytes() == 0 and all(b() is None for b in buffers)


def test_a_cache_of_no_bytes_keeps_nothing():
    cache = HostCache(0)
    a = cache.empty(10, np.int64)
    buffer = weakref.ref(a.base.block)
    del a
    assert cache.kept_bytes() == 0 and buffer() is None


def test_threads_get_disjoint_buffers_from_the_cache():
    cache = HostCache(8 * ALIGN)
    seen = hammer(cache)
    assert len(seen) == 1600 and all(seen) and cache.kept_bytes() <= 8 * ALIGN
