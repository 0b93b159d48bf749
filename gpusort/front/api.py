"""Public API: check the arguments, then hand over to :mod:`gpusort.engine.graph`."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from gpusort.arrays import in_memory, namespace
from gpusort.backends import BACKENDS, BackendSpec, backend_for, backend_spec, on_device
from gpusort.engine import graph, multikey
from gpusort.keys import order
from gpusort.memory.plan import parse_budget


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
        Keys: bool, int8-64, uint8-64, float16/32/64, complex64/128,
        datetime64 or timedelta64; or NumPy's fixed-width bytes (``S``), str
        (``U``), void or structured dtypes, in NumPy's order (a structured
        key field by field, each by its own rule; host chunks only, as CuPy
        has no such dtypes).  NumPy and CuPy arrays are wrapped in a Dask
        array.
    axis : int or None
        The axis to sort along, each row on its own, as ``np.sort``: any axis
        of N-D ``x``, chunked along it or not (:mod:`gpusort.engine.along`); the
        output has the input's chunks.  ``None`` sorts the flattened array.
    descending : bool
        Largest first.  NaN (and NaT) still come last, as in NumPy.
    chunks : int, optional
        Output chunk length of a 1-D (or ``axis=None``) sort.  By default the
        output keeps the number of input chunks.  All output chunks have this
        length but the last.
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
    >>> gpusort.sort(da.from_array([[3, 1, 2], [9, 7, 8]], chunks=2), axis=1).compute()
    array([[1, 2, 3],
           [7, 8, 9]])
    """
    return _sort_any([x], axis, SortOptions.of(descending, chunks, backend, gpu_memory_budget), positions=False)


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
    ``np.argsort(x, kind="stable")``.  Along an axis of N-D ``x`` the
    positions index that axis; with ``axis=None`` the flattened array.  The
    arguments are those of :func:`sort`.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([2, 1, 2, 1], chunks=2)
    >>> gpusort.argsort(x).compute()
    array([1, 3, 0, 2])
    >>> gpusort.argsort(x, descending=True).compute()
    array([0, 2, 1, 3])
    """
    return _sort_any([x], axis, SortOptions.of(descending, chunks, backend, gpu_memory_budget), positions=True)


def lexsort(
    keys: Any,
    *,
    axis: int | None = -1,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> da.Array:
    """Stable int64 positions that sort by several keys, the last one primary: ``np.lexsort``, lazily.

    Parameters
    ----------
    keys : sequence of arrays, or an array
        Key arrays of one shape (dtypes may differ, complex included), the
        last the primary key; or an array whose first axis indexes the keys,
        as NumPy takes them.  Keys chunked differently are rechunked to the
        last key's chunks.
    axis : int or None
        The axis to sort along (each row on its own); ``None`` flattens.
    descending : bool
        Largest first by every key.  NaN (and NaT) still come last.
    chunks, backend, gpu_memory_budget
        As for :func:`sort`.

    Returns
    -------
    dask.array.Array
        int64 positions along ``axis``: ties in every key keep input order.

    Notes
    -----
    The keys' order keys are packed into one composite key
    (:mod:`gpusort.keys.composite`): two int32 keys sort as one 64-bit key.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> surname = da.from_array([2, 1, 2, 1], chunks=2)
    >>> age = da.from_array([30.0, 40.0, 20.0, 40.0], chunks=2)
    >>> gpusort.lexsort([age, surname]).compute()
    array([1, 3, 2, 0])
    """
    options = SortOptions.of(descending, chunks, backend, gpu_memory_budget)
    return _sort_any(_key_list(keys), axis, options, positions=True)


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

    ``keys`` is a 1-D array, or a tuple of 1-D arrays of one length compared
    lexicographically, the *first* one primary (as ``sort_values(by=[...])``;
    :func:`lexsort` takes NumPy's order, last primary).  ``values`` is a 1-D
    array of the same length, of any fixed-width dtype; chunked differently,
    it is rechunked to match the keys.

    Returns
    -------
    (dask.array.Array, dask.array.Array)
        The sorted keys (a tuple of them for a tuple of keys) and the values
        in the same order; equal keys keep their input order.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> k = da.from_array([3, 1, 3, 2], chunks=2)
    >>> v = da.from_array([b"c", b"a", b"d", b"b"], chunks=2)
    >>> sk, sv = gpusort.sort_by_key(k, v)
    >>> sv.compute()
    array([b'a', b'b', b'c', b'd'], dtype='|S1')
    >>> (sk, sk2), sv = gpusort.sort_by_key((k, da.from_array([1, 0, 0, 0], chunks=2)), v)
    >>> sk2.compute(), sv.compute()
    (array([0, 0, 0, 1]), array([b'a', b'b', b'd', b'c'], dtype='|S1'))
    """
    options = SortOptions.of(descending, chunks, backend, gpu_memory_budget)
    several = isinstance(keys, (list, tuple)) and any(_is_array(k) for k in keys)  # a list of numbers is one key
    columns = _key_list(keys) if several else [_as_keys(keys, 0, "keys", composite_ok=True)]
    if any(c.ndim != 1 for c in columns):
        raise ValueError("keys must be 1-D arrays (or a tuple of them); sort N-D keys with sort(x, axis=...)")
    if several:
        for i, c in enumerate(columns):
            order.check_key_dtype(c.dtype, f"keys[{i}]", composite_ok=True)
            _check_known_chunks(c, f"keys[{i}]")
            if c.shape != columns[0].shape:
                raise ValueError(f"keys[{i}] has length {c.shape[0]} but keys[0] has {columns[0].shape[0]}; "
                                 "every key array must have the same length")
        columns = _aligned(columns)
    keys = columns[0]
    values = as_dask(values, "values")
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D like keys; got {values.ndim}-D (use values.ravel())")
    if values.dtype.hasobject:  # object, StringDType, or a structured dtype with object fields
        raise TypeError(f"values has dtype {values.dtype}; gpusort moves fixed-width values only "
                        "(convert first, e.g. values.astype('U') for strings)")
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
    if not several and not order.is_composite(keys.dtype):
        return _sort(keys, values, options, positions=False)
    # Composite keys do not decode back to the keys: the keys travel with the values, as records.
    records = multikey.records(columns + [values])
    out = _sort_composite(columns, records, options)
    *sorted_keys, sorted_values = multikey.fields(out, [c.dtype for c in columns] + [values.dtype])
    return (tuple(sorted_keys) if several else sorted_keys[0]), sorted_values


