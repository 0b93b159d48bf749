"""Host <-> GPU copies through a small, fixed pool of pinned memory, and the GPU memory a budget allows.

Where the bytes go when the CuPy backend sorts host-resident chunks: every
key crosses the host link twice each way (chunk up, run down; slices up,
merged chunk down).  Pinned copies run at the link's speed, pageable ones
far below it, but *pinning* memory is slower still: pinning every run and
output chunk would cost more than the sort.  So runs and outputs live in
ordinary host memory and every copy goes through :class:`PinnedSlots`, a few
pinned buffers per GPU allocated once per process (``dask.config``
``gpusort.pinned-bytes``, default :data:`PINNED_BYTES`):

* a copy is cut in stripes, one per *lane*: a host thread with two slots
  (up to :data:`LANES_UP` lanes an upload, :data:`LANES_DOWN` a download);
* up, each lane copies slice ``i + 1`` of its stripe into one slot while the
  copy engine moves slice ``i`` out of the other; down, the copy engine
  fills one slot while the lane empties the other.

Lanes, not one thread pool per slice: forking and joining threads for every
slice costs more than the slice's copy, leaving it well short of both the
bare host copy and the DMA.

Each GPU has two streams shared by every thread (:func:`streams`): uploads,
kernels and every allocation go on ``work``; downloads go on ``down``, so
the download of one step overlaps the upload and sort of the next, and a
freed buffer is only ever reused in ``work``'s order.

:class:`GpuMemory` is the budget: a dedicated CuPy memory pool whose limit
is the budget (an allocation past it raises rather than taking more), a
reservation counter so that concurrent steps on one worker together stay
within it, and the pool's measured high-water mark.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
import weakref
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

import cupy
import cupyx
from cupy.cuda import runtime

from gpusort.memory.hostpool import ALIGN, HostCache, HostPool

#: Pinned staging bytes per GPU and process, unless ``dask.config`` ``gpusort.pinned-bytes`` says otherwise.
PINNED_BYTES = 128 * 2**20
#: Pinned bytes per GPU and process that hold out-of-core runs and, where
#: they leave room, merged chunks (:func:`run_pool`), unless ``dask.config``
#: ``gpusort.run-pool-bytes`` says otherwise: none by default, since pinning
#: is slow the first time and the memory is the host's.
RUN_POOL_BYTES = 0
#: Seconds a run pool keeps its block with nothing leased from it.
RUN_POOL_IDLE_SECONDS = 30.0
#: Seconds the host cache (:func:`host_cache`) keeps unused buffers while no sort uses it.
HOST_CACHE_IDLE_SECONDS = 10.0
#: Bytes per slot.  An upload and a download at once moved more per second
#: through 4 MiB slots than through 8 MiB ones, the lanes at work then
#: holding half the pinned pages (benchmarks/NOTES.md); below 2 MiB a slot's
#: fixed cost (a memmove and a DMA launch, by address) was most of a slot's time.
SLOT_BYTES = 4 * 2**20
#: Lanes (host threads, each with two slots) an upload and a download take
#: at most: together one per core, since a step's upload overlaps another's
#: download, and the download's more, since its target may be new memory
#: (a first sort's, or past the host cache) whose first touch costs as much
#: as the copy.
LANES_UP = max(1, (os.cpu_count() or 2) * 3 // 8)
LANES_DOWN = max(1, (os.cpu_count() or 2) - LANES_UP)
#: Lanes a copy takes that runs alone (a step that uploads, sorts and
#: downloads, with no other copy to overlap): one per core, as free lanes allow.
LANES_ALONE = max(1, os.cpu_count() or 2)
_ONE_LANE = 4 * 2**20  # copies below this take one lane

_MEMORY_TYPE_HOST = 1  # cudaMemoryTypeHost; pageable memory reads 0 (unregistered)

_lanes = ThreadPoolExecutor(64, thread_name_prefix="gpusort-staging")  # threads idle unless lent a lane
_lock = threading.Lock()
_slots: dict[int, "PinnedSlots"] = {}
_pools: dict[int, HostPool] = {}
_caches: dict[int, HostCache] = {}  # by its size setting; one at a time
_streams: dict[int, "Streams"] = {}


def pinned_bytes_setting() -> int:
    """Pinned staging bytes per GPU: ``dask.config`` ``gpusort.pinned-bytes`` (an int or ``"256MiB"``)."""
    nbytes = _size_setting("gpusort.pinned-bytes", PINNED_BYTES)
    if nbytes < 2 * 2**20:
        raise ValueError(f"dask config gpusort.pinned-bytes={nbytes} is below the 2 MiB the copies need")
    return nbytes


def run_pool_bytes_setting() -> int:
    """Pinned bytes per GPU for out-of-core results: ``dask.config`` ``gpusort.run-pool-bytes`` (default 0: none)."""
    return _size_setting("gpusort.run-pool-bytes", RUN_POOL_BYTES)


def host_cache_bytes_setting() -> int:
    """Most bytes of freed runs and chunks kept for later sorts: ``dask.config`` ``gpusort.host-cache-bytes``.

    The default, ``"auto"``, is a quarter of the host's memory shared by the
    GPUs this process sees; 0 keeps nothing.
    """
    import dask

    if dask.config.get("gpusort.host-cache-bytes", "auto") == "auto":
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return memory // 4 // max(1, runtime.getDeviceCount())
    return _size_setting("gpusort.host-cache-bytes", 0)


def _size_setting(key: str, default: int) -> int:
    import dask
    from dask.utils import parse_bytes

    value = dask.config.get(key, default)
    try:
        return int(parse_bytes(value) if isinstance(value, str) else value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"dask config {key}={value!r} is not a size; write e.g. '256MiB'") from exc


class PinnedSlots:
    """A fixed set of pinned host buffers of one GPU, lent to copies as *lanes* of two slots.

    Allocated once, in one block.  A copy takes up to its share of
    free lanes (at least one; it waits while none is free), so the pinned
    memory a process holds is ``nbytes`` however many copies run.  Each slot
    carries the event of the last copy-engine use of it: whoever uses it
    next waits for that event first.
    """

    def __init__(self, nbytes: int, slot_bytes: int = SLOT_BYTES):
        self.slot_bytes = min(slot_bytes, nbytes // 2)
        count = nbytes // self.slot_bytes // 2 * 2
        self.nbytes = count * self.slot_bytes
        self.memory = cupyx.empty_pinned((self.nbytes,), np.uint8)
        self.pointers = [self.memory.ctypes.data + i * self.slot_bytes for i in range(count)]
        self.events = [cupy.cuda.Event(disable_timing=True) for _ in range(count)]
        for event in self.events:
            event.record()
        self._free = [(i, i + 1) for i in range(0, count, 2)]
        self._ready = threading.Condition()

    @contextlib.contextmanager
    def take(self, most: int) -> Iterator[list[tuple[int, int]]]:
        """Up to ``most`` lanes (pairs of slot indices), lent until the block ends."""
        with self._ready:
            while not self._free:
                self._ready.wait()
            taken, self._free = self._free[:most], self._free[most:]
        try:
            yield taken
        finally:
            with self._ready:
                self._free.extend(taken)
                self._ready.notify_all()


@dataclass(frozen=True)
class Streams:
    """One GPU's two streams for host chunks: ``work`` (uploads, kernels, allocations) and ``down``."""

    work: cupy.cuda.Stream
    down: cupy.cuda.Stream


