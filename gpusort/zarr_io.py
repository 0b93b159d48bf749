"""Disk to disk: sort a Zarr array into a new Zarr array, its runs in memory or on disk.

Where the keys fit comfortably in the workers' memory (:func:`runs_in_memory`),
the sort is gpusort's own (:func:`gpusort.engine.graph.sort`, runs and merges in
memory, or out of core on the GPU) between reading the source chunks and
writing the output chunks, one computation in which reads, sorts and writes
overlap: every key crosses the disk twice.  Otherwise it is an external sort in
two computations, neither of which holds more than the chunks in flight, on
any scheduler:

1. ``runs-store-``: every chunk becomes a sorted run
   (:func:`gpusort.engine.graph.form_runs`), written as a temporary ``.npy`` file
   of order keys (and one of int64 positions for an argsort); each task also
   returns every ``g``-th key of its run, the splitters' samples.
2. ``windows-``: one task per run reads the few keys around every output
   boundary that the samples leave open (:func:`gpusort.keys.corank.plan_windows`);
   ``splits-`` turns them into exact split vectors
   (:func:`gpusort.keys.corank.split_vectors`); then one ``merge-store-`` task per
   output chunk reads exactly its slice of every run from the store, merges
   them on the backend, decodes the keys and writes the output chunk.

Runs are read through memory maps, so a task reads exactly its slices, at a
few microseconds a slice: every output chunk reads one slice of every run,
and through Zarr each read cost about a millisecond whatever its size
(128 runs x 128 output chunks of 1 GiB: 16,000 reads, most of the sort's
time on the 2-core box).  No task ever holds a whole run unless the run is
its slice.  Between the phases the data lives on disk, so neither host nor
GPU memory bounds its size.

Every output is first written beside its destination and moved into place
only when complete, so a failed or interrupted sort leaves no partial
destination.  The temporary stores are removed on success, on failure and on
an interrupt (Ctrl-C), when the tasks not yet started are cancelled.  A task
already running goes on -- in a worker process, perhaps one that the same
Ctrl-C is killing -- and a write after the removal would bring the store back
(Zarr creates missing directories), so every write holds a shared lock on its
work directory and checks that the directory still exists, and the removal
takes the exclusive lock: it waits for the writes under way, and none starts
after it.  Once the destinations are in place, a later interrupt no longer
fails the sort.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import dask
import dask.array as da
import dask.threaded
import distributed
import numpy as np
import zarr
from dask.base import tokenize
from dask.system import CPU_COUNT

from gpusort.arrays import to_numpy
from gpusort.backends import BackendSpec, on_device
from gpusort.engine import graph
from gpusort.engine.graph import Runs, form_runs
from gpusort.engine.tasks import merge_pieces
from gpusort.front.api import SortOptions, as_dask
from gpusort.keys import corank, order

try:
    import fcntl
except ImportError:  # Windows: no flock; writes then only check that their directory exists
    fcntl = None

PathLike = Union[str, "os.PathLike[str]"]

#: Seconds the removal of a work directory waits for the writes into it to end
#: before it removes it anyway.
WRITE_TIMEOUT = 60.0
#: Where the runs may wait between the phases: ``sort_zarr(runs=...)``.
RUNS = ("auto", "memory", "disk")
#: A sort in memory holds about this many copies of the keys at its peak: source
#: chunks read ahead, the runs, the merged output waiting for its writes.
MEMORY_COPIES = 3
#: Share of the workers' memory those copies may fill before ``runs="auto"``
#: keeps the runs on disk: the rest is the workers' own, and their spill margin.
MEMORY_SHARE = 0.5


def sort_zarr(
    src: PathLike | zarr.Array | da.Array,
    dst: PathLike,
    *,
    chunks: int | None = None,
    descending: bool = False,
    backend: str | None = None,
    argsort_dst: PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    gpu_memory_budget: int | str | None = None,
    temp_dir: PathLike | None = None,
    runs: str = "auto",
) -> None:
    """Sort a 1-D array into a new Zarr array on disk.

    Computes at once, on the active ``distributed`` client if there is one,
    else on Dask's current scheduler.  With the runs on disk (an external
    sort) host memory holds only the chunks in flight, whatever the size of
    ``src``; with the runs in memory, about three copies of the keys.

    Parameters
    ----------
    src : path, zarr.Array or dask.array.Array
        The keys: a 1-D Zarr array (format 3, or 2) given by its local path,
        an open Zarr array, or a 1-D Dask array.  Never modified.  Any
        chunking works; irregular chunks are made regular first.
    dst : path
        Where the sorted keys go: a new Zarr (format 3) array with the dtype of
        ``src`` and chunks of ``chunks`` elements.  It appears only once
        complete.
    chunks : int, optional
        Output chunk length; by default the output keeps the number of
        chunks of ``src``.
    descending : bool
        Largest first.  NaN (and NaT) still come last, as in NumPy.
    backend : {"numpy", "cupy"}, optional
        Where runs are sorted and merged; by default the chunk type of
        ``src`` decides (NumPy chunks: ``"numpy"``).  ``"cupy"`` sorts the
        host chunks on the GPU, a few chunks at a time.
    argsort_dst : path, optional
        Also write the stable int64 positions into ``src`` that sort it
        (``np.argsort(src, kind="stable")``) as a Zarr array here.
    overwrite : bool
        Replace existing destinations; by default they are refused.
    progress : bool
        Show progress bars: ``distributed.progress`` on a distributed client,
        ``dask.diagnostics.ProgressBar`` on the local schedulers.
    gpu_memory_budget : int or str, optional
        With ``backend="cupy"``: the most GPU memory one worker's sort steps
        may hold (bytes, or a size such as ``"2GiB"``); see :func:`gpusort.sort`.
    temp_dir : path, optional
        An existing directory for the sorted runs, a temporary store as large
        as the keys (and positions) uncompressed; by default they go beside
        ``dst``.  The outputs are always staged beside their destinations,
        from where a rename within one file system moves them into place.
        Workers must see it at the same path.  Giving it keeps the runs on
        disk.
    runs : {"auto", "memory", "disk"}
        Where the sorted runs wait between reading ``src`` and writing
        ``dst``.  ``"memory"``: in the workers' memory (the GPU's where it
        holds them), so every key crosses the disk twice, once in and once
        out; the sort then holds about three copies of the keys (and
        positions).  ``"disk"``: in a temporary store (``temp_dir``), four
        crossings, any size.  ``"auto"``: memory where those copies fill at
        most half the workers' memory (:func:`runs_in_memory`), else disk.

    Raises
    ------
    FileNotFoundError
        ``src`` does not exist, or the directory meant to hold ``dst`` or
        ``argsort_dst`` does not, or ``temp_dir`` is no directory.
    FileExistsError
        ``dst`` or ``argsort_dst`` exists and ``overwrite`` is false.
    TypeError, ValueError
        ``src`` is not a 1-D array of a sortable dtype, or the options clash
        (``argsort_dst`` equal to ``dst``, a destination equal to ``src``,
        ``temp_dir`` with ``runs="memory"``).
    KeyboardInterrupt
        Interrupted before the destinations were in place: none of them
        appears, and no temporary store is left behind.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr, gpusort
    >>> with tempfile.TemporaryDirectory() as d:
    ...     src = zarr.create_array(os.path.join(d, "keys.zarr"), shape=(6,), chunks=(2,), dtype="i8")
    ...     src[:] = [5, 3, 1, 4, 2, 0]
    ...     gpusort.sort_zarr(os.path.join(d, "keys.zarr"), os.path.join(d, "sorted.zarr"), chunks=4,
    ...                       argsort_dst=os.path.join(d, "order.zarr"))
    ...     print(zarr.open_array(os.path.join(d, "sorted.zarr"))[:], zarr.open_array(os.path.join(d, "order.zarr"))[:])
    [0 1 2 3 4 5] [5 2 4 1 3 0]
    """
    prepare_sort(src, dst, chunks=chunks, descending=descending, backend=backend, argsort_dst=argsort_dst,
                 overwrite=overwrite, gpu_memory_budget=gpu_memory_budget, temp_dir=temp_dir,
                 runs=runs).run(progress=progress, stacklevel=3)


@dataclasses.dataclass(frozen=True)
class ZarrSort:
    """A :func:`sort_zarr` whose arguments are checked and whose source is open (:func:`prepare_sort`): :meth:`run` sorts.

    What a caller that must fail before it starts a cluster (the command
    line) holds between the checks and the sort: each check runs once, and
    the source is opened once.
    """

    keys: da.Array
    dests: dict[str, Path]
    backend: Any
    chunk: int
    temp_dir: Path | None
    runs: str
    descending: bool

    def run(self, *, progress: bool = False, stacklevel: int = 2) -> None:
        """Sort into the destinations, on the active client or Dask's current scheduler (as :func:`sort_zarr`)."""
        x, dests, backend, chunk, temp = self.keys, self.dests, self.backend, self.chunk, self.temp_dir
        descending, positions = self.descending, "argsort_dst" in dests
        in_memory = runs_in_memory(x.nbytes + (8 * x.shape[0] if positions else 0), self.runs, temp)

        with contextlib.ExitStack() as stack:
            # One work directory beside each destination: the finished array
            # moves into place by a rename within one file system.
            work = {name: stack.enter_context(_work_dir(path.parent, path.name)) for name, path in dests.items()}
            guards = tuple(os.fspath(work[name]) for name in dests)
            staged = {name: work[name] / "out.zarr" for name in dests}
            outputs = [_create(staged["dst"], x.shape[0], x.dtype, chunk)]
            if positions:
                outputs.append(_create(staged["argsort_dst"], x.shape[0], np.int64, chunk))
            if in_memory:
                _sort_into(x, outputs, guards, chunk=chunk, descending=descending, backend=backend, progress=progress)
            else:
                scratch = work["dst"] if temp is None else stack.enter_context(_work_dir(temp, dests["dst"].name))
                ranks = corank.output_ranks(x.shape[0], chunk)
                g = corank.sample_stride(x.shape[0], x.numblocks[0], len(ranks) - 2)
                sorted_runs = form_runs(x, None, descending=descending, backend=backend, positions=positions,
                                        batch=False)  # one run per chunk: a file of the runs' store each
                stored, samples = _store_runs(sorted_runs, scratch, g, progress=progress)
                _merge_runs_into(stored, samples, g, ranks, outputs, guards, key_dtype=x.dtype, descending=descending,
                                 backend=backend, progress=progress)
            cleanup = stack.pop_all()
        # The destinations are complete: moving them into place and removing the
        # work directories finish even if interrupted, and an interrupt from here
        # on no longer turns the finished sort into a failure.
        with _interrupts_deferred(redeliver=False) as arrived, cleanup:
            _move_all_into_place(staged, dests, work)
        if arrived:
            warnings.warn(f"sort_zarr: interrupted after {dests['dst']} was complete and in place; the sort "
                          "succeeded", RuntimeWarning, stacklevel=stacklevel)


