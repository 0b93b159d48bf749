"""Host <-> GPU copies through pinned memory, and the GPU memory a budget allows.

Where the bytes go when the CuPy backend sorts host-resident chunks: every
key crosses the host link twice each way (chunk up, run down; slices up,
merged chunk down).  Pageable copies run several times slower than pinned
ones (7.5-11 against 54 GB/s on the reference H100), so:

* runs and merged chunks are written into *pinned* host arrays
  (:func:`empty_pinned`, from CuPy's pinned pool, reused across tasks): the
  D2H copy that fills them and the H2D copy that later reads their slices
  both run at pinned speed;
* a pageable input (the user's chunk) goes up through two reused pinned
  slices per thread: a few host threads copy slice ``i + 1`` into pinned
  memory while the copy engine moves slice ``i`` (:func:`to_device`).

:class:`GpuMemory` is the budget: a dedicated CuPy memory pool whose limit
is the budget (an allocation past it raises rather than taking more), a
reservation counter so that concurrent tasks on one worker together stay
within it, and the pool's measured high-water mark.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import numpy as np

import cupy
import cupyx

#: Bytes per pinned staging slice; each thread keeps two.
SLICE_BYTES = 64 * 2**20
#: Host threads that copy pageable memory into the pinned slices.
COPY_THREADS = max(1, min(16, (os.cpu_count() or 2) // 2))
_COPY_MIN = 4 * 2**20  # below this one thread copies

_MEMORY_TYPE_HOST = 1  # cudaMemoryTypeHost; pageable memory reads 0 (unregistered)

_local = threading.local()
_copiers = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="gpusort-staging")


def empty_pinned(n: int, dtype: Any) -> np.ndarray:
    """A NumPy array of ``n`` elements in pinned (page-locked) host memory."""
    return cupyx.empty_pinned((n,), np.dtype(dtype))


def is_pinned(x: np.ndarray) -> bool:
    """Whether the host array ``x`` lives in memory CUDA has page-locked."""
    if x.nbytes == 0:
        return True
    try:
        attrs = cupy.cuda.runtime.pointerGetAttributes(x.ctypes.data)
    except cupy.cuda.runtime.CUDARuntimeError:
        return False
    return attrs.type == _MEMORY_TYPE_HOST


def stream() -> cupy.cuda.Stream:
    """This thread's non-blocking stream: tasks on other threads overlap with it."""
    device = cupy.cuda.Device().id
    streams = _local.__dict__.setdefault("streams", {})
    if device not in streams:
        streams[device] = cupy.cuda.Stream(non_blocking=True)
    return streams[device]


def to_device(host: np.ndarray, out: cupy.ndarray) -> None:
    """Copy contiguous ``host`` into ``out`` (same size and dtype) on :func:`stream`; async.

    Pinned sources go in one DMA; pageable ones through two pinned slices.
    """
    src, dst = _bytes(host), out.view(np.uint8).reshape(-1)
    s = stream()
    if is_pinned(host):
        dst.set(src, stream=s)
        return
    slots, events = _slots()
    for i, a in enumerate(range(0, src.size, SLICE_BYTES)):
        b = min(src.size, a + SLICE_BYTES)
        slot = i % 2
        events[slot].synchronize()  # the copy engine is done reading this slot
        _copy(slots[slot][: b - a], src[a:b])
        dst[a:b].set(slots[slot][: b - a], stream=s)
        events[slot].record(s)


def to_host(dev: cupy.ndarray, out: np.ndarray) -> None:
    """Copy ``dev`` into contiguous host ``out``; done when this returns.

    Pinned targets take one DMA; pageable ones come down through the slices.
    """
    src, dst = dev.view(np.uint8).reshape(-1), _bytes(out)
    s = stream()
    if is_pinned(out):
        _get(src, dst, s)
        s.synchronize()
        return
    slots, events = _slots()
    pending = []
    for i, a in enumerate(range(0, src.size, SLICE_BYTES)):
        b = min(src.size, a + SLICE_BYTES)
        slot = i % 2
        if len(pending) == 2:
            _drain(pending.pop(0), slots, events, dst)
        _get(src[a:b], slots[slot][: b - a], s)
        events[slot].record(s)
        pending.append((slot, a, b))
    for item in pending:
        _drain(item, slots, events, dst)


def _get(src: cupy.ndarray, out: np.ndarray, s: cupy.cuda.Stream) -> None:
    """Enqueue the copy of ``src`` into ``out`` on ``s`` without waiting for it."""
    try:
        src.get(stream=s, out=out, blocking=False)
    except TypeError:  # a CuPy without `blocking`: its get waits for the copy
        src.get(stream=s, out=out)