def topk(x: Any, k: int, axis: int | None = -1, split_every: int | None = None) -> da.Array:
    """The ``k`` largest keys of ``x`` along ``axis``, largest first (``k < 0``: the ``-k`` smallest, smallest first), lazily.

    ``dask.array.topk``'s semantics and signature: NaN (and NaT) count as
    the largest keys, as in NumPy's order.  Exact, in the input's bits, and
    without sorting ``x``: each chunk keeps the ``|k|`` extremes of each row
    (a linear-time sample select, on the GPU for 1-D CuPy chunks), and only
    those are selected again and sorted (:mod:`gpusort.engine.select`).

    Parameters
    ----------
    x : dask.array.Array or array-like
        Keys of a real dtype :func:`sort` takes, any number of dimensions.
    k : int
        How many; its sign picks the end.  As in ``dask.array.topk``, ``|k|``
        past the length of ``axis`` gives all of its keys, in order, and
        ``k = 0`` none (an empty axis).
    axis : int or None
        The axis to select along (each row on its own); ``None`` flattens ``x``.
    split_every : int, optional
        Survivors of how many tasks one step of the tree combines; by
        default as many as make about :data:`gpusort.engine.select.COMBINE_KEYS`
        keys, so a few hundred chunks take one step.  Neighbouring chunks
        are first batched into tasks of up to :func:`gpusort.engine.graph.task_bytes`.

    Returns
    -------
    dask.array.Array
        ``x``'s chunks, but ``min(|k|, n)`` keys along ``axis`` (``n`` its
        length), in one chunk.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([5.0, float("nan"), 1.0, 4.0, 2.0], chunks=2)
    >>> gpusort.topk(x, 2).compute(), gpusort.topk(x, -2).compute()
    (array([nan,  5.]), array([1., 2.]))
    >>> gpusort.topk(x, -9).compute()
    array([ 1.,  2.,  4.,  5., nan])
    >>> gpusort.topk(da.from_array([[3, 1, 2], [0, 9, 4]], chunks=1), 1, axis=0).compute()
    array([[3, 9, 4]])
    """
    from gpusort.engine import select

    if axis is None:
        x, axis = _as_keys(x, None, "x"), 0
    else:
        x = as_dask(x, "x")
        order.check_key_dtype(x.dtype, "x")
        _check_known_chunks(x, "x")
        if x.ndim == 0:
            raise ValueError(f"axis={axis!r} is out of bounds for 0-d x; use axis=None (a 1-element x)")
        axis = _check_axis(axis, x.ndim, "x")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int (k > 0: largest, k < 0: smallest); got {k!r}")
    if split_every is not None and (isinstance(split_every, bool) or not isinstance(split_every, numbers.Integral)
                                    or split_every < 2):
        raise ValueError(f"split_every={split_every!r}; use an int of at least 2, or None")
    k = int(max(-x.shape[axis], min(k, x.shape[axis])))  # all of them, at most
    if k == 0:
        return x[(slice(None),) * axis + (slice(0, 0),)]
    return select.topk(x, k, axis, split_every)