def runs_in_memory(nbytes: int, runs: str = "auto", temp_dir: PathLike | None = None) -> bool:
    """Whether :func:`sort_zarr` keeps the runs of ``nbytes`` of keys (and positions) in memory.

    ``runs="auto"`` decides, with the scheduler active now: memory where
    :data:`MEMORY_COPIES` copies fill at most :data:`MEMORY_SHARE` of the
    memory the sort may use -- the sum of the workers' memory limits on a
    distributed client, else the memory available on this machine -- and no
    ``temp_dir`` asks for the disk.

    Examples
    --------
    >>> runs_in_memory(2**20), runs_in_memory(2**20, "disk"), runs_in_memory(2**60)
    (True, False, False)
    """
    if runs != "auto":
        return runs == "memory"
    return temp_dir is None and MEMORY_COPIES * nbytes <= MEMORY_SHARE * _memory_to_use()


def _memory_to_use() -> int:
    """Bytes of host memory a sort may use: the workers' memory limits added up, else what this machine has free."""
    import psutil

    client = _active_client()
    if client is not None:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        limits = [w.get("memory_limit") or 0 for w in workers]
        if limits and all(limits):  # a worker without a limit may take the machine's
            return int(sum(limits))
    return int(psutil.virtual_memory().available)


def _sort_into(x: da.Array, outputs: list[zarr.Array], guards: tuple[str, ...], *, chunk: int,
               descending: bool, backend: BackendSpec, progress: bool) -> None:
    """Runs in memory: gpusort's sort of ``x`` stored chunk by chunk into ``outputs`` (keys, positions)."""
    if not x.shape[0]:
        return
    keys, positions = graph.sort(x, None, descending=descending, backend=backend, chunk=chunk,
                                 positions=len(outputs) > 1)
    sources = [keys] if positions is None else [keys, positions]
    compute(*[da.store(a, _GuardedWrites(z, guards), lock=False, compute=False) for a, z in zip(sources, outputs)],
            progress=progress)


