"""The CuPy backend: runs sorted and merged on the GPU by gpusort's own kernels.

It sees only order keys (:mod:`gpusort.keys.order`), so it always sorts
ascending.  Two paths:

* **CuPy chunks** stay on the GPU: runs are sorted and merged where they
  live (dask-cuda's ``device_memory_limit`` spills them to host if needed).
* **NumPy chunks** are the out-of-core path: host memory holds the runs and
  the GPU only ever holds a few steps' data, within a *GPU memory budget*
  per worker (:mod:`gpusort.memory.plan` sizes the steps: sub-runs for a chunk
  whose sort does not fit, ranges of output ranks for a merge that does
  not).  Every step allocates from one CuPy pool per device whose limit is
  the budget, and records its high-water mark (:func:`memory_stats`).  Data
  crosses the host link through a few pinned slots per GPU
  (:mod:`gpusort.memory.staging`): runs and merged chunks are ordinary NumPy arrays.

Without a budget the out-of-core path takes :data:`DEFAULT_FRACTION` of the
device's free memory when it first runs in a process.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from typing import Any, Callable, Iterator, Literal, Sequence

import cupy
import numpy as np

import gpusort.gpu as gpu
from gpusort.arrays import concatenate, every, in_order
from gpusort.backends import MOVABLE_VALUE_BYTES, SORTED_SAMPLE, Pair
from gpusort.cuda import build, dispatch, launch, tuning
from gpusort.keys import order
from gpusort.memory import plan, staging

#: Seconds a collective sort's round waits for its share of the budget before it fails (:meth:`CupyBackend.budgeted`).
RESERVE_SECONDS = 30.0
#: Share of the free GPU memory the out-of-core path uses when no budget is given.
DEFAULT_FRACTION = 0.5

_memories: dict[tuple[int, int], staging.GpuMemory] = {}
_defaults: dict[int, int] = {}
_memories_lock = threading.Lock()


def gpu_memory(budget: int | None = None) -> staging.GpuMemory:
    """The current device's budgeted memory for ``budget`` bytes (or the default).

    One pool per (device, budget): sorts that run at once in one worker with
    different budgets each keep their own limit, rather than resetting a
    shared one under each other's feet; sorts with the same budget share its
    pool, and together stay within it.
    """
    device = cupy.cuda.Device().id
    with _memories_lock:
        if budget is None:
            if device not in _defaults:
                free, _ = cupy.cuda.runtime.memGetInfo()
                _defaults[device] = max(2 * plan.FIXED_BYTES, int(free * DEFAULT_FRACTION))
            budget = _defaults[device]
        memory = _memories.get((device, budget))
        if memory is None:
            memory = _memories[(device, budget)] = staging.GpuMemory(budget)
        return memory


def default_budget() -> int:
    """The GPU memory budget of a sort that gives none, on this process's current GPU, in bytes.

    :data:`DEFAULT_FRACTION` of the memory that was free when it was first asked.
    """
    return gpu_memory(None).budget


def memory_stats(reset: bool = False) -> dict[str, Any]:
    """Measured GPU memory of the out-of-core path in this process (run it on each worker).

    Of the budgeted pools that ran a step since the last ``reset`` (one pool
    per GPU and budget): ``peak_bytes``, the largest high-water mark (what a
    pool held from the GPU), ``peak_used_bytes``, that of its live arrays, and
    ``budget_bytes``, the largest budget -- so ``peak_bytes <= budget_bytes``
    whenever every sort kept within its own budget.  ``pools`` has each of
    those pools' figures, keyed ``(device, budget)``.  ``pinned_bytes`` is
    the pinned host memory the process holds for staging (all GPUs);
    ``flushes`` and ``retries`` sum, over the pools, the allocations that met
    a pool's limit and emptied its cache, and the steps that met it anyway
    and ran again alone.  Empty if no step ran.
    """
    pools = {}
    for key, memory in sorted(_memories.items()):
        if memory.steps:
            pools[key] = memory.stats()
        if reset:
            memory.reset_peak()
    if not pools:
        return {}
    keys = ("budget_bytes", "peak_bytes", "peak_used_bytes")
    return ({k: max(p[k] for p in pools.values()) for k in keys}
            | {k: sum(p[k] for p in pools.values()) for k in ("flushes", "retries")}
            | {"pinned_bytes": staging.pinned_bytes(), "pools": pools})


_threads = threading.local()
_next_device = itertools.count()


def thread_device() -> int:
    """The GPU this thread's out-of-core steps run on: the process's GPUs, round robin over threads.

    A dask-cuda worker sees one GPU, so every step runs there.  A process that
    sees several (a threaded scheduler, or one worker with many threads)
    spreads its host-chunk tasks over all of them, with no data moving
    between processes: the chunks stay in this process's host memory.
    """
    device = getattr(_threads, "device", None)
    if device is None:
        device = _threads.device = next(_next_device) % cupy.cuda.runtime.getDeviceCount()
    return device


def _to_device(x: Any) -> Any:
    """``x`` on the GPU (``None`` stays ``None``); the CuPy-chunk path's staging."""
    return x if x is None or isinstance(x, cupy.ndarray) else cupy.asarray(x)