def searchsorted(sorted_x: Any, v: Any, side: str = "left", sorter: Any = None) -> da.Array:
    """Global positions where ``v`` would go in the sorted 1-D ``sorted_x``, lazily: ``np.searchsorted`` over chunks.

    ``sorted_x`` is sorted ascending in NumPy's order (NaN last), as
    :func:`sort` returns it, in any chunks; ``v`` is a scalar or an array of
    any shape (a Dask array keeps its chunks).  ``side="left"``: the first
    position (before equal keys), ``"right"``: after them.  Positions index
    the whole array, as ``np.searchsorted(sorted_x.compute(), v)`` would: each
    needle is routed to the one chunk it must search (:mod:`gpusort.engine.search`);
    NaN needles go after every number.

    ``sorter``, as NumPy's: integer positions that sort ``sorted_x`` (a Dask,
    NumPy or CuPy array, as :func:`argsort` returns them), for an unsorted
    ``sorted_x``.  Its values are not read: ``sorted_x[sorter]`` holds the
    values of ``sort(sorted_x)`` (ties are equal keys, ``-0.0 == 0.0``), so
    that is what is searched, and a gather of ``sorted_x`` by a Dask
    ``sorter``, which pairs every chunk of one with every chunk of the other,
    is never made.  Only its shape and dtype are checked: with a ``sorter``
    that does not sort ``sorted_x``, NumPy's result is undefined, and this
    one is that of a valid ``sorter``.  Searching :func:`sort`'s output
    yourself saves that sort when you search it again.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([5, 1, 3, 3, 9], chunks=2)
    >>> gpusort.searchsorted(x, [3, 4], sorter=gpusort.argsort(x)).compute()
    array([1, 3])
    >>> s = gpusort.sort(x)
    >>> gpusort.searchsorted(s, [3, 4, 10]).compute()
    array([1, 3, 5])
    >>> int(gpusort.searchsorted(s, 3, side="right").compute())
    3
    """
    from gpusort.engine import search

    x = _as_keys(sorted_x, 0, "sorted_x")
    if sorter is not None:
        sorter = as_dask(sorter, "sorter")
        if sorter.shape != x.shape or sorter.dtype.kind not in "iu":
            raise ValueError(f"sorter is {sorter.ndim}-D {sorter.dtype} of shape {sorter.shape}; it must hold "
                             f"the integer positions that sort sorted_x ({x.shape[0]} of them, as argsort returns)")
        _check_known_chunks(sorter, "sorter")
        x = sort(x)
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r}; use 'left' or 'right'")
    needles = as_dask(np.asarray(v) if np.isscalar(v) else v, "v")
    _check_known_chunks(needles, "v")
    if on_device(x._meta) != on_device(needles._meta):
        # Every chunk is searched where it lives: the needles go there, once.
        needles = needles.map_blocks(in_memory, on_device(x._meta), dtype=needles.dtype,
                                     meta=meta_from_array(x._meta, ndim=needles.ndim, dtype=needles.dtype))
    return search.searchsorted(x, needles, side)


