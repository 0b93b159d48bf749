"""Public API: check the arguments, then hand over to :mod:`gpusort.graph`."""

from __future__ import annotations

import math
import numbers
from typing import Any

import dask.array as da
import numpy as np

from gpusort import graph, order
from gpusort.backends import BACKENDS, backend_for, backend_spec, is_cupy
from gpusort.budget import parse_budget


def sort(
    x: Any,
    *,
    axis: int | None = -1,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> da.Array:
    """Globally sorted copy of a Dask array, lazily.

    Parameters
    ----------
    x : dask.array.Array or array-like
        Keys: bool, int8-64, uint8-64, float16/32/64, datetime64 or
        timedelta64.  NumPy and CuPy arrays are wrapped in a Dask array.
    axis : int or None
        ``-1`` or ``0`` for 1-D ``x``; ``None`` sorts the flattened array
        (like ``np.sort(x, axis=None)``), the only choice for N-D ``x``.
    descending : bool
        Largest first.  NaN (and NaT) still come last, as in NumPy.
    chunks : int, optional
        Output chunk length.  By default the output keeps the number of input
        chunks.  All output chunks have this length but the last.
    backend : {"numpy", "cupy"}, optional
        Where runs are sorted and merged.  By default the chunk type decides:
        CuPy chunks sort on the GPU.  ``"cupy"`` with NumPy chunks sorts them
        on the GPU and returns NumPy chunks (the out-of-core path).
    gpu_memory_budget : int or str, optional
        GPU memory, per worker, that sorting host-resident (NumPy) chunks on
        the GPU may hold: bytes, or a string such as ``"2GiB"``.  Chunks and
        merges that do not fit are done in pieces that do, so any data size
        sorts.  By default half the GPU's free memory when the first task
        runs.  Needs ``backend="cupy"``; CuPy chunks already live on the GPU
        and are not counted (dask-cuda's ``device_memory_limit`` spills them).

    Returns
    -------
    dask.array.Array
        The keys in ``np.sort`` order, NaN last; nothing is computed yet.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([3, 1, 2, 5, 4], chunks=2)
    >>> gpusort.sort(x).compute()
    array([1, 2, 3, 4, 5])
    >>> gpusort.sort(x, descending=True, chunks=4).chunks
    ((4, 1),)
    """
    x = _as_keys(x, axis, "x")
    keys, _ = _sort(x, None, descending, chunks, backend, gpu_memory_budget, positions=False)
    return keys


def argsort(
    x: Any,
    *,
    axis: int | None = -1,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> da.Array:
    """Stable int64 positions that sort ``x``, lazily.

    Ties keep input order, in both directions, as
    ``np.argsort(x, kind="stable")``.  With ``axis=None`` the positions index
    the flattened array.  The arguments are those of :func:`sort`.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([2, 1, 2, 1], chunks=2)
    >>> gpusort.argsort(x).compute()
    array([1, 3, 0, 2])
    >>> gpusort.argsort(x, descending=True).compute()
    array([0, 2, 1, 3])
    """
    x = _as_keys(x, axis, "x")
    _, positions = _sort(x, None, descending, chunks, backend, gpu_memory_budget, positions=True,
                         keys_returned=False)
    return positions


def sort_by_key(
    keys: Any,
    values: Any,
    *,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> tuple[da.Array, da.Array]:
    """Sort ``keys`` and carry ``values`` along, stably, lazily.

    ``values`` is a 1-D array of the same length as ``keys``, of any
    fixed-width dtype; chunked differently, it is rechunked to match ``keys``.

    Returns
    -------
    (dask.array.Array, dask.array.Array)
        The sorted keys and the values in the same order; equal keys keep
        their input order.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> k = da.from_array([3, 1, 3, 2], chunks=2)
    >>> v = da.from_array([b"c", b"a", b"d", b"b"], chunks=2)
    >>> sk, sv = gpusort.sort_by_key(k, v)
    >>> sv.compute()
    array([b'a', b'b', b'c', b'd'], dtype='|S1')
    """
    keys = _as_keys(keys, 0, "keys")
    values = as_dask(values, "values")
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D like keys; got {values.ndim}-D (use values.ravel())")
    if values.dtype.hasobject:  # object, or a structured dtype with object fields
        raise TypeError("values has dtype object; gpusort moves fixed-width values only")
    _check_known_chunks(values, "values")
    if values.shape[0] != keys.shape[0]:
        raise ValueError(
            f"values has length {values.shape[0]} but keys has length {keys.shape[0]}; "
            "they must be the same length"
        )
    if values.chunks != keys.chunks and keys.shape[0] == 0:
        # Dask's rechunk keeps the number of empty chunks; nothing to move anyway.
        values = da.from_array(values._meta.reshape(0), chunks=keys.chunks, asarray=False)
    elif values.chunks != keys.chunks:
        values = values.rechunk(keys.chunks)
    return _sort(keys, values, descending, chunks, backend, gpu_memory_budget, positions=False)


def resolve_backend(backend: str | None, meta: Any) -> str:
    """The backend to use: ``backend``, or the one the chunk type ``meta`` picks."""
    if backend is None:
        return backend_for(meta)
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not known; use one of {BACKENDS} or None")
    if backend == "numpy" and is_cupy(meta):
        raise ValueError(
            "backend='numpy' cannot sort CuPy chunks; use backend='cupy' (or None), "
            "or move the chunks to the host with x.map_blocks(cupy.asnumpy)"
        )
    if backend == "cupy":
        _check_gpu()
    return backend


def output_chunk(chunks: Any, n: int, nparts: int) -> int:
    """The output chunk length: ``chunks``, or one that keeps ``nparts`` chunks."""
    if chunks is None:
        return max(1, math.ceil(n / max(nparts, 1)))
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral):
        raise TypeError(f"chunks must be a positive int (the output chunk length); got {chunks!r}")
    if chunks <= 0:
        raise ValueError(f"chunks must be a positive int (the output chunk length); got {chunks}")
    return int(min(chunks, max(n, 1)))


def _sort(keys, values, descending, chunks, backend, gpu_memory_budget, *, positions, keys_returned=True):
    check_descending(descending)
    budget = parse_budget(gpu_memory_budget)
    backend = backend_spec(resolve_backend(backend, keys._meta), budget)
    chunk = output_chunk(chunks, keys.shape[0], keys.numblocks[0])
    runs = graph.form_runs(keys, values, descending=bool(descending), backend=backend, positions=positions,
                           keys_returned=keys_returned)
    return graph.merge_sorted_runs(
        runs, key_dtype=keys.dtype, descending=bool(descending), chunk=chunk, backend=backend
    )


def check_descending(descending: Any) -> None:
    """A ``TypeError`` unless ``descending`` is a bool: ``"no"`` would read as true."""
    if not isinstance(descending, (bool, np.bool_)):
        raise TypeError(f"descending must be True or False; got {descending!r}")


def as_dask(x: Any, argname: str) -> da.Array:
    """``x`` as a Dask array: NumPy and CuPy arrays and lists wrapped, masked arrays refused by name."""
    if isinstance(x, np.ma.MaskedArray) or isinstance(getattr(x, "_meta", None), np.ma.MaskedArray):
        # Sorting the data would silently drop the mask and sort what it hides.
        raise TypeError(
            f"{argname} is a masked array, which gpusort does not sort; pass "
            f"{argname}.compressed() to drop the masked elements, or {argname}.filled(value)"
        )
    if isinstance(x, da.Array):
        return x
    if is_cupy(x):
        return da.from_array(x, chunks="auto", asarray=False)
    if isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__array__"):
        try:
            x = np.asarray(x)
        except ValueError as exc:  # ragged nested sequences
            raise ValueError(f"{argname} is not a rectangular array: {exc}") from exc
        # Dask cannot size object chunks; one chunk lets the dtype check speak.
        return da.from_array(x, chunks=-1 if x.dtype.hasobject else "auto")
    raise TypeError(
        f"{argname} must be a dask array or a NumPy/CuPy array; got {type(x).__name__}"
    )


def _check_known_chunks(x: da.Array, argname: str) -> None:
    if any(math.isnan(c) for dim in x.chunks for c in dim):
        raise ValueError(
            f"{argname} has unknown chunk sizes (e.g. after boolean indexing); "
            f"call {argname}.compute_chunk_sizes() first"
        )


def _as_keys(x: Any, axis: int | None, argname: str) -> da.Array:
    """``x`` as a 1-D Dask array of sortable keys, or a clear error."""
    x = as_dask(x, argname)
    order.check_key_dtype(x.dtype, argname)
    _check_known_chunks(x, argname)
    if axis is None and x.ndim > 1 and any(0 in dim for dim in x.chunks):
        # Dask's reshape miscounts empty chunks of N-D arrays (an IndexError,
        # or chunk sizes that the blocks then contradict): drop them first.
        if x.size == 0:
            return da.from_array(x._meta.reshape(0), chunks=-1, asarray=False)
        x = x.rechunk(tuple(tuple(c for c in dim if c) for dim in x.chunks))
    if axis is None:
        return x.ravel()
    if x.ndim != 1:
        raise ValueError(
            f"{argname} is {x.ndim}-D; gpusort sorts 1-D arrays along their only axis: "
            "pass axis=None to sort the flattened array (as np.sort(x, axis=None) does)"
        )
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or axis not in (0, -1):
        raise ValueError(f"axis={axis!r} is out of bounds for 1-D {argname}; use axis=-1, 0 or None")
    return x


def _check_gpu() -> None:
    try:
        import cupy
    except ImportError as exc:
        raise ValueError(
            "backend='cupy' needs CuPy, which is not installed: pip install 'gpusort[cuda12]' "
            "or 'gpusort[cuda13]', or use backend='numpy'"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise ValueError(f"backend='cupy' needs a CUDA GPU, and CuPy finds none ({exc}); use backend='numpy'") from exc
    if count == 0:
        raise ValueError("backend='cupy' needs a CUDA GPU, and CuPy finds none; use backend='numpy'")
