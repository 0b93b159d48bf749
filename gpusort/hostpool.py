"""Host arrays carved from one block of memory and given back when the last view of each is gone.

The out-of-core path's runs are gpusort's own intermediates: they come down
from the GPU once and go back up once, in slices, for the merges.  In
ordinary memory each such copy goes through a pinned slot and a host copy,
and the download's target pages are new (first-touched) every time.  Runs
carved from one block of pinned memory, registered once per process and
reused by later sorts, move by DMA alone.  :class:`HostPool` is the
allocator, free of CUDA: :func:`gpusort.staging.run_pool` gives it its
pinned block.

An array from :meth:`HostPool.empty` is an ordinary NumPy array whose
``base`` is a lease of its bytes; every view of it holds the lease too, and
the bytes go back to the pool when the last of them is gone.  A pool that
has nothing leased for ``idle_seconds`` drops its block (``release``), and
takes a new one at the next request.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator

import numpy as np

#: Leases start at multiples of this many bytes: every dtype's alignment, and
#: a DMA's preferred one.
ALIGN = 4096


class _Lease:
    """``nbytes`` of the block from ``start``, exposed to NumPy as an array interface."""

    def __init__(self, block: np.ndarray, start: int, shape: tuple[int, ...], dtype: np.dtype):
        self.block = block  # the block lives while any view of the lease does
        self.__array_interface__ = {"data": (block.ctypes.data + start, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}


class HostPool:
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
        self.nbytes = int(nbytes)
        self.idle_seconds = idle_seconds
        self._allocate = allocate
        self._block: np.ndarray | None = None
        self._free: list[tuple[int, int]] = []  # (start, size), sorted by start, coalesced
        self._leased = 0
        # Leases come back from finalizers, which may run inside a garbage
        # collection on a thread that holds the lock: they only append here,
        # and whoever holds the lock takes them in.
        self._returned: collections.deque[tuple[int, int]] = collections.deque()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def empty(self, n: int, dtype: Any) -> np.ndarray | None:
        """A new array of ``n`` elements of ``dtype`` from the block, or ``None`` where no free range holds it."""
        if n < 0:
            raise ValueError(f"n={n}: an array's length is 0 or more")
        dtype = np.dtype(dtype)
        size = -(-max(1, n * dtype.itemsize) // ALIGN) * ALIGN
        with self._locked():
            if size > self.nbytes:
                return None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
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
            lease = _Lease(self._block, start, (n,), dtype)
        weakref.finalize(lease, self._give_back, (start, size)).atexit = False
        return np.asarray(lease)

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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, with returned leases taken back as it is taken and as it is let go."""
        with self._lock:
            self._take_back()
            yield
            self._take_back()
        self._settle()

    def _give_back(self, span: tuple[int, int]) -> None:
        self._returned.append(span)
        self._settle()

    def _settle(self) -> None:
        """Take back what finalizers returned while nobody holds the lock; a holder does it as it lets go."""
        while self._returned and self._lock.acquire(blocking=False):
            try:
                self._take_back()
            finally:
                self._lock.release()

    def _take_back(self) -> None:
        """Returned leases back into the free ranges; the idle timer started once none is left (lock held)."""
        if not self._returned:
            return
        spans = list(self._free)
        while self._returned:
            start, size = self._returned.popleft()
            self._leased -= size
            spans.append((start, size))
        spans.sort()
        merged = [spans[0]]
        for s, z in spans[1:]:
            last_start, last_size = merged[-1]
            if last_start + last_size == s:
                merged[-1] = (last_start, last_size + z)
            else:
                merged.append((s, z))
        self._free = merged
        if not self._leased and self._block is not None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.idle_seconds, self.release)
            self._timer.daemon = True
            self._timer.start()
