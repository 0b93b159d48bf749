"""Disk to disk: sort a Zarr array into a new Zarr array, runs kept on disk.

An external sort in two computations.  Phase 1 sorts every chunk into a run
(:func:`gpusort.graph.form_runs`) and writes the runs -- order keys and, for
an argsort, int64 positions -- to a temporary Zarr store.  Phases 2-3 read the
runs back as Dask arrays (:meth:`gpusort.graph.Runs.from_arrays`), find the
exact splitters and merge each output chunk
(:func:`gpusort.graph.merge_sorted_runs`), writing every output chunk as
exactly one Zarr chunk.  No task holds more than a few chunks, and between the
phases the data lives on disk, so neither host nor GPU memory bounds its size.

Every output is first written beside its destination and moved into place
only when complete, so a failed or interrupted sort leaves no partial
destination; the temporary store is removed on success and on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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

from gpusort import order
from gpusort.api import output_chunk, resolve_backend
from gpusort.backends import BackendSpec, backend_spec, is_cupy, to_numpy
from gpusort.budget import parse_budget
from gpusort.graph import Runs, form_runs, merge_sorted_runs

PathLike = Union[str, "os.PathLike[str]"]


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
) -> None:
    """Sort a 1-D array into a new Zarr array on disk (an external sort).

    Computes at once, on the active ``distributed`` client if there is one,
    else on Dask's current scheduler.

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

    Raises
    ------
    FileNotFoundError
        ``src`` does not exist, or the directory meant to hold ``dst`` or
        ``argsort_dst`` does not.
    FileExistsError
        ``dst`` or ``argsort_dst`` exists and ``overwrite`` is false.
    TypeError, ValueError
        ``src`` is not a 1-D array of a sortable dtype, or the options clash
        (``argsort_dst`` equal to ``dst``, a destination equal to ``src``).

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr, gpusort
    >>> d = tempfile.mkdtemp()
    >>> src = zarr.create_array(os.path.join(d, "keys.zarr"), shape=(6,), chunks=(2,), dtype="i8")
    >>> src[:] = [5, 3, 1, 4, 2, 0]
    >>> gpusort.sort_zarr(os.path.join(d, "keys.zarr"), os.path.join(d, "sorted.zarr"), chunks=4,
    ...                   argsort_dst=os.path.join(d, "order.zarr"))
    >>> zarr.open_array(os.path.join(d, "sorted.zarr"))[:]
    array([0, 1, 2, 3, 4, 5])
    >>> zarr.open_array(os.path.join(d, "order.zarr"))[:]
    array([5, 2, 4, 1, 3, 0])
    """
    x, dests, backend, chunk = _prepare(src, dst, chunks=chunks, descending=descending, backend=backend,
                                        argsort_dst=argsort_dst, overwrite=overwrite,
                                        gpu_memory_budget=gpu_memory_budget)
    run_length = max(x.chunks[0])
    if any(c != run_length for c in x.chunks[0][:-1]):
        # The runs go to a Zarr array, whose chunks are regular: one run per Zarr chunk.
        x = x.rechunk(run_length)

    with contextlib.ExitStack() as stack:
        # One work directory beside each destination: the finished array
        # moves into place by a rename within one file system.
        work = {name: stack.enter_context(_work_dir(path)) for name, path in dests.items()}
        runs = form_runs(x, None, descending=bool(descending), backend=backend, batch=False,
                         positions="argsort_dst" in dests)
        on_disk = _store(runs.arrays(), [work["dst"] / "runs-keys.zarr", work["dst"] / "runs-positions.zarr"],
                         (run_length,), compressed=False, progress=progress)
        keys, positions = merge_sorted_runs(
            Runs.from_arrays(*(da.from_zarr(z) for z in on_disk), scheme=runs.scheme),
            key_dtype=x.dtype, descending=bool(descending), chunk=chunk, backend=backend, batch=False,
        )
        staged = {name: work[name] / "out.zarr" for name in dests}
        _store((keys, positions), [staged["dst"], staged.get("argsort_dst")], (chunk,),
               compressed=True, progress=progress)
        _move_all_into_place(staged, dests, work)


def _prepare(src: Any, dst: Any, *, chunks: Any, descending: Any, backend: str | None,
             argsort_dst: Any, overwrite: bool, gpu_memory_budget: int | str | None = None,
             ) -> tuple[da.Array, dict[str, Path], str | BackendSpec, int]:
    """Check :func:`sort_zarr`'s arguments before any work: (keys, destinations, backend, chunk)."""
    x = as_dask_array(src, "src")
    order.check_key_dtype(x.dtype, "src")
    if not isinstance(descending, (bool, np.bool_)):
        raise TypeError(f"descending must be True or False; got {descending!r}")
    source = Path(src).resolve() if isinstance(src, (str, os.PathLike)) else None
    dests = {"dst": _destination(dst, "dst", overwrite, source)}
    if argsort_dst is not None:
        dests["argsort_dst"] = _destination(argsort_dst, "argsort_dst", overwrite, source)
        if dests["argsort_dst"] == dests["dst"]:
            raise ValueError(f"argsort_dst and dst are the same path ({dst}); give the positions their own path")
    backend = backend_spec(resolve_backend(backend, x._meta), parse_budget(gpu_memory_budget))
    return x, dests, backend, output_chunk(chunks, x.shape[0], x.numblocks[0])