def unique(
    x: Any,
    *,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> da.Array | tuple[da.Array, ...]:
    """The sorted unique keys of ``x``, lazily, with ``np.unique``'s optional results.

    ``x`` is flattened.  Keys are equal as ``np.unique`` compares them:
    ``-0.0 == 0.0`` and every NaN (NaT) is one key (NumPy's ``equal_nan``).
    Built on one sort (:mod:`gpusort.engine.distinct`); the inverse takes a second.
    ``backend`` and ``gpu_memory_budget`` are those of :func:`sort`.

    Returns
    -------
    dask.array.Array, or a tuple of them
        The unique keys (chunk sizes unknown until computed), then, in this
        order and only if asked for: ``index``, the int64 position of each
        key's first occurrence; ``inverse``, the int64 position of every
        element's key among the unique keys, shaped like ``x``; ``counts``,
        the int64 number of each.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> x = da.from_array([3.0, float("nan"), 1.0, 3.0, -0.0, 0.0, float("nan")], chunks=3)
    >>> values, counts = gpusort.unique(x, return_counts=True)
    >>> values.compute(), counts.compute()
    (array([-0.,  1.,  3., nan]), array([2, 1, 2, 2]))
    >>> [a.compute().tolist() for a in gpusort.unique(x, return_index=True, return_inverse=True)[1:]]
    [[4, 2, 0, 1], [2, 3, 1, 2, 0, 0, 3]]
    """
    from gpusort.engine import distinct

    for name, flag in (("return_index", return_index), ("return_inverse", return_inverse),
                       ("return_counts", return_counts)):
        check_flag(flag, name)
    options = SortOptions.of(backend=backend, gpu_memory_budget=gpu_memory_budget)
    x = as_dask(x, "x")  # once: wrapping a NumPy array hashes its data
    keys = _as_keys(x, None, "x")
    # With the index or the inverse, one stable sort gives the keys and their first positions.
    keys, positions = _sort(keys, None, options, positions=return_index or return_inverse)

    def resort(k: da.Array, v: da.Array, chunk: int) -> tuple[da.Array, da.Array]:
        return _sort(k, v, dataclasses.replace(options, chunks=chunk), positions=False)

    out = distinct.unique(keys, positions, resort, return_index=return_index, return_inverse=return_inverse,
                        return_counts=return_counts)
    if return_inverse and x.ndim != 1:
        at = 1 + bool(return_index)
        out = out[:at] + (out[at].reshape(x.shape),) + out[at + 1:]
    return out[0] if len(out) == 1 else out


def resolve_backend(backend: str | None, meta: Any) -> str:
    """The backend to use: ``backend``, or the one the chunk type ``meta`` picks."""
    if backend is None:
        return backend_for(meta)
    device = BackendSpec(backend).device  # a name BACKENDS does not hold fails here, named
    if on_device(meta) and not device:
        raise ValueError(
            f"backend={backend!r} cannot sort CuPy chunks; use backend='cupy' (or None), "
            "or move the chunks to the host with x.map_blocks(cupy.asnumpy)"
        )
    if device:
        _check_gpu()
    return backend


@dataclasses.dataclass(frozen=True)
class SortOptions:
    """What every sort takes besides its arrays, checked once, where the user passed it.

    ``descending`` is a bool, ``chunks`` the output chunk length (``None``:
    as many chunks as the input), ``backend`` a name of
    :data:`gpusort.backends.BACKENDS` (``None``: the chunk type picks) and
    ``gpu_memory_budget`` bytes (``None``: the backend's default).  Build it
    with :meth:`of` from what the user passed; the layers below take it as
    it is.

    Examples
    --------
    >>> SortOptions.of(descending=True, gpu_memory_budget="1 GiB")
    SortOptions(descending=True, chunks=None, backend=None, gpu_memory_budget=1073741824)
    >>> SortOptions.of(chunks=0)
    Traceback (most recent call last):
    ...
    ValueError: chunks must be a positive int (the output chunk length); got 0
    """

    descending: bool = False
    chunks: int | None = None
    backend: str | None = None
    gpu_memory_budget: int | None = None

    @classmethod
    def of(cls, descending: Any = False, chunks: Any = None, backend: Any = None,
           gpu_memory_budget: Any = None) -> "SortOptions":
        """The options as the user passed them, each checked: a clear error names the argument and the fix."""
        check_flag(descending, "descending")
        if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral)):
            raise TypeError(f"chunks must be a positive int (the output chunk length); got {chunks!r}")
        if chunks is not None and chunks <= 0:
            raise ValueError(f"chunks must be a positive int (the output chunk length); got {chunks}")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not known; use one of {BACKENDS} or None")
        return cls(bool(descending), None if chunks is None else int(chunks), backend,
                   parse_budget(gpu_memory_budget))

    def spec(self, meta: Any) -> str | BackendSpec:
        """The backend for chunks like ``meta`` (:func:`resolve_backend`), with the budget, as the graph carries it."""
        return backend_spec(resolve_backend(self.backend, meta), self.gpu_memory_budget)

    def chunk(self, n: int, nparts: int) -> int:
        """The output chunk length for ``n`` keys in ``nparts`` input chunks: ``chunks``, or one that keeps ``nparts``."""
        if self.chunks is None:
            return max(1, math.ceil(n / max(nparts, 1)))
        return min(self.chunks, max(n, 1))