class CupyBackend:
    """:class:`gpusort.backends.Backend` on one GPU, through :mod:`gpusort.gpu`.

    ``gpu_memory_budget`` (bytes, per worker process and device) bounds the
    out-of-core path; ``None``: :data:`DEFAULT_FRACTION` of the free memory.
    Beyond the interface, what the rest of gpusort needs from a GPU goes
    through here too: :meth:`sort_host_rows` (N-D sorts of host chunks),
    :meth:`beyond` (top-k's selection) and :meth:`scan` (verification).
    """

    name = "cupy"

    def __init__(self, gpu_memory_budget: int | None = None):
        self.gpu_memory_budget = gpu_memory_budget

    def with_budget(self, gpu_memory_budget: int | None) -> "CupyBackend":
        """This backend with another GPU memory budget."""
        return _backend(gpu_memory_budget)

    def sort_run(self, keys: Any, values: Any = None, *, overwrite: bool = False) -> Pair:
        if isinstance(keys, list):  # keys-only parts, sorted as their concatenation
            if _readable_here(keys):  # where they lie
                return dispatch.mergesort([cupy.ascontiguousarray(p) for p in keys])[0], None
            keys, overwrite = (concatenate(keys), True) if len(keys) > 1 else (keys[0], overwrite)
        if keys.ndim == 2 or values is not None and values.ndim == 2:
            return _sort_wide(keys, values)
        if isinstance(keys, np.ndarray):
            with cupy.cuda.Device(thread_device()):
                return _host_sort(keys, values, gpu_memory(self.gpu_memory_budget))
        k, v = _to_device(keys), _to_device(values)
        if overwrite:
            return _sort_owned(k, v)
        return (gpu.sort(k), None) if v is None else gpu.sort_pairs(k, v)

    def sort_parts(self, keys: Sequence[np.ndarray], values: Sequence[np.ndarray] | tuple[int, int] | None,
                   encode: Callable[[Any], Any], decode: Callable[[Any], Any], temporaries: int = 2) -> Pair | None:
        """Host ``keys`` parts (and ``values`` parts) as one sorted run in host memory, in one GPU step.

        The parts go up into one buffer, are encoded (``encode``: keys to
        order keys), sorted, decoded (``decode``) and come down once: every
        key crosses the link once each way and the host never passes over
        them.  ``values`` may be ``(offset, n)``: positions ``offset …
        offset + n - 1``, made on the GPU (argsort).  ``temporaries``: how
        many arrays the size of the keys ``encode`` or ``decode`` makes at
        once (:func:`gpusort.keys.order.encode_temporaries`).  ``None`` where the step
        does not fit the budget, or the parts are not 1-D arrays in native
        byte order with values the kernels move: the caller sorts another way.
        """
        positions = isinstance(values, tuple)
        parts = list(keys) + ([] if values is None or positions else list(values))
        if not all(p.ndim == 1 and p.dtype.isnative for p in parts):
            return None
        if values is not None and not positions and values[0].dtype.itemsize not in MOVABLE_VALUE_BYTES:
            return None
        n = sum(len(k) for k in keys)
        vb = 8 if positions else 0 if values is None else values[0].dtype.itemsize
        with cupy.cuda.Device(thread_device()):
            memory = gpu_memory(self.gpu_memory_budget)
            nbytes = plan.whole_bytes(n, keys[0].dtype.itemsize, vb, temporaries)
            if n == 0 or nbytes > _plan_bytes(memory):
                return None
            return memory.run(nbytes, _whole_step, memory, keys, values, encode, decode)

    def is_sorted(self, keys: Any) -> bool:
        if isinstance(keys, (list, tuple)):  # parts end to end: their ends decide first
            parts = [cupy.ascontiguousarray(p) for p in keys if len(p)]
            if not parts:
                return True
            if any(p.device.id != parts[0].device.id for p in parts):
                return self.is_sorted(concatenate(parts))
            return self.is_sorted(_ends(parts)) and all(self.is_sorted(p) for p in parts)
        if isinstance(keys, np.ndarray):
            from gpusort.backends.numpy import BACKEND as host

            return host.is_sorted(keys)
        step = max(1, len(keys) // SORTED_SAMPLE)
        sample = every(keys, step)
        if not all(in_order(a, b) for a, b in zip(sample[:-1].tolist(), sample[1:].tolist())):
            return False
        return step == 1 or launch.scan(keys, 0, len(keys), False)[1] is None

    def run_limit(self, keys: Any, values: Any = None) -> int:
        if not isinstance(keys, np.ndarray):  # a GPU that cannot hold a sort says so: MemoryError
            return 2**63
        # Host chunks: a run that one step sorts within the budget, uploaded,
        # sorted and downloaded once, with no merge of sub-runs of its own.
        with cupy.cuda.Device(thread_device()):
            memory = gpu_memory(self.gpu_memory_budget)
        kb, vb = keys.dtype.itemsize, 0 if values is None else values.dtype.itemsize
        return plan.largest_fit(lambda n: plan.sort_bytes(n, kb, vb), _plan_bytes(memory)) * (kb + vb)

    def merge_runs(self, runs: Sequence[Pair], *, scratch: Pair | None = None) -> Pair:
        if not runs:
            raise ValueError("runs is empty: pass at least one (possibly empty) run")
        on_host = isinstance(runs[0][0], np.ndarray)
        keys_only = runs[0][1] is None
        if any((values is None) != keys_only for _, values in runs):
            raise TypeError("runs mix keys-only runs and (keys, values) runs: pass one kind")
        if runs[0][0].ndim == 2 or not keys_only and runs[0][1].ndim == 2:
            return _sort_wide(concatenate([k for k, _ in runs]), None if keys_only else concatenate([v for _, v in runs]))
        if on_host:
            with cupy.cuda.Device(thread_device()):
                return _host_merge(runs, gpu_memory(self.gpu_memory_budget))
        staged = [(_to_device(k), _to_device(v)) for k, v in runs]
        if keys_only:
            out = (gpu.merge_runs([k for k, _ in staged], scratch=scratch), None)
        else:
            out = gpu.merge_runs(staged, scratch=scratch)
        return out

    def searchsorted(
        self, sorted_keys: Any, needles: Any, side: Literal["left", "right"] = "left"
    ) -> Any:
        # Host arrays are searched where they are: a transfer would cost more
        # than the binary searches.  NumPy and CuPy both treat NaN as largest.
        if isinstance(sorted_keys, np.ndarray):
            return np.searchsorted(sorted_keys, cupy.asnumpy(needles), side=side)
        return cupy.searchsorted(sorted_keys, _to_device(needles), side=side)

    def sort_rows(self, okeys: Any) -> Any:
        return gpu.sort(_to_device(okeys), axis=-1)

    def sort_host_rows(self, blocks: Sequence[np.ndarray], sort: Callable[[Any, tuple], Any]) -> np.ndarray | None:
        """``sort(self, gpu_blocks)`` of aligned host ``blocks``, each row (last axis) on its own, within the budget.

        ``None`` for CuPy blocks (sorted where they are) and for keys CuPy
        lacks (datetime64, timedelta64, bytes, str, structured), which sort
        on the host.

        The rows go up, are sorted and come down in batches of whole rows,
        each a step of the budget's pool (:meth:`gpusort.memory.staging.GpuMemory.run`)
        as large as :func:`gpusort.memory.plan.whole_bytes` says fits, one row at
        least: the keys, int64 positions or indices beside them, and
        :data:`ROW_TEMPORARIES` arrays of the keys' size.  ``sort`` returns
        an array of the rows' shape (keys or positions).
        """
        if not isinstance(blocks[0], np.ndarray) or any(b.dtype.kind in "mMSUV" for b in blocks):
            return None
        rows = [b.reshape(-1, b.shape[-1]) for b in blocks]
        n, length = rows[0].shape
        key_bytes = sum(b.dtype.itemsize for b in blocks)

        def cost(nrows: int) -> int:
            return plan.whole_bytes(nrows * length, key_bytes, 8, ROW_TEMPORARIES)

        with cupy.cuda.Device(thread_device()):
            memory = gpu_memory(self.gpu_memory_budget)
            per = max(1, plan.largest_fit(cost, _plan_bytes(memory)))
            out = [memory.run(cost(min(per, n - a)), _rows_step, self, sort, [r[a:a + per] for r in rows])
                   for a in range(0, n, per) or [0]]  # no rows: one empty step, for the result's dtype
        return np.concatenate(out).reshape(blocks[0].shape)

    def lexsort_rows(self, columns: Sequence[Any]) -> Any:
        return gpu.lexsort([_to_device(c) for c in columns], axis=-1)

    def default_budget(self) -> int:
        """:func:`default_budget`, this worker's default GPU memory budget."""
        return default_budget()

    def upload(self, parts: Sequence[np.ndarray]) -> cupy.ndarray:
        # Made on this thread's stream, written on the shared work stream (through the pinned
        # slots): the copy waits for what this stream did with the memory before, and this
        # stream waits for the copy -- the GPUs, not the host.
        current, work = cupy.cuda.get_current_stream(), staging.streams().work
        parts = [np.ascontiguousarray(p) for p in parts]
        out = cupy.empty(sum(len(p) for p in parts), parts[0].dtype)
        work.wait_event(current.record())
        staging.to_device(parts, out)
        current.wait_event(work.record())
        return out

    @contextlib.contextmanager
    def budgeted(self, nbytes: int) -> Iterator[None]:
        """``nbytes`` reserved in the current GPU's budgeted pool (:func:`gpu_memory`), whose limit is the budget."""
        memory = gpu_memory(self.gpu_memory_budget)
        with memory.reserve(nbytes, timeout=RESERVE_SECONDS), cupy.cuda.using_allocator(memory.malloc):
            yield

    def download(self, pair: Pair, out: Pair | None = None) -> Pair:
        # The copies wait for the work stream: make it wait for this thread's, where the pair was made.
        staging.streams().work.wait_event(cupy.cuda.get_current_stream().record())
        into = []
        for dev, host in zip(pair, out or (None, None)):
            if dev is not None:
                host = staging.host_empty(dev.size, dev.dtype).reshape(dev.shape) if host is None else host
                staging.to_host(dev, host)
            into.append(host)
        return into[0], into[1]

    def beyond(self, blocks: Sequence[Any], pivot: Any, complement: bool, room: int) -> tuple[int, Any]:
        """:func:`encoded_beyond` of ``blocks``, host blocks uploaded first."""
        return encoded_beyond([_to_device(b) for b in blocks], pivot, complement, room)

    def scan(self, block: Any, descending: bool | None) -> tuple[int, int | None]:
        """Verification's pass over one chunk (:func:`gpusort.verification.verify`), on a GPU.

        The checksum of its exact bits and its first out-of-order position
        (``None``; no order check where ``descending`` is ``None``), by
        gpusort's verification kernel: a CuPy chunk on its own GPU, a NumPy
        chunk on this thread's GPU, uploaded in pieces of :data:`SCAN_PIECE`
        elements, each with the next piece's first element, so that the
        order check sees every adjacent pair once.
        """
        ordered = lambda m: 0 if descending is None else m  # noqa: E731 - elements whose order is checked
        if not isinstance(block, np.ndarray):
            return launch.scan(block, len(block), ordered(len(block)), bool(descending))
        block = np.ascontiguousarray(block)
        n, total, bad = len(block), 0, None
        with cupy.cuda.Device(thread_device()), staging.streams().work as work:
            piece = cupy.empty(min(n, SCAN_PIECE) + 1, block.dtype)
            for a in range(0, n, SCAN_PIECE):
                b = min(n, a + SCAN_PIECE)
                m = min(n, b + 1) - a
                staging.to_device(block[a:a + m], piece[:m])
                checksum, local = launch.scan(piece[:m], b - a, 0 if bad is not None else ordered(m),
                                              bool(descending))
                total += checksum
                if local is not None:
                    bad = a + local
            work.synchronize()
        return total % 2**64, bad


#: Arrays the size of the keys that sorting rows makes beside them: the order keys, and the sorted
#: keys decoded or gathered (:meth:`CupyBackend.sort_host_rows`).
ROW_TEMPORARIES = 2
#: Elements of a NumPy chunk :meth:`CupyBackend.scan` checks on the GPU at once (256 MiB of int64).
SCAN_PIECE = 2**25

BACKEND = CupyBackend()


def _sort_wide(keys: Any, values: Any) -> Pair:
    """Composite keys past 64 bits, or values that are records: sorted by position, gathered once.

    Host arrays take the NumPy backend's sort: the budgeted GPU steps of
    the out-of-core path move 1-D keys and values only.
    """
    if isinstance(keys, np.ndarray):
        from gpusort.backends.numpy import BACKEND as host

        return host.sort_run(keys, values)
    keys = _to_device(keys)
    if keys.ndim == 2:  # the words, least significant first, as lexsort takes them
        perm = gpu.lexsort(keys.T[::-1])
    else:
        perm = gpu.argsort(keys)
    return keys[perm], None if values is None else _to_device(values)[perm]


@functools.cache
def _backend(gpu_memory_budget: int | None) -> CupyBackend:
    return BACKEND if gpu_memory_budget is None else CupyBackend(gpu_memory_budget)


# --- the out-of-core path: host chunks, GPU steps within the budget ------------------------



def _host_sort(keys: np.ndarray, values: np.ndarray | None, memory: staging.GpuMemory) -> Pair:
    keys = np.ascontiguousarray(keys)
    if len(keys) == 0:
        return keys.copy(), None if values is None else values.copy()
    steps = _Steps(memory)
    if values is None:
        return plan.sort_within(keys, None, _plan_bytes(memory), steps)
    values = np.ascontiguousarray(values)
    if values.dtype.itemsize not in MOVABLE_VALUE_BYTES:  # sort positions, gather on the host
        k, positions = plan.sort_within(keys, np.arange(len(keys), dtype=np.int64), _plan_bytes(memory), steps)
        return k, values[positions]
    k, v = plan.sort_within(keys, _bits(values), _plan_bytes(memory), steps)
    return k, v.view(values.dtype)


def _host_merge(runs: Sequence[Pair], memory: staging.GpuMemory) -> Pair:
    keys = [np.ascontiguousarray(k) for k, _ in runs]
    if runs[0][1] is None:
        if sum(map(len, keys)) == 0:
            return np.concatenate(keys, dtype=keys[0].dtype), None
        return plan.merge_within([(k, None) for k in keys], _plan_bytes(memory), _Steps(memory))
    values = [np.ascontiguousarray(v) for _, v in runs]
    dtype = values[0].dtype
    if sum(map(len, keys)) == 0:
        return np.concatenate(keys, dtype=keys[0].dtype), np.concatenate(values, dtype=dtype)
    if dtype.itemsize not in MOVABLE_VALUE_BYTES:  # merge global positions, gather on the host
        starts = np.cumsum([0] + [len(k) for k in keys]).tolist()
        pieces = [(k, np.arange(a, a + len(k), dtype=np.int64)) for k, a in zip(keys, starts)]
        k, positions = plan.merge_within(pieces, _plan_bytes(memory), _Steps(memory))
        return k, np.concatenate(values, dtype=dtype)[positions]
    k, v = plan.merge_within([(k, _bits(v)) for k, v in zip(keys, values)], _plan_bytes(memory), _Steps(memory))
    return k, v.view(dtype)


def _plan_bytes(memory: staging.GpuMemory) -> int:
    return int(memory.budget * plan.PLAN_FRACTION)


def _bits(values: np.ndarray) -> np.ndarray:
    """Values as unsigned integers of their width: the kernels only move them."""
    return values.view(np.dtype(f"u{values.dtype.itemsize}"))


class _Steps:
    """:class:`gpusort.memory.plan.Device` on this GPU: each step within ``memory``'s budget.

    Results -- runs, and the merges' output chunks -- come from the run
    pool while it has room (:func:`gpusort.memory.staging.run_pool`) and go down
    by DMA; the rest land in ordinary (pageable) host memory from the host
    cache (:func:`gpusort.memory.staging.host_empty`), through
    :mod:`gpusort.memory.staging`'s few pinned slots.
    """

    def __init__(self, memory: staging.GpuMemory):
        self.memory = memory
        self.pool = staging.run_pool()

    def empty(self, n: int, dtype: Any) -> np.ndarray:
        out = None if self.pool is None else self.pool.empty(n, dtype)
        return staging.host_empty(n, dtype) if out is None else out

    def sort(self, keys: np.ndarray, values: np.ndarray | None, out: Pair) -> None:
        vb = 0 if values is None else values.dtype.itemsize
        self.memory.run(plan.sort_bytes(len(keys), keys.dtype.itemsize, vb), _sort_step, self.memory, keys, values, out)

    def merge(self, pieces: Sequence[Pair], out: Pair) -> None:
        keys, values = pieces[0]
        vb = 0 if values is None else values.dtype.itemsize
        n = sum(len(k) for k, _ in pieces)
        self.memory.run(plan.merge_bytes(n, keys.dtype.itemsize, vb), _merge_step, self.memory, pieces, out)


def _sort_step(memory: staging.GpuMemory, keys: np.ndarray, values: np.ndarray | None, out: Pair) -> None:
    lanes = staging.LANES_ALONE if _all_pinned(out) else None  # a run that goes down by DMA: every lane up
    staged = _staged([keys], lanes), None if values is None else _staged([values], lanes)
    result = dispatch.mergesort(*staged, overwrite_input=True)  # two copies of the data on the GPU, not three
    del staged
    _download(memory, result, out)


def _whole_step(memory: staging.GpuMemory, keys: Sequence[np.ndarray],
                values: Sequence[np.ndarray] | tuple[int, int] | None, encode, decode) -> Pair:
    alone = staging.LANES_ALONE  # nothing else copies while this step runs: every lane
    okeys = encode(_staged(keys, alone))  # the upload's buffer is freed as the order keys replace it
    if isinstance(values, tuple):
        offset, n = values
        v = cupy.arange(offset, offset + n, dtype=np.int64)
    else:
        v = None if values is None else _staged([_bits(p) for p in values], alone)
    okeys, v = _sort_owned(okeys, v)
    result = decode(okeys), v
    del okeys
    dtype = values[0].dtype if values is not None and not isinstance(values, tuple) else np.dtype(np.int64)
    out = tuple(None if x is None else staging.host_empty(x.size, x.dtype).reshape(x.shape) for x in result)
    _download(memory, result, out, alone)
    return out[0], None if out[1] is None else out[1].view(dtype)


def _rows_step(backend: CupyBackend, sort: Callable[[Any, tuple], Any], rows: Sequence[np.ndarray]) -> np.ndarray:
    return cupy.asnumpy(sort(backend, tuple(_to_device(r) for r in rows)))


def _sort_owned(keys: cupy.ndarray, values: cupy.ndarray | None) -> Pair:
    """GPU ``keys`` (and ``values``) sorted, where the sort may use their buffers.

    Where the kernels can, the input is one of the sort's two buffers: two
    copies of the data on the GPU, not three.
    """
    if _kernels_sort(keys.dtype) and (values is None or values.dtype.itemsize in MOVABLE_VALUE_BYTES):
        out_k, out_v = dispatch.mergesort(keys, None if values is None else _bits(values), overwrite_input=True)
        return out_k, None if values is None else out_v.view(values.dtype)
    return (gpu.sort(keys), None) if values is None else gpu.sort_pairs(keys, values)


def _ends(parts: Sequence[Any]) -> np.ndarray:
    """The first and last key of every part (contiguous 1-D CuPy order keys of one dtype on one GPU), on the host.

    Gathered in one launch by the module the parts' sort loads (its keys'
    own, or their exact words'): a copy call a key would cost the host
    ~10 us each, and several times that in a worker that talks UCX.
    """
    dtype = parts[0].dtype
    sizes = np.array([p.size for p in parts], np.int64)
    counts = np.minimum(sizes, 2)
    with cupy.cuda.Device(parts[0].device.id):
        k = build.kernels(dtype if _kernels_sort(dtype) else np.dtype(f"u{dtype.itemsize}"), 0, False)
        out = cupy.empty(int(counts.sum()), dtype)
        return launch.gather_rows(k, parts, 0, np.maximum(sizes - 1, 1), counts, out).get()


def _readable_here(parts: Sequence[Any]) -> bool:
    """Whether the kernels sort ``parts`` where they lie: 1-D arrays of one dtype they take, on this thread's GPU."""
    here = cupy.cuda.Device().id
    return bool(parts) and _kernels_sort(parts[0].dtype) and all(
        isinstance(p, cupy.ndarray) and p.ndim == 1 and p.dtype == parts[0].dtype and p.device.id == here
        for p in parts)


def _kernels_sort(dtype: np.dtype) -> bool:
    """Whether :func:`gpusort.cuda.dispatch.mergesort` sorts keys of ``dtype`` as they are (not floats it sorts by exact keys)."""
    return dtype in tuning.KEY_TYPES and dtype not in tuning.EXACT_FLOATS


def _merge_step(memory: staging.GpuMemory, pieces: Sequence[Pair], out: Pair) -> None:
    starts = np.cumsum([0] + [len(k) for k, _ in pieces]).tolist()
    keys = _staged([k for k, _ in pieces])
    values = None if pieces[0][1] is None else _staged([v for _, v in pieces])
    runs = [(keys[a:b], None if values is None else values[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    result = dispatch.merge_tree(runs, scratch=(keys, values))  # level 2 on writes over the staged slices
    del keys, values, runs
    # Slices that came up by DMA (runs in the run pool): every lane down.
    _download(memory, result, out, staging.LANES_ALONE if all(_all_pinned(piece) for piece in pieces) else None)


def _all_pinned(arrays: Pair) -> bool:
    """Whether every host array of ``arrays`` is pinned: its copies are DMA alone, with no lane."""
    return all(staging.is_pinned(x) for x in arrays if x is not None)


def _download(memory: staging.GpuMemory, result: Pair, out: Pair, lanes: int | None = None) -> None:
    """``result`` into host ``out``, with the step's reservation lowered to what ``result`` holds.

    The scratch buffer is free by now, so the next step may start its
    upload while this one's result goes down.
    """
    memory.shrink(sum(x.nbytes for x in result if x is not None) + plan.FIXED_BYTES)
    for dev, host in zip(result, out):
        if dev is not None:
            staging.to_host(dev, host, lanes)


def _staged(parts: Sequence[np.ndarray], lanes: int | None = None) -> cupy.ndarray:
    """The host ``parts`` concatenated in one new GPU array (one copy each, through pinned memory)."""
    out = cupy.empty(sum(len(p) for p in parts), parts[0].dtype)
    staging.to_device(parts, out, lanes)
    return out


def encoded_beyond(blocks: Sequence[cupy.ndarray], pivot: Any, complement: bool,
                   room: int) -> tuple[int, cupy.ndarray | None]:
    """How many of ``blocks``' order keys lie beyond ``pivot``, and those order keys in no order if at most ``room``, else ``None``.

    ``blocks``: 1-D arrays of one dtype.  Order keys of scheme ``"exact"``,
    ascending (:func:`gpusort.keys.order.encode`); "beyond" is above, or below
    with ``complement`` (their complements above ``pivot``'s).  Keys that
    are order keys already (integers) pass through.  The count and
    compaction :mod:`gpusort.engine.select` needs, in one pass over each block that
    encodes in registers and needs no scan, as boolean indexing would; the
    blocks share one buffer and one counter, so the count is read once.
    """
    dtype = blocks[0].dtype
    if dtype.kind not in "iubf":
        raise TypeError(f"keys of dtype {dtype}: encoded_beyond takes bool, integer or float keys")
    if dtype.kind == "f":
        b = order.FloatBits(dtype)
        u, sign, nans = b.uint, b.sign, b.nans
    else:
        u = np.dtype(np.uint8) if dtype.kind == "b" else dtype
        sign = nans = u.type(0)
    out = cupy.empty(min(room, sum(x.size for x in blocks)), u)
    slot = cupy.zeros(1, np.uint64)
    pivot = cupy.asarray(pivot, u).reshape(1)  # read on the device: no sync for its value
    kernel = build.beyond_kernel(cupy.cuda.Device().id, u)
    for keys in blocks:
        if keys.size:
            # 8 blocks of 256 threads fill an SM; each loops over tiles until the keys run out.
            grid = min(-(-keys.size // (tuning.BEYOND_VT * tuning.BEYOND_NT)), 8 * build.sm_count(keys.device.id))
            kernel((grid,), (tuning.BEYOND_NT,), (cupy.ascontiguousarray(keys).view(u), np.int64(keys.size), pivot,
                                                 np.bool_(dtype.kind == "f"), u.type(sign), u.type(nans),
                                                 np.bool_(complement), np.uint64(room), out, slot))
    count = int(slot.get()[0])
    return count, (out[:count].copy() if count <= room else None)