class _GuardedWrites:
    """A Zarr array as ``dask.array.store``'s target: each write holds ``guards``' locks (:func:`_writing_into`)."""

    def __init__(self, z: zarr.Array, guards: tuple[str, ...]):
        self.z, self.guards = z, guards
        self.shape, self.dtype, self.ndim = z.shape, z.dtype, z.ndim

    def __setitem__(self, index: Any, value: Any) -> None:
        value = to_numpy(value)  # Zarr stores host memory
        with _writing_into(*self.guards):
            _write(self.z, index, value)


def _write(z: zarr.Array, index: Any, value: np.ndarray) -> None:
    """``z[index] = value`` on the writing thread (:func:`_on_own_loop`)."""
    _on_own_loop(lambda: z.async_array.setitem(index, value), lambda: z.__setitem__(index, value))


@dataclass(frozen=True)
class _RunStore:
    """Sorted runs on disk: ``keys-K.npy`` (and ``positions-K.npy``) in ``folder`` hold run ``k``.

    ``folder`` is also the work directory that guards the writes (see
    :func:`_writing_into`).  Empty runs have no files.
    """

    folder: str
    lengths: tuple[int, ...]
    key_dtype: np.dtype
    positions: bool
    scheme: order.Scheme

    def path(self, what: str, k: int) -> str:
        return os.path.join(self.folder, f"{what}-{k}.npy")

    def write(self, k: int, okeys: np.ndarray, values: np.ndarray | None) -> None:
        with _writing_into(self.folder):
            np.save(self.path("keys", k), okeys)
            if self.positions:
                np.save(self.path("positions", k), values)

    def keys(self, k: int) -> np.ndarray:
        """Run ``k``'s order keys, memory-mapped (nothing is read until sliced)."""
        if not self.lengths[k]:
            return np.empty(0, self.key_dtype)
        return np.load(self.path("keys", k), mmap_mode="r")

    def read(self, k: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Run ``k``'s elements ``[a, b)``: order keys and positions, in memory."""
        return (self._slice("keys", k, self.key_dtype, a, b),
                self._slice("positions", k, np.int64, a, b) if self.positions else None)

    def _slice(self, what: str, k: int, dtype: np.dtype, a: int, b: int) -> np.ndarray:
        # An empty slice opens no file: skewed data gives merges many of them.
        if a >= b:
            return np.empty(0, dtype)
        return np.array(np.load(self.path(what, k), mmap_mode="r")[a:b])


def _create(path: Path, shape: Any, dtype: Any, chunks: Any) -> zarr.Array:
    shape, chunks = np.atleast_1d(shape).tolist(), np.atleast_1d(chunks).tolist()
    return zarr.create_array(
        store=os.fspath(path), shape=tuple(shape), dtype=dtype,
        chunks=tuple(max(c, 1) for c in chunks),  # Zarr wants chunks >= 1, even for an empty array
    )


@contextlib.contextmanager
def _writing_into(*folders: str) -> Iterator[None]:
    """Hold shared locks on work directories while writing into them; refuse if one is gone.

    :func:`_work_dir` removes a directory under its exclusive lock, so a
    write either ends before the removal starts or finds the directory gone.
    Locks are those of ``flock``, released by the system if the process dies.
    """
    with contextlib.ExitStack() as stack:
        for folder in folders:
            try:
                fd = os.open(folder, os.O_RDONLY)
            except FileNotFoundError:
                fd = None
            if fd is not None:
                stack.callback(os.close, fd)  # closing releases the lock
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_SH)
            if fd is None or not os.path.isdir(folder):  # removed, perhaps while we waited
                raise RuntimeError(f"{folder} was removed: the sort was cancelled or failed")
        yield