def as_dask_array(a: Any, argname: str) -> da.Array:
    """``a`` -- a Zarr path, a ``zarr.Array`` or a Dask array -- as a 1-D Dask array.

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
    if not isinstance(a, da.Array):
        raise TypeError(
            f"{argname} must be the path of a Zarr array, a zarr.Array or a dask array; "
            f"got {type(a).__name__}"
        )
    if a.ndim != 1:
        raise ValueError(
            f"{argname} has shape {a.shape}; gpusort sorts 1-D arrays "
            f"(flatten it first, e.g. da.from_zarr(path).ravel())"
        )
    if any(np.isnan(c) for c in a.chunks[0]):
        raise ValueError(f"{argname} has unknown chunk sizes; call {argname}.compute_chunk_sizes() first")
    return a


class _NamedReads:
    """A 1-D Zarr array whose read errors name the chunk and the array.

    Zarr's own errors (a chunk that does not decompress, a missing file on a
    remote store) say what failed but not where; a sort of thousands of
    chunks needs the where.
    """

    def __init__(self, z: zarr.Array, argname: str):
        self.z, self.argname = z, argname
        self.shape, self.dtype, self.ndim = z.shape, z.dtype, z.ndim

    def __getitem__(self, index: Any) -> np.ndarray:
        try:
            return self.z[index]
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
    Computes on the active distributed client if there is one, else on Dask's
    current scheduler, with progress bars on stderr if asked:
    ``dask.diagnostics.ProgressBar`` sees only the local schedulers, so on a
    distributed client the progress bar follows the futures instead.

    Examples
    --------
    >>> import dask.array as da
    >>> compute(da.arange(4, chunks=2).sum())
    (np.int64(6),)
    """
    scheduler = dask.base.get_scheduler()  # None: each collection's default, threads for ours
    client = getattr(scheduler, "__self__", None)
    if isinstance(client, distributed.Client):
        persisted = client.persist(list(collections))
        futures = distributed.futures_of(persisted)
        if progress:
            # Bars go to stderr, as the local ones do: stdout is for results.
            with contextlib.redirect_stdout(sys.stderr):
                distributed.progress(futures)
        distributed.wait(futures)  # every task finished or failed
        return dask.compute(*persisted)
    from dask.diagnostics import ProgressBar

    # Leaving our own thread pool waits for the tasks still running after a failure.
    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or CPU_COUNT) \
        if scheduler in (None, dask.threaded.get) else None
    with pool or contextlib.nullcontext(), ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
        return dask.compute(*collections, **({"pool": pool} if pool else {}))


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
def _work_dir(beside: Path) -> Iterator[Path]:
    """A hidden temporary directory next to ``beside``, removed on exit, error or not."""
    path = Path(tempfile.mkdtemp(prefix=f".{beside.name}.", suffix=".gpusort-tmp", dir=beside.parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _store(arrays: tuple[da.Array | None, ...], paths: list[Path | None], chunks: tuple[int], *,
           compressed: bool, progress: bool) -> list[zarr.Array]:
    """Write Dask arrays to new Zarr arrays (``None`` arrays skipped), one Dask chunk per Zarr chunk."""
    sources, targets = [], []
    for arr, path in zip(arrays, paths):
        if arr is None:
            continue
        if is_cupy(arr._meta):  # Zarr writes host memory
            arr = arr.map_blocks(to_numpy, meta=np.empty(0, arr.dtype))
        targets.append(zarr.create_array(
            store=os.fspath(path), shape=arr.shape, dtype=arr.dtype,
            chunks=(max(chunks[0], 1),),  # Zarr wants chunks >= 1, even for an empty array
            # Runs are written once and read once: compressing them costs more than it saves.
            compressors="auto" if compressed else None,
        ))
        sources.append(arr)
    compute(*(da.store(s, t, lock=False, compute=False) for s, t in zip(sources, targets)), progress=progress)
    return targets


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