def streams() -> Streams:
    """The current GPU's :class:`Streams`, shared by every thread of the process."""
    device = cupy.cuda.Device().id
    with _lock:
        if device not in _streams:
            _streams[device] = Streams(cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True))
        return _streams[device]


def slots() -> PinnedSlots:
    """The current GPU's :class:`PinnedSlots`, allocated on first use."""
    device = cupy.cuda.Device().id
    with _lock:
        if device not in _slots:
            _slots[device] = PinnedSlots(pinned_bytes_setting())
        return _slots[device]


def run_pool() -> HostPool | None:
    """The current GPU's pool of pinned memory for out-of-core results, or ``None`` where ``gpusort.run-pool-bytes`` is 0.

    Runs taken from it go down and come back up by DMA, with no host copy
    and no first touch of new pages; merged output chunks taken from it
    (where the runs leave room) go down by DMA.  It takes its block at the
    first run and drops it after :data:`RUN_POOL_IDLE_SECONDS` with nothing
    in it.
    """
    nbytes = run_pool_bytes_setting()
    if nbytes <= 0:
        return None
    device = cupy.cuda.Device().id
    with _lock:
        pool = _pools.get(device)
        if pool is None or pool.nbytes != nbytes:
            pool = _pools[device] = HostPool(nbytes, registered_block, RUN_POOL_IDLE_SECONDS)
        return pool