def _sort(keys, values, options: SortOptions, *, positions, keys_returned=True):
    return graph.sort(keys, values, descending=options.descending, backend=options.spec(keys._meta),
                      chunk=options.chunk(keys.shape[0], keys.numblocks[0]), positions=positions,
                      keys_returned=keys_returned)


def _sort_any(keys: list, axis, options: SortOptions, *, positions: bool) -> da.Array:
    """sort, argsort and lexsort: ``keys`` (NumPy's lexsort order, last primary) along ``axis``."""
    argname = "x" if len(keys) == 1 else "keys"
    keys = [as_dask(k, argname) for k in keys]
    first = keys[-1]
    for k in keys:
        order.check_key_dtype(k.dtype, argname, composite_ok=True)
        _check_known_chunks(k, argname)
    for k in keys:
        if k.shape != first.shape:
            raise ValueError(f"keys have shapes {first.shape} and {k.shape}; every key must have the same shape")
    if options.chunks is None and first.ndim == 1:  # the number of chunks the output keeps: empty ones count
        options = dataclasses.replace(options, chunks=options.chunk(first.shape[0], first.numblocks[0]))
    if first.size == 0 and any(k.chunks != first.chunks for k in keys):
        # Empty keys in other chunkings (a rechunk keeps their numbers of empty chunks): empty in the last one's.
        keys = [da.from_array(k._meta.reshape(first.shape), chunks=first.chunks, asarray=False) for k in keys]
    if first.size and (any(0 in dim for dim in first.chunks) or any(k.chunks != first.chunks for k in keys)):
        # Every key in the last one's chunks, without empty ones: Dask's rechunk and blockwise
        # alignment miscount empty chunks of N-D arrays.  Along an axis the result gets them back.
        compact = tuple(tuple(c for c in dim if c) for dim in first.chunks)
        keys = [k.rechunk(compact) for k in keys]
    if first.ndim == 0 and axis is not None:
        raise ValueError(f"axis={axis!r} is out of bounds for 0-d {argname}; use axis=None (a 1-element result)")
    if axis is None or first.ndim == 1:
        if axis is not None:
            _check_axis(axis, 1, argname)
        flat = [_as_keys(k, None, argname, composite_ok=True) for k in keys]
        if len(flat) == 1 and not order.is_composite(flat[0].dtype):
            got_keys, got_positions = _sort(flat[0], None, options, positions=positions, keys_returned=not positions)
            return got_positions if positions else got_keys
        carried = None if positions else flat[0]  # composite keys do not decode: the keys travel as values
        return _sort_composite(flat[::-1], carried, options)
    from gpusort.engine import along

    axis = _check_axis(axis, first.ndim, argname)
    _check_no_chunks(options.chunks, axis, first.ndim, argname)
    spec = options.spec(first._meta)
    if first.size == 0:  # nothing to sort, in the keys' chunks
        return first.map_blocks(_empty_result, positions, dtype=np.int64 if positions else first.dtype)
    out = along.sort_along(keys[::-1], axis, descending=options.descending, positions=positions, backend=spec)
    return out if out.chunks == first.chunks else along.with_empty_chunks(out, first.chunks)


def _sort_composite(columns: list, carried: da.Array | None, options: SortOptions) -> da.Array:
    """1-D keys (primary first) sorted as composite keys: ``carried`` in their order, or their positions."""
    chunk = options.chunk(columns[0].shape[0], columns[0].numblocks[0])
    okeys = multikey.composite_keys(columns, options.descending)
    _, out = multikey.sort(okeys, carried, positions=carried is None, chunk=chunk,
                           backend=options.spec(columns[0]._meta))
    return out


def _check_no_chunks(chunks: Any, axis: int, ndim: int, argname: str) -> None:
    if chunks is not None:
        raise ValueError(
            f"chunks={chunks!r} sets the output chunk length of a 1-D sort; a sort along axis {axis} of "
            f"{ndim}-D {argname} keeps the input's chunks: drop chunks (or rechunk the result)"
        )


def _empty_result(block: Any, positions: bool) -> Any:
    # Not a cast: complex keys cast to positions would warn that they lose their imaginary part.
    return namespace(block).empty(block.shape, dtype=np.int64) if positions else block.copy()