def _drain(item, slots, events, dst) -> None:
    slot, a, b = item
    events[slot].synchronize()
    _copy(dst[a:b], slots[slot][: b - a])


def _slots() -> tuple[list[np.ndarray], list[cupy.cuda.Event]]:
    slots = getattr(_local, "slots", None)
    if slots is None:
        slots = _local.slots = [empty_pinned(SLICE_BYTES, np.uint8) for _ in range(2)]
        _local.events = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
        for e in _local.events:
            e.record()
    return slots, _local.events


def _bytes(x: np.ndarray) -> np.ndarray:
    if not x.flags.c_contiguous:
        raise ValueError("staging copies contiguous arrays only")
    return x.reshape(-1).view(np.uint8)


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` on :data:`COPY_THREADS` threads (NumPy drops the GIL while copying)."""
    n = src.size
    if n < _COPY_MIN or COPY_THREADS == 1:
        np.copyto(dst, src)
        return
    edges = [n * i // COPY_THREADS for i in range(COPY_THREADS + 1)]
    list(_copiers.map(lambda ab: np.copyto(dst[ab[0]:ab[1]], src[ab[0]:ab[1]]), zip(edges[:-1], edges[1:])))


class GpuMemory:
    """The GPU memory a budget allows on one device: a limited pool, reservations, a high-water mark.

    Every allocation of the budgeted steps comes from :attr:`pool` (through
    :meth:`run`), whose limit is the budget, so gpusort's GPU footprint
    never passes it -- an allocation that would raises ``OutOfMemoryError``.
    Concurrent steps on one worker reserve their planned footprint first and
    wait while the sum would pass the budget.  When RMM is CuPy's allocator
    (dask-cuda ``rmm_pool_size``), the pool takes its blocks from RMM.
    """

    def __init__(self, budget: int):
        current = getattr(cupy.cuda, "get_allocator", lambda: None)()
        upstream = current if "rmm" in str(getattr(current, "__module__", "")) else None
        self.pool = cupy.cuda.MemoryPool(upstream) if upstream is not None else cupy.cuda.MemoryPool()
        self.budget = int(budget)
        self.pool.set_limit(size=self.budget)
        self.reserved = 0
        self.peak_bytes = 0
        self.peak_used_bytes = 0
        self.steps = 0  # steps run since the last reset_peak
        self._lock = threading.Condition()

    def malloc(self, size: int):
        try:
            mem = self.pool.malloc(size)
        except cupy.cuda.memory.OutOfMemoryError:
            # The limit counts cached free blocks too (of other streams, or
            # split): give those back and try once more.
            self.pool.free_all_blocks()
            mem = self.pool.malloc(size)
        self.peak_bytes = max(self.peak_bytes, self.pool.total_bytes())
        self.peak_used_bytes = max(self.peak_used_bytes, self.pool.used_bytes())
        return mem

    def run(self, nbytes: int, fn, *args):
        """``fn(*args)`` with ``nbytes`` of the budget reserved and the pool as allocator.

        Steps run concurrently while their reservations fit the budget.  A
        step that still meets the limit (the pool fragmented by a concurrent
        step) runs again alone, with the whole budget and an emptied cache.
        """
        try:
            return self._run(nbytes, fn, args)
        except cupy.cuda.memory.OutOfMemoryError:
            pass  # retried below, once the failed attempt's arrays (held by the traceback) are gone
        gc.collect()
        return self._run(self.budget, fn, args, alone=True)

    def _run(self, nbytes: int, fn, args, alone: bool = False):
        self.steps += 1
        with self._reserve(nbytes), cupy.cuda.using_allocator(self.malloc), stream() as s:
            if alone:
                s.synchronize()
                self.pool.free_all_blocks()
            result = fn(*args)
            s.synchronize()
            return result

    @contextlib.contextmanager
    def _reserve(self, nbytes: int) -> Iterator[None]:
        nbytes = min(int(nbytes), self.budget)
        with self._lock:
            while self.reserved + nbytes > self.budget:
                self._lock.wait()
            self.reserved += nbytes
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= nbytes
                self._lock.notify_all()

    def stats(self) -> dict[str, int]:
        return {"budget_bytes": self.budget, "peak_bytes": self.peak_bytes,
                "peak_used_bytes": self.peak_used_bytes, "pool_bytes": self.pool.total_bytes()}

    def reset_peak(self) -> None:
        self.steps = 0
        self.peak_bytes = self.pool.total_bytes()
        self.peak_used_bytes = self.pool.used_bytes()