def _store_runs(runs: Runs, folder: Path, g: int, *, progress: bool) -> tuple[_RunStore, list[np.ndarray]]:
    """Phase 1: compute the runs and write them to ``folder``; returns the store and every run's samples."""
    store = _RunStore(os.fspath(folder), runs.lengths, np.dtype(runs.okey_dtype), runs.value_dtype is not None,
                      runs.scheme)
    okeys, values = runs.arrays()
    blocks = zip(okeys.to_delayed(), [None] * len(runs.lengths) if values is None else values.to_delayed())
    name = "runs-store-" + tokenize(runs.name, os.fspath(folder), g)
    tasks = [dask.delayed(_write_run)(store, k, kb, vb, g, dask_key_name=(name, k))
             for k, (kb, vb) in enumerate(blocks)]
    return store, list(compute(*tasks, progress=progress))


def _write_run(store: _RunStore, k: int, okeys: Any, values: Any, g: int) -> np.ndarray:
    """Write run ``k`` to the store; returns its samples ``okeys[::g]``."""
    okeys = to_numpy(okeys)  # files hold host memory
    if len(okeys):
        store.write(k, okeys, None if values is None else to_numpy(values))
    return np.ascontiguousarray(okeys[::g])


def _read_windows(store: _RunStore, k: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Run ``k``'s window keys ``[lo[j], hi[j])`` of every boundary ``j``, concatenated."""
    keys = store.keys(k)
    return np.concatenate([keys[a:b] for a, b in zip(lo.tolist(), hi.tolist())] + [np.empty(0, store.key_dtype)])


def _merge_runs_into(store: _RunStore, samples: list[np.ndarray], g: int, ranks: np.ndarray,
                     outputs: list[zarr.Array], guards: tuple[str, ...], *, key_dtype: np.dtype, descending: bool,
                     backend: str | BackendSpec, progress: bool) -> None:
    """Phases 2-3: exact splitters from samples and windows, then one merge-and-write per output chunk."""
    lengths, inner = list(store.lengths), ranks[1:-1]
    token = tokenize(store.folder, g, ranks, key_dtype, descending, backend)
    if len(inner):
        # The plan needs only the samples, already here: no task for it.
        lo, hi = corank.plan_windows(samples, lengths, inner, g)
        windows = [dask.delayed(_read_windows)(store, k, lo[:, k], hi[:, k], dask_key_name=("windows-" + token, k))
                   for k in range(len(lengths))]
        splits = dask.delayed(corank.split_vectors)(lengths, inner, (lo, hi), windows,
                                                    dask_key_name="splits-" + token)
    else:
        splits = corank.split_vectors(lengths, inner)
    merges = [dask.delayed(_merge_chunk)(store, splits, j, int(ranks[j]), outputs, guards, backend,
                                         np.dtype(key_dtype), descending, dask_key_name=("merge-store-" + token, j))
              for j in range(len(ranks) - 1)]
    compute(*merges, progress=progress)


def _merge_chunk(store: _RunStore, splits: np.ndarray, j: int, start: int, outputs: list[zarr.Array],
                 guards: tuple[str, ...], backend: str | BackendSpec, dtype: np.dtype, descending: bool) -> None:
    """Output chunk ``j``: merge its slice of every run, decode, write it at ``start`` of ``outputs``.

    ``guards`` are the work directories that hold the outputs.
    """
    pieces = [store.read(k, int(a), int(b)) for k, (a, b) in enumerate(zip(splits[j], splits[j + 1]))]
    keys, values = merge_pieces(backend, dtype, descending, store.scheme, pieces)
    del pieces  # the merged copy is all this chunk needs from here on
    if not len(keys):
        return
    keys = to_numpy(keys)
    with _writing_into(*guards):
        _write(outputs[0], slice(start, start + len(keys)), keys)
        if len(outputs) > 1:
            _write(outputs[1], slice(start, start + len(keys)), to_numpy(values))


def prepare_sort(src: Any, dst: Any, *, chunks: Any = None, descending: Any = False, backend: str | None = None,
                 argsort_dst: Any = None, overwrite: bool = False, gpu_memory_budget: int | str | None = None,
                 temp_dir: Any = None, runs: str = "auto") -> ZarrSort:
    """:func:`sort_zarr`'s arguments checked, and ``src`` opened, before any work: the sort to :meth:`~ZarrSort.run`."""
    x = as_dask_array(src, "src")
    order.check_key_dtype(x.dtype, "src")
    options = SortOptions.of(descending, chunks, backend, gpu_memory_budget)
    source = Path(src).resolve() if isinstance(src, (str, os.PathLike)) else None
    dests = {"dst": _destination(dst, "dst", overwrite, source)}
    if argsort_dst is not None:
        dests["argsort_dst"] = _destination(argsort_dst, "argsort_dst", overwrite, source)
        if dests["argsort_dst"] == dests["dst"]:
            raise ValueError(f"argsort_dst and dst are the same path ({dst}); give the positions their own path")
    if runs not in RUNS:
        raise ValueError(f"runs={runs!r} is not known; choose one of {', '.join(map(repr, RUNS))}")
    if temp_dir is not None:
        if runs == "memory":
            raise ValueError("temp_dir is where runs wait on disk, and runs='memory' keeps them in memory; "
                             "drop temp_dir, or pass runs='disk' (or 'auto')")
        if not isinstance(temp_dir, (str, os.PathLike)):
            raise TypeError(f"temp_dir must be a path (str or os.PathLike); got {type(temp_dir).__name__}")
        temp_dir = Path(temp_dir).resolve()
        if not temp_dir.is_dir():
            raise FileNotFoundError(
                f"temp_dir: {temp_dir} is not an existing directory; create it first, "
                "or leave temp_dir out to keep the runs beside dst")
    return ZarrSort(x, dests, options.spec(x._meta), options.chunk(x.shape[0], x.numblocks[0]), temp_dir, runs,
                    bool(options.descending))


def as_dask_array(a: Any, argname: str) -> da.Array:
    """``a`` -- a Zarr path, a ``zarr.Array``, a Dask array or array-like -- as a 1-D Dask array.

    NumPy and CuPy arrays and lists are wrapped as :func:`gpusort.sort`
    wraps them.

    Raises ``FileNotFoundError``, ``TypeError`` or ``ValueError`` naming
    ``argname`` where ``a`` is missing, no Zarr array, not 1-D or of unknown
    length.

    Examples
    --------
    >>> import dask.array as da
    >>> as_dask_array(da.arange(4, chunks=2), "src").chunks
    ((2, 2),)
    >>> as_dask_array("/no/such.zarr", "src")
    Traceback (most recent call last):
    FileNotFoundError: src: /no/such.zarr does not exist
    """
    if isinstance(a, (str, os.PathLike)):
        a = _open_zarr(a, argname)
    if isinstance(a, zarr.Array):
        a = da.from_array(_NamedReads(a, argname), chunks=a.chunks, name="from-zarr-" + tokenize(a),
                          meta=np.empty(0, a.dtype))
    if on_device(a) or isinstance(a, (np.ndarray, list, tuple)) or hasattr(a, "__array__"):
        a = as_dask(a, argname)
    if not isinstance(a, da.Array):
        raise TypeError(
            f"{argname} must be the path of a Zarr array, a zarr.Array, a dask array or a NumPy/CuPy "
            f"array; got {type(a).__name__}"
        )
    if a.ndim != 1:
        raise ValueError(
            f"{argname} has shape {a.shape}; gpusort sorts 1-D arrays "
            f"(flatten it first, e.g. da.from_zarr(path).ravel())"
        )
    if any(np.isnan(c) for c in a.chunks[0]):
        raise ValueError(f"{argname} has unknown chunk sizes; call {argname}.compute_chunk_sizes() first")
    return a


def _on_own_loop(coroutine: Callable[[], Coroutine[Any, Any, Any]], fallback: Callable[[], Any]) -> Any:
    """Await ``coroutine()`` on an event loop of this thread's own; ``fallback()`` where one already runs here.

    Zarr's synchronous API runs every caller's reads and writes on one event
    loop thread, which also copies each decoded chunk into its output: a
    worker's tasks then read one after another, whatever its threads
    (benchmarks/NOTES.md, Zarr).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine())
    return fallback()


class _NamedReads:
    """A 1-D Zarr array read on the reading thread (:func:`_on_own_loop`), whose read errors name the chunk.

    Zarr's own errors (a chunk that does not decompress, a missing file on a
    remote store) say what failed but not where; a sort of thousands of
    chunks needs the where.
    """

    def __init__(self, z: zarr.Array, argname: str):
        self.z, self.argname = z, argname
        self.shape, self.dtype, self.ndim = z.shape, z.dtype, z.ndim

    def __getitem__(self, index: Any) -> np.ndarray:
        try:
            return _on_own_loop(lambda: self.z.async_array.getitem(index), lambda: self.z[index])
        except Exception as exc:
            (piece,) = index if isinstance(index, tuple) else (index,)
            start, stop, _ = piece.indices(self.shape[0])
            raise RuntimeError(
                f"{self.argname}: chunk {start // self.z.chunks[0]} ([{start}:{stop}]) of "
                f"{self.z.store_path} could not be read: {exc}"
            ) from exc


def compute(*collections: Any, progress: bool = False) -> tuple:
    """``dask.compute`` of Dask collections, returning or raising only once none of its tasks runs.

    Schedulers report the first failure while other tasks still run; here the
    call also waits for those, so that a caller may remove what they write.
    An interrupt (Ctrl-C) cancels the tasks not yet started: a distributed
    worker cannot stop a task it runs, so writers must guard their writes
    (:func:`_writing_into`).  Computes on the active distributed client if there is
    one, else on Dask's current scheduler, with progress bars on stderr if
    asked: ``dask.diagnostics.ProgressBar`` sees only the local schedulers, so
    on a distributed client the progress bar follows the futures instead.

    Examples
    --------
    >>> import dask.array as da
    >>> compute(da.arange(4, chunks=2).sum())
    (np.int64(6),)
    """
    client = _active_client()
    if client is not None:
        persisted = client.persist(list(collections))
        futures = distributed.futures_of(persisted)
        try:
            if progress:
                # Bars go to stderr, as the local ones do: stdout is for results.
                with contextlib.redirect_stdout(sys.stderr):
                    distributed.progress(futures)
            distributed.wait(futures)  # every task finished or failed
        except BaseException:  # an interrupt: wait() returns on failures
            with _interrupts_deferred():
                client.cancel(futures, force=True)
            raise
        return dask.compute(*persisted)
    from dask.diagnostics import ProgressBar

    scheduler = dask.base.get_scheduler()  # None: each collection's default, threads for ours
    # Our own thread pool: shutting it down waits for the tasks still running
    # after a failure or an interrupt, and drops those not yet started.
    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or CPU_COUNT) \
        if scheduler in (None, dask.threaded.get) else None
    try:
        with ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
            return dask.compute(*collections, **({"pool": pool} if pool else {}))
    finally:
        if pool is not None:
            with _interrupts_deferred():
                pool.shutdown(wait=True, cancel_futures=True)


def _active_client() -> distributed.Client | None:
    """The ``distributed`` client Dask computes on now, if it does."""
    client = getattr(dask.base.get_scheduler(), "__self__", None)
    return client if isinstance(client, distributed.Client) else None


@contextlib.contextmanager
def _interrupts_deferred(redeliver: bool = True) -> Iterator[list[int]]:
    """Hold SIGINT (Ctrl-C) off until the block ends; yields the list of those that arrived.

    For steps that must not be cut short: the removal of temporary stores and
    the moves into place.  With ``redeliver`` a held interrupt is raised when
    the block ends (the handler that was there before runs); without, the
    caller decides.  Only the main thread receives signals, so elsewhere this
    holds nothing.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield arrived
    finally:
        signal.signal(signal.SIGINT, previous)
        if arrived and redeliver and callable(previous):
            previous(signal.SIGINT, None)