def _aligned(arrays: list[da.Array]) -> list[da.Array]:
    """1-D arrays of one length in the first one's chunks, empty chunks dropped (blockwise tasks pair them up)."""
    if arrays[0].shape[0] == 0:  # nothing to move; Dask's rechunk keeps the number of empty chunks
        return [da.from_array(a._meta.reshape(0), chunks=-1, asarray=False) for a in arrays]
    chunks = (tuple(c for c in arrays[0].chunks[0] if c),)
    return [a if a.chunks == chunks else a.rechunk(chunks) for a in arrays]


def _check_axis(axis: Any, ndim: int, argname: str) -> int:
    """``axis`` as a non-negative int below ``ndim``, or a clear error."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -ndim <= axis < ndim:
        raise ValueError(
            f"axis={axis!r} is out of bounds for {ndim}-D {argname}; use an int from {-ndim} to {ndim - 1}, "
            "or None to sort the flattened array"
        )
    return int(axis) % ndim


def _key_list(keys: Any) -> list[da.Array]:
    """The key arrays of ``lexsort`` (or ``sort_by_key``): a sequence of arrays, or an array's first axis."""
    if isinstance(keys, (list, tuple)):
        if not keys:
            raise ValueError("keys is empty; pass at least one key array")
        return [as_dask(k, "keys") for k in keys]
    keys = as_dask(keys, "keys")
    if keys.ndim < 2:
        raise ValueError(
            f"keys is a {keys.ndim}-D array; pass a sequence of key arrays, or an array whose first axis "
            "indexes the keys (as np.lexsort takes them)"
        )
    return [keys[i] for i in range(keys.shape[0])]


def check_flag(value: Any, argname: str) -> None:
    """A ``TypeError`` unless ``value`` is a bool: ``"no"`` would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{argname} must be True or False; got {value!r}")


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
    if hasattr(x, "to_dask_array"):  # a Dask DataFrame, Series or Index: np.asarray would compute it now
        raise TypeError(
            f"{argname} is a Dask {type(x).__name__}, which gpusort does not take lazily: its partition "
            f"lengths are unknown until computed. Pass {argname}.to_dask_array(lengths=True) (that computes "
            "the lengths; persist the column first to compute it once), or use its sort_values()"
        )
    if isinstance(x, (list, tuple)) and any(_is_array(e) for e in x):
        raise TypeError(
            f"{argname} is a {type(x).__name__} of {len(x)} arrays; gpusort sorts one array. To sort by several "
            f"keys use gpusort.lexsort({argname}); else sort each, or join them first with "
            f"dask.array.concatenate({argname}) (or stack them, then axis=None)"
        )
    if on_device(x):
        return da.from_array(x, chunks="auto", asarray=False)
    if isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__array__"):
        try:
            x = np.asarray(x)
        except ValueError as exc:  # ragged nested sequences
            raise ValueError(f"{argname} is not a rectangular array: {exc}") from exc
        # Dask cannot size object chunks, nor zero-byte ones; one chunk lets the dtype check speak.
        return da.from_array(x, chunks=-1 if x.dtype.hasobject or not x.dtype.itemsize else "auto")
    raise TypeError(
        f"{argname} must be a dask array or a NumPy/CuPy array; got {type(x).__name__}"
    )


def _is_array(x: Any) -> bool:
    """Whether ``x`` is an array object (NumPy, CuPy, Dask, pandas), not a scalar or a nested list."""
    return hasattr(x, "__array__") and getattr(x, "ndim", 0) > 0 or hasattr(x, "__dask_graph__")


def _check_known_chunks(x: da.Array, argname: str) -> None:
    if any(math.isnan(c) for dim in x.chunks for c in dim):
        raise ValueError(
            f"{argname} has unknown chunk sizes (e.g. after boolean indexing); "
            f"call {argname}.compute_chunk_sizes() first"
        )


def _as_keys(x: Any, axis: int | None, argname: str, composite_ok: bool = False) -> da.Array:
    """``x`` as a 1-D Dask array of sortable keys, or a clear error."""
    x = as_dask(x, argname)
    order.check_key_dtype(x.dtype, argname, composite_ok)
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
    _check_axis(axis, 1, argname)
    return x


def _check_gpu() -> None:
    from gpusort import runtime

    names, why = runtime.gpus()  # the one GPU probe
    if not names:
        raise ValueError(f"backend='cupy' needs CuPy and a CUDA GPU, and here {why}; or use backend='numpy'")