def host_cache() -> HostCache | None:
    """The process's cache of freed runs and output chunks, or ``None`` where ``gpusort.host-cache-bytes`` is 0."""
    nbytes = host_cache_bytes_setting()
    if nbytes <= 0:
        return None
    with _lock:
        if nbytes not in _caches:
            _caches.clear()
            _caches[nbytes] = HostCache(nbytes, HOST_CACHE_IDLE_SECONDS)
        return _caches[nbytes]


def host_empty(n: int, dtype: Any) -> np.ndarray:
    """A new host array for a run or an output chunk, from :func:`host_cache` where there is one.

    A run or chunk is written once, by a download from the GPU, and the
    pages of a buffer an earlier sort freed take that copy at about twice
    the speed of new pages (which the kernel zeroes at their first touch).
    """
    cache = host_cache()
    return np.empty(n, dtype) if cache is None else cache.empty(n, dtype)


def registered_block(nbytes: int) -> np.ndarray:
    """``nbytes`` of ordinary host memory, touched by a lane per core, then page-locked in one registration.

    ``cudaHostAlloc`` zeroes and pins a block page by page on one thread,
    the slowest way to pin: a run pool's first sort waited for it.  Here
    the lanes first-touch their stripes at once and ``cudaHostRegister``
    then pins pages that are already there; the registration ends as the
    array is freed.
    """
    block = np.empty(nbytes, np.uint8)
    if nbytes == 0:
        return block
    at = block.ctypes.data
    edges = [nbytes * i // LANES_ALONE for i in range(LANES_ALONE + 1)]
    # ctypes calls let go of the interpreter lock: the lanes touch their pages in parallel.
    list(_lanes.map(lambda ab: ctypes.memset(at + ab[0], 0, ab[1] - ab[0]), zip(edges[:-1], edges[1:])))
    runtime.hostRegister(at, nbytes, 0)
    weakref.finalize(block, runtime.hostUnregister, at).atexit = False
    return block


def pinned_bytes() -> int:
    """Pinned memory this process holds now, over all GPUs (bytes): staging slots and run pools."""
    with _lock:
        return sum(s.nbytes for s in _slots.values()) + sum(p.held_bytes() for p in _pools.values())


def is_pinned(x: np.ndarray) -> bool:
    """Whether the host array ``x`` lives in memory CUDA has page-locked."""
    if x.nbytes == 0:
        return True
    try:
        attrs = runtime.pointerGetAttributes(x.ctypes.data)
    except runtime.CUDARuntimeError:
        return False
    return attrs.type == _MEMORY_TYPE_HOST


def to_device(host: np.ndarray | Sequence[np.ndarray], out: cupy.ndarray, lanes: int | None = None) -> None:
    """Copy contiguous ``host`` (an array, or parts laid end to end) into ``out`` on ``streams().work``; async.

    ``out`` has the bytes of all parts.  Pinned sources go in one DMA each;
    pageable ones through the pinned slots, in stripes, one per lane (up
    to ``lanes``, default :data:`LANES_UP`), each lane packing as many parts
    into a slot as it holds: a merge's hundreds of small slices cost a DMA
    per slot, not a lane and a DMA per slice.  Kernels enqueued on ``work``
    afterwards see the data.
    """
    parts = [_bytes(p) for p in ([host] if isinstance(host, np.ndarray) else host) if p.nbytes]
    dst, s = out.view(np.uint8).reshape(-1), streams().work
    if sum(p.size for p in parts) != dst.size:
        raise ValueError(f"to_device: {sum(p.size for p in parts)} bytes of parts into {dst.size} bytes")
    if all(is_pinned(p) for p in parts):  # by address, as the lanes copy
        at = dst.data.ptr
        for p in parts:
            runtime.memcpyAsync(at, p.ctypes.data, p.size, runtime.memcpyHostToDevice, s.ptr)
            at += p.size
        return
    ranges = [(p.ctypes.data, p.size) for p in parts]
    _striped(_up_lane, ranges, dst.data.ptr, dst.size, s, LANES_UP if lanes is None else lanes)


def to_host(dev: cupy.ndarray, out: np.ndarray, lanes: int | None = None) -> None:
    """Copy ``dev`` (made on ``streams().work``) into contiguous host ``out``; done when this returns.

    The copy runs on ``down`` once ``work`` has made ``dev``: pinned targets
    in one DMA, pageable ones through the pinned slots, one stripe per lane
    (up to ``lanes``, default :data:`LANES_DOWN`).
    """
    src, dst = dev.view(np.uint8).reshape(-1), _bytes(out)
    s = streams()
    made = cupy.cuda.Event(disable_timing=True)
    made.record(s.work)
    s.down.wait_event(made)
    if is_pinned(out):
        if dst.size:
            runtime.memcpyAsync(dst.ctypes.data, src.data.ptr, dst.size, runtime.memcpyDeviceToHost, s.down.ptr)
        s.down.synchronize()
    else:  # each lane waits for its own slots
        _striped(_down_lane, src.data.ptr, dst.ctypes.data, dst.size, s.down, LANES_DOWN if lanes is None else lanes)


def _striped(lane_fn, src: Any, dst: int, nbytes: int, s: cupy.cuda.Stream, most: int) -> None:
    """``lane_fn`` over equal stripes of ``nbytes`` from ``src`` to address ``dst``, one per lane lent (up to ``most``).

    ``src`` is an address, or (uploads) a list of host ``(address, size)``
    ranges laid end to end, of which each lane gets the pieces in its
    stripe.  Each lane pipelines its stripe through its two slots on its
    own thread, so a copy pays one fork and join, not one per slot, and the
    host-side copies (and the page faults of a fresh target) run on every
    lane at once.  Lanes copy by address (``memmove``, ``cudaMemcpyAsync``):
    no array is made per slot, and neither call holds the interpreter lock
    while it copies.
    """
    pool, device = slots(), cupy.cuda.Device().id
    most = 1 if nbytes < _ONE_LANE else most
    with pool.take(most) as lanes:
        edges = [nbytes * i // len(lanes) // ALIGN * ALIGN for i in range(len(lanes))] + [nbytes]  # stripes at pages
        jobs = [_lanes.submit(_on_device, device, lane_fn, pool, lane, _stripe(src, a, b), dst + a, b - a, s)
                for lane, a, b in zip(lanes, edges[:-1], edges[1:])]
        futures.wait(jobs)  # every lane done with its slots before they go back
        for job in jobs:
            job.result()


def _stripe(src: Any, a: int, b: int) -> Any:
    """Bytes ``a:b`` of ``src``: an address plus ``a``, or the pieces of a list of ``(address, size)`` ranges."""
    if not isinstance(src, list):
        return src + a
    pieces, at = [], 0
    for address, size in src:
        lo, hi = max(a, at), min(b, at + size)
        if lo < hi:
            pieces.append((address + lo - at, hi - lo))
        at += size
    return pieces


def _on_device(device: int, lane_fn, *args) -> None:
    with cupy.cuda.Device(device):
        lane_fn(*args)


def _up_lane(pool: PinnedSlots, lane: tuple[int, int], pieces: list[tuple[int, int]], dst: int, nbytes: int,
             s: cupy.cuda.Stream) -> None:
    """Host ``pieces`` end to end into device address ``dst``: fill one slot while the copy engine empties the other."""
    i, filled, start = 0, 0, 0  # slots used, bytes in the current one, where it goes in dst
    for address, size in pieces:
        at = 0
        while at < size:
            slot = lane[i % 2]
            if filled == 0:
                pool.events[slot].synchronize()  # the copy engine is done with this slot
            take = min(size - at, pool.slot_bytes - filled)
            ctypes.memmove(pool.pointers[slot] + filled, address + at, take)
            filled, at = filled + take, at + take
            if filled == pool.slot_bytes:
                _send(pool, slot, dst + start, filled, s)
                i, start, filled = i + 1, start + filled, 0
    if filled:
        _send(pool, lane[i % 2], dst + start, filled, s)


def _send(pool: PinnedSlots, slot: int, dst: int, nbytes: int, s: cupy.cuda.Stream) -> None:
    runtime.memcpyAsync(dst, pool.pointers[slot], nbytes, runtime.memcpyHostToDevice, s.ptr)
    pool.events[slot].record(s)


def _down_lane(pool: PinnedSlots, lane: tuple[int, int], src: int, dst: int, nbytes: int,
               s: cupy.cuda.Stream) -> None:
    """``nbytes`` from device address ``src`` to host address ``dst``: the copy engine fills one slot while this thread empties the other."""
    pending: list[tuple[int, int, int]] = []
    for i, a in enumerate(range(0, nbytes, pool.slot_bytes)):
        size = min(nbytes - a, pool.slot_bytes)
        if len(pending) == 2:
            _drain(pool, pending.pop(0), dst)
        slot = lane[i % 2]
        s.wait_event(pool.events[slot])  # an upload may still be reading this slot
        runtime.memcpyAsync(pool.pointers[slot], src + a, size, runtime.memcpyDeviceToHost, s.ptr)
        pool.events[slot].record(s)
        pending.append((slot, a, size))
    for item in pending:
        _drain(pool, item, dst)


def _drain(pool: PinnedSlots, item: tuple[int, int, int], dst: int) -> None:
    slot, a, size = item
    pool.events[slot].synchronize()
    ctypes.memmove(dst + a, pool.pointers[slot], size)


def _bytes(x: np.ndarray) -> np.ndarray:
    if not x.flags.c_contiguous:
        raise ValueError("staging copies contiguous arrays only")
    return x.reshape(-1).view(np.uint8)


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
        self.flushes = 0  # allocations that met the limit and emptied the cache (a device sync each)
        self.retries = 0  # steps that met the limit anyway and ran again alone
        self._lock = threading.Condition()
        self._held: dict[int, int] = {}  # thread -> bytes it has reserved now

    def malloc(self, size: int):
        try:
            mem = self.pool.malloc(size)
        except cupy.cuda.memory.OutOfMemoryError:
            # The limit counts cached free blocks too (of other streams, or
            # split): give those back and try once more.
            self.flushes += 1
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
        self.retries += 1
        return self._run(self.budget, fn, args, alone=True)

    def _run(self, nbytes: int, fn, args, alone: bool = False):
        self.steps += 1
        work = streams().work
        with self.reserve(nbytes), cupy.cuda.using_allocator(self.malloc), work:
            if alone:
                work.synchronize()
                self.pool.free_all_blocks()
            result = fn(*args)
            done = cupy.cuda.Event(disable_timing=True)
            done.record(work)
            done.synchronize()  # this step's work, not the whole stream's backlog of other threads
            return result

    def shrink(self, nbytes: int) -> None:
        """Lower this thread's running reservation to ``nbytes``: the step has freed the rest.

        A sort step holds its input and its scratch buffer while it sorts,
        but only the result while that goes down to the host; shrinking
        lets the next step start its upload meanwhile.
        """
        held = self._held.get(threading.get_ident())
        if held is None or nbytes >= held:
            return
        with self._lock:
            self.reserved -= held - nbytes
            self._held[threading.get_ident()] = nbytes
            self._lock.notify_all()

    @contextlib.contextmanager
    def reserve(self, nbytes: int, timeout: float | None = None) -> Iterator[None]:
        """``nbytes`` of the budget held by this thread inside the block: it waits while other steps hold it.

        With ``timeout``, a ``MemoryError`` once that many seconds passed
        without the bytes coming free (a step that must not wait for ever).
        """
        nbytes = min(int(nbytes), self.budget)
        me = threading.get_ident()
        with self._lock:
            if not self._lock.wait_for(lambda: self.reserved + nbytes <= self.budget, timeout):
                raise MemoryError(f"{nbytes} bytes of the {self.budget}-byte GPU memory budget did not come free "
                                  f"in {timeout:.0f} s: other steps on this worker hold them")
            self.reserved += nbytes
            self._held[me] = nbytes
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= self._held.pop(me)
                self._lock.notify_all()

    def stats(self) -> dict[str, int]:
        return {"budget_bytes": self.budget, "peak_bytes": self.peak_bytes, "peak_used_bytes": self.peak_used_bytes,
                "pool_bytes": self.pool.total_bytes(), "flushes": self.flushes, "retries": self.retries}

    def reset_peak(self) -> None:
        self.steps = self.flushes = self.retries = 0
        self.peak_bytes = self.pool.total_bytes()
        self.peak_used_bytes = self.pool.used_bytes()
