"""Host arrays carved from one block of memory and given back when the last view of each is gone.

The out-of-core path's runs are gpusort's own intermediates: they come down
from the GPU once and go back up once, in slices, for the merges.  In
ordinary memory each such copy goes through a pinned slot and a host copy,
and the download's target pages are new (first-touched) every time.  Runs
carved from one block of pinned memory, registered once per process and
reused by later sorts, move by DMA alone; so do merged output chunks
carved from it where the runs leave room, which saves the host copy of the
output's download too.  :class:`HostPool` is the allocator, free of CUDA:
:func:`gpusort.memory.staging.run_pool` gives it its pinned block.

An array from :meth:`HostPool.empty` is an ordinary NumPy array whose
``base`` is a lease of its bytes; every view of it holds the lease too, and
the bytes go back to the pool when the last of them is gone.  A pool that
has nothing leased for ``idle_seconds`` drops its block (``release``), and
takes a new one at the next request.

:class:`HostCache` is the other allocator here, for ordinary memory: each
array it makes has a buffer of its own, and a buffer whose last view is
gone waits, its pages still touched, for a later array of about its size.
The kernel hands out new pages zeroed at their first touch, and a copy into
them costs about twice one into pages already there: a sort's runs and
output chunks are copied into, and one sort's freed ones are the next's.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator

import numpy as np

#: Host arrays start at multiples of this many bytes -- leases here, arrays in
#: spill files, stripes of pinned copies: every dtype's alignment, a page, and
#: a DMA's preferred one.
ALIGN = 4096


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of :data:`ALIGN`.

    >>> aligned(1), aligned(4096), aligned(4097)
    (4096, 4096, 8192)
    """
    return -(-nbytes // ALIGN) * ALIGN


class _Lease:
    """``nbytes`` of the block from ``start``, exposed to NumPy as an array interface."""

    def __init__(self, block: np.ndarray, start: int, shape: tuple[int, ...], dtype: np.dtype):
        self.block = block  # the block lives while any view of the lease does
        self.__array_interface__ = {"data": (block.ctypes.data + start, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}


class _Owner:
    """What leases come back to: a lock, a queue of returned leases, an idle timer.

    Leases come back from finalizers, which may run inside a garbage
    collection on a thread that holds the lock: they only append to the
    queue, and whoever holds the lock takes them in (:meth:`_take_in`).
    """

    def __init__(self, idle_seconds: float):
        self.idle_seconds = idle_seconds
        self._returned: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def _lease(self, buffer: np.ndarray, start: int, n: int, dtype: np.dtype, back: Any) -> np.ndarray:
        """``n`` of ``dtype`` at byte ``start`` of ``buffer``; ``back`` comes back to :meth:`_take_in` with the last view."""
        lease = _Lease(buffer, start, (n,), dtype)
        weakref.finalize(lease, self._give_back, back).atexit = False
        return np.asarray(lease)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, with returned leases taken in as it is taken and as it is let go."""
        with self._lock:
            self._take_back()
            yield
            self._take_back()
        self._settle()

    def _give_back(self, back: Any) -> None:
        self._returned.append(back)
        self._settle()

    def _settle(self) -> None:
        """Take in what finalizers returned while nobody holds the lock; a holder does it as it lets go."""
        while self._returned and self._lock.acquire(blocking=False):
            try:
                self._take_back()
            finally:
                self._lock.release()

    def _take_back(self) -> None:
        items = []
        while self._returned:
            items.append(self._returned.popleft())
        if items:
            self._take_in(items)

    def _take_in(self, items: list[Any]) -> None:
        """Returned leases back into the owner (lock held)."""
        raise NotImplementedError

    def _idle(self, then: Callable[[], Any]) -> None:
        """``then()`` in :attr:`idle_seconds`, unless :meth:`_busy` or this is called first (lock held)."""
        self._busy()
        self._timer = threading.Timer(self.idle_seconds, then)
        self._timer.daemon = True
        self._timer.start()

    def _busy(self) -> None:
        """Stop the idle timer (lock held)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class HostPool(_Owner):
    """A first-fit allocator of host arrays over one block from ``allocate(nbytes)``.

    Parameters
    ----------
    nbytes : int
        The block's size: the most the pool holds.
    allocate : callable
        ``allocate(nbytes)`` -> a 1-D uint8 NumPy array, called when the
        first array is asked for, and again after the block was dropped.
    idle_seconds : float
        How long the block stays while nothing is leased.

    Examples
    --------
    >>> pool = HostPool(2**20, lambda n: np.empty(n, np.uint8))
    >>> a = pool.empty(1000, np.int64)
    >>> a[:] = 7
    >>> pool.leased_bytes(), pool.empty(2**20, np.uint8) is None
    (8192, True)
    >>> del a
    >>> pool.leased_bytes()
    0
    """

    def __init__(self, nbytes: int, allocate: Callable[[int], np.ndarray], idle_seconds: float = 30.0):
        super().__init__(idle_seconds)
        self.nbytes = int(nbytes)
        self._allocate = allocate
        self._block: np.ndarray | None = None
        self._free: list[tuple[int, int]] = []  # (start, size), sorted by start, coalesced
        self._leased = 0

    def empty(self, n: int, dtype: Any) -> np.ndarray | None:
        """A new array of ``n`` elements of ``dtype`` from the block, or ``None`` where no free range holds it."""
        if n < 0:
            raise ValueError(f"n={n}: an array's length is 0 or more")
        dtype = np.dtype(dtype)
        size = aligned(max(1, n * dtype.itemsize))
        with self._locked():
            if size > self.nbytes:
                return None
            self._busy()
            if self._block is None:
                self._block = self._allocate(self.nbytes)
                self._free = [(0, self.nbytes)]
            for i, (start, free) in enumerate(self._free):
                if free >= size:
                    self._free[i:i + 1] = [(start + size, free - size)] if free > size else []
                    break
            else:
                return None
            self._leased += size
            return self._lease(self._block, start, n, dtype, (start, size))

    def leased_bytes(self) -> int:
        """Bytes of the block that arrays (or their views) still hold."""
        with self._locked():
            return self._leased

    def held_bytes(self) -> int:
        """Bytes of host memory the pool holds now: its block, or nothing once dropped."""
        with self._locked():
            return 0 if self._block is None else self.nbytes

    def release(self) -> bool:
        """Drop the block if nothing is leased; whether it was dropped."""
        with self._locked():
            if self._leased or self._block is None:
                return False
            self._block, self._free = None, []
        return True

    def _take_in(self, items: list[tuple[int, int]]) -> None:
        """Returned leases back into the free ranges; the idle timer started once none is left (lock held)."""
        self._leased -= sum(size for _, size in items)
        spans = sorted(self._free + items)
        merged = [spans[0]]
        for s, z in spans[1:]:
            last_start, last_size = merged[-1]
            if last_start + last_size == s:
                merged[-1] = (last_start, last_size + z)
            else:
                merged.append((s, z))
        self._free = merged
        if not self._leased and self._block is not None:
            self._idle(self.release)


class HostCache(_Owner):
    """Host arrays whose buffers, once their last view is gone, wait (pages touched) for a later array.

    A buffer serves a later array that needs at least 7/8 of it, so one
    sort's runs and chunks serve the next sort's of their size.  Unused
    buffers are kept up to ``nbytes`` in all, and let go together after
    ``idle_seconds`` with no array made or given back.

    Parameters
    ----------
    nbytes : int
        The most bytes of unused buffers kept; one that would pass it is let go.
    idle_seconds : float
        How long unused buffers are kept while the cache is not used.

    Examples
    --------
    >>> cache = HostCache(2**20, idle_seconds=5.0)
    >>> a = cache.empty(1000, np.int64)
    >>> at = a.ctypes.data
    >>> del a
    >>> cache.kept_bytes()
    8192
    >>> b = cache.empty(1000, np.float64)
    >>> b.ctypes.data == at, cache.kept_bytes()
    (True, 0)
    """

    def __init__(self, nbytes: int, idle_seconds: float = 10.0):
        super().__init__(idle_seconds)
        self.nbytes = int(nbytes)
        self._kept: list[np.ndarray] = []  # unused buffers, smallest first

    def empty(self, n: int, dtype: Any) -> np.ndarray:
        """A new array of ``n`` elements of ``dtype``: a kept buffer's first bytes, or a new buffer's."""
        if n < 0:
            raise ValueError(f"n={n}: an array's length is 0 or more")
        dtype = np.dtype(dtype)
        size = aligned(max(1, n * dtype.itemsize))
        with self._locked():
            at = next((i for i, b in enumerate(self._kept) if size <= b.nbytes <= size + size // 7), None)
            buffer = np.empty(size, np.uint8) if at is None else self._kept.pop(at)
            self._when_unused()
            return self._lease(buffer, 0, n, dtype, buffer)

    def kept_bytes(self) -> int:
        """Bytes of unused buffers kept now."""
        with self._locked():
            return sum(b.nbytes for b in self._kept)

    def release(self) -> None:
        """Let every unused buffer go."""
        with self._locked():
            self._kept = []

    def _take_in(self, items: list[np.ndarray]) -> None:
        """Buffers whose arrays are gone kept while they fit ``nbytes`` (lock held)."""
        room = self.nbytes - sum(b.nbytes for b in self._kept)
        for buffer in items:
            if buffer.nbytes <= room:
                self._kept.append(buffer)
                room -= buffer.nbytes
        self._kept.sort(key=lambda b: b.nbytes)
        self._when_unused()

    def _when_unused(self) -> None:
        """The idle timer restarted while buffers are kept (lock held)."""
        if self._kept:
            self._idle(self.release)
        else:
            self._busy()