def _open_zarr(path: PathLike, argname: str) -> zarr.Array:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{argname}: {path} does not exist")
    try:
        return zarr.open_array(store=os.fspath(path), mode="r")
    except Exception as exc:  # zarr's error types change between releases
        try:
            members = sorted(zarr.open_group(store=os.fspath(path), mode="r").array_keys())
        except Exception:
            raise ValueError(f"{argname}: {path} is not a Zarr array ({exc})") from exc
        example = f", e.g. {os.path.join(path, members[0])}" if members else ""
        raise ValueError(
            f"{argname}: {path} is a Zarr group, not an array; pass the path of one of its arrays{example}"
        ) from exc


def _destination(path: Any, argname: str, overwrite: bool, source: Path | None) -> Path:
    """``path`` resolved, checked to be a new destination that is not the ``source`` path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{argname} must be a path (str or os.PathLike); got {type(path).__name__}")
    path = Path(path).resolve()
    if path == source:
        raise ValueError(f"{argname} is src ({path}); gpusort never modifies its source: choose a new path")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{argname}: directory {path.parent} does not exist; create it first")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{argname}: {path} exists; pass overwrite=True (gpusort sort --overwrite) to replace it")
    return path


@contextlib.contextmanager
def _work_dir(folder: Path, name: str) -> Iterator[Path]:
    """A new hidden directory ``.NAME.XXXX.gpusort-tmp`` in ``folder``, removed on exit, error or not.

    The removal is not cut short by an interrupt: a half-removed store is as
    much a leftover as a whole one.
    """
    path = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".gpusort-tmp", dir=folder))
    try:
        yield path
    finally:
        with _interrupts_deferred(), _no_writes_into(path):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _no_writes_into(folder: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``folder``: wait for the writes under way (see :func:`_writing_into`)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        deadline = time.monotonic() + WRITE_TIMEOUT
        while fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    warnings.warn(f"{folder}: writes still under way after {WRITE_TIMEOUT} s; "
                                  "removing it anyway", RuntimeWarning)
                    break
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


def _move_all_into_place(staged: dict[str, Path], dests: dict[str, Path], work: dict[str, Path]) -> None:
    """Move every staged array into place, or none: a failure puts back what had moved.

    With ``argsort_dst`` there are two renames; a sorted ``dst`` left behind
    without its positions (or beside an old one) would be a partial result.
    """
    moved = []
    try:
        for name, path in dests.items():
            _move_into_place(staged[name], path, work[name])
            moved.append(name)
    except BaseException:
        for name in reversed(moved):
            os.replace(dests[name], staged[name])  # back into the work directory, removed with it
            if os.path.lexists(work[name] / "replaced"):
                os.replace(work[name] / "replaced", dests[name])
        raise


def _move_into_place(staged: Path, path: Path, work: Path) -> None:
    """Rename ``staged`` to ``path``; an old ``path`` goes into ``work`` (removed later)."""
    if os.path.lexists(path):
        os.replace(path, work / "replaced")
    os.replace(staged, path)
