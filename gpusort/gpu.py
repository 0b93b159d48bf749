"""Sorting and merging CuPy arrays on one GPU with gpusort's own mergesort kernels.

:func:`sort`, :func:`argsort` and :func:`lexsort` stand in for
``cupy.sort``, ``cupy.argsort`` and ``cupy.lexsort`` (NumPy's signatures,
any shape and axis, complex keys); :func:`sort_pairs`, :func:`merge` and
:func:`merge_runs` take 1-D arrays.  Every function returns new CuPy arrays
and never modifies its inputs.  Results follow NumPy: ascending order is
``np.sort``'s (NaN last, ``-0.0`` tied with ``0.0``, complex numbers by real
part then imaginary part with NaN parts last), sorts and merges are stable,
and descending order is the reverse of ascending except that NaN stays last
and ties still keep their input order.

Keys may be bool, int8-64, uint8-64 or float16/32/64, and complex64/128 in
sort, argsort and lexsort.  Values may be of any dtype: values of 1, 2, 4 or
8 bytes move with their keys through the kernels; wider ones are gathered
afterwards through the keys' positions.

How an N-D sort runs.  The sort axis is moved last and the array made
contiguous rows, ``(R, L)``; then, by what moves the fewest bytes:

* **Segmented** (one row, or rows padded by at most 2x): each row is padded
  to ``S = NV * 2**m`` keys (:func:`gpusort.cuda.tuning.segment_length`, ``NV``
  the blocksort tile) with a key that sorts after every real one, and one
  :func:`gpusort.cuda.dispatch.mergesort` with ``segment=S`` sorts all rows at
  once in ``1 + log2(S / NV)`` passes over the data, the passes a 1-D sort
  of one row takes.  A (2**14, 2**14) float32 sort is a blocksort and one
  merge pass.
* **Composite keys** (rows shorter than ``NV / 2``, which padding would
  more than double, and complex keys): the row number, then the key's order
  key (:func:`gpusort.keys.order.key_columns`), packed into one unsigned integer
  (:class:`gpusort.keys.composite.Layout`) and sorted 1-D: ``log2(R * L / NV)``
  passes over the data itself, however short the rows.  Past 64 bits
  (64-bit keys of many rows, complex keys, lexsort) the packed words are
  sorted least significant first (LSD), each a stable sort carrying the
  positions.  ``sort`` of complex keys gathers the input through the
  positions, so it returns the input's exact bits.

The comment above ``_sort_rows`` weighs the two paths.

>>> import cupy, gpusort.gpu
>>> gpusort.gpu.sort(cupy.array([3.0, float("nan"), -1.0, 2.0]))
array([-1.,  2.,  3., nan])
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Callable, Sequence, Union

import numpy as np

from gpusort.cuda import build, dispatch, tuning
from gpusort.keys import composite, order

try:
    import cupy
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise ImportError(
        "gpusort.gpu needs CuPy and a CUDA GPU: pip install 'gpusort[cuda13]' "
        "(or [cuda12]); the NumPy backend needs neither"
    ) from exc

Run = Union["cupy.ndarray", tuple["cupy.ndarray", "cupy.ndarray"]]

_SUPPORTED = "bool, int8-64, uint8-64 and float16/32/64"
_COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))
#: NumPy's names for its sort algorithms; every one means our stable merge sort.
_KINDS = ("quicksort", "mergesort", "heapsort", "stable")


def sort(a: cupy.ndarray, axis: int | None = -1, kind: str | None = None, *,
         descending: bool = False, stable: bool | None = None) -> cupy.ndarray:
    """A sorted copy of ``a`` along ``axis``, as ``numpy.sort``.

    Parameters
    ----------
    a : cupy.ndarray
        Keys of bool, int8-64, uint8-64, float16/32/64 or complex64/128, any shape.
    axis : int or None
        The axis to sort along (negative counts from the last); ``None``
        sorts the flattened array.
    kind : {None, 'quicksort', 'mergesort', 'heapsort', 'stable'}
        Accepted for NumPy's sake: the sort is always gpusort's stable merge sort.
    descending : bool
        Largest first; NaN stays last.
    stable : bool or None
        Accepted for NumPy's sake (the sort is stable either way); not with ``kind``.

    Returns
    -------
    cupy.ndarray
        The keys in order: ``a``'s dtype, ``a``'s shape (1-D for ``axis=None``).
        The elements are ``a``'s, bit for bit (NaN payloads, the sign of zero).

    Examples
    --------
    >>> gpusort.gpu.sort(cupy.array([2, 7, 1]), descending=True)
    array([7, 2, 1])
    >>> gpusort.gpu.sort(cupy.array([[3, 1, 2], [0, 5, 4]]), axis=0)
    array([[0, 1, 2],
           [3, 5, 4]])
    """
    _check_kind(kind, stable)
    _check_keys(a, "a", complex_ok=True)
    rows, restore = _rows(a, _axis(axis, a.ndim))
    if a.dtype in _COMPLEX:
        # Tied complex order keys (both zeros, every NaN) are not invertible:
        # gather the input's own elements through the stable positions.
        return restore(cupy.take_along_axis(rows, _argsort_rows([rows], descending), axis=1))
    return restore(_sort_rows(rows, descending))


def argsort(a: cupy.ndarray, axis: int | None = -1, kind: str | None = None, *,
            descending: bool = False, stable: bool | None = None) -> cupy.ndarray:
    """The int64 positions along ``axis`` that sort ``a``, stable: ties keep their input order.

    Equals ``np.argsort(a, axis, kind="stable")`` when ascending.  Parameters
    as for :func:`sort`; a 0-d ``a`` is argsorted as one element, as NumPy does.

    Examples
    --------
    >>> gpusort.gpu.argsort(cupy.array([3, 1, 3, 0]))
    array([3, 1, 0, 2])
    >>> gpusort.gpu.argsort(cupy.array([1 + 2j, 1 - 1j, complex("nan"), -3j]))
    array([3, 1, 0, 2])
    """
    _check_kind(kind, stable)
    _check_keys(a, "a", complex_ok=True)
    if a.ndim == 0:
        a = a.reshape(1)  # NumPy: argsort of a 0-d array is [0], whatever the axis
    rows, restore = _rows(a, _axis(axis, a.ndim))
    return restore(_argsort_rows([rows], descending))


def lexsort(keys: cupy.ndarray | Sequence[cupy.ndarray], axis: int = -1, *,
            descending: bool = False) -> cupy.ndarray:
    """The int64 positions along ``axis`` that sort by several keys, the last key first, as ``numpy.lexsort``.

    Stable: positions tied on every key keep their input order.

    Parameters
    ----------
    keys : sequence of cupy.ndarray, or cupy.ndarray of 1 or more dimensions
        Key arrays of one shape; dtypes may differ (bool, int8-64, uint8-64,
        float16/32/64, complex64/128).  ``keys[-1]`` is the primary key,
        ``keys[-2]`` breaks its ties, and so on.  An array's first axis
        indexes the keys (a 1-D array is keys of one element, as in NumPy).
    axis : int
        The axis of the keys to sort along.
    descending : bool
        Every key largest first; NaN stays last.

    Returns
    -------
    cupy.ndarray
        int64 positions of the keys' shape.

    Examples
    --------
    >>> surnames = cupy.array([3, 1, 3, 1])
    >>> first_names = cupy.array([0.5, 2.0, -1.0, 2.0])
    >>> gpusort.gpu.lexsort([first_names, surnames])
    array([1, 3, 2, 0])
    """
    keys = _check_lexsort_keys(keys)
    if keys[0].ndim == 0:
        return cupy.zeros((), np.int64)  # NumPy: one position of one element
    axis = _axis(axis, keys[0].ndim)
    rows = [_rows(k, axis) for k in keys[::-1]]  # most significant first
    return rows[0][1](_argsort_rows([r for r, _ in rows], descending))


def sort_pairs(
    keys: cupy.ndarray, values: cupy.ndarray, *, descending: bool = False
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """``keys`` sorted, and ``values`` permuted with them (stable).

    Parameters
    ----------
    keys : cupy.ndarray
        1-D keys, as for :func:`sort`.
    values : cupy.ndarray
        1-D, same length, any dtype.
    descending : bool
        Largest key first; NaN stays last.

    Examples
    --------
    >>> k, v = gpusort.gpu.sort_pairs(cupy.array([2, 1, 2]), cupy.array([10.0, 20.0, 30.0]))
    >>> k, v
    (array([1, 2, 2]), array([20., 10., 30.]))
    """
    k = _keys(keys, "keys")
    v = _values(values, "values", keys.size, "keys")
    if v.dtype.itemsize in tuning.VALUE_DTYPES:
        out_keys, out_values = dispatch.mergesort(k, _bits(v), descending=descending)
        return out_keys.view(keys.dtype), out_values.view(v.dtype)
    out_keys, positions = dispatch.mergesort(k, descending=descending, positions=True)
    return out_keys.view(keys.dtype), v[positions]


def merge(a: cupy.ndarray, b: cupy.ndarray, *, descending: bool = False) -> cupy.ndarray:
    """Merge two sorted arrays into one, stably: on ties ``a``'s elements come first.

    ``a`` and ``b`` must be sorted in the order asked for (NaN last) and share
    a dtype.  Takes time linear in ``a.size + b.size``.

    Examples
    --------
    >>> gpusort.gpu.merge(cupy.array([1, 4, 9]), cupy.array([2, 4]))
    array([1, 2, 4, 4, 9])
    """
    ka, kb = _keys(a, "a"), _keys(b, "b")
    _same_dtype(a, b, "a", "b")
    return dispatch.merge(ka, None, kb, None, descending=descending)[0].view(a.dtype)


def merge_runs(runs: Sequence[Run], *, descending: bool = False, scratch: tuple | None = None):
    """Merge k sorted runs into one, stably: ties keep run order, then position.

    Parameters
    ----------
    runs : sequence of cupy.ndarray, or of (keys, values) pairs
        Each run sorted in the order asked for (NaN last).  Either every run
        is a keys array, or every run is a ``(keys, values)`` pair; keys share
        one dtype, values another.  Empty runs are allowed and skipped.
    descending : bool
        The runs are sorted largest first (NaN still last).
    scratch : (cupy.ndarray, cupy.ndarray or None), optional
        The runs' own concatenation (keys, values), where the runs are its
        consecutive slices in order and the caller gives it up: the merge
        writes over it and holds two copies of the data instead of three.
        The result may then be ``scratch`` itself.

    Returns
    -------
    cupy.ndarray or (cupy.ndarray, cupy.ndarray)
        The merged keys, or merged ``(keys, values)`` when pairs came in.

    Notes
    -----
    A balanced tree of pairwise merge-path merges of neighbouring runs:
    ceil(log2 k) passes over the data, O(n log k) work, never a re-sort.

    Examples
    --------
    >>> gpusort.gpu.merge_runs([cupy.array([1, 5]), cupy.array([], int), cupy.array([2, 3])])
    array([1, 2, 3, 5])
    """
    if not len(runs):
        raise ValueError("runs is empty: pass at least one (possibly empty) run")
    pairs = isinstance(runs[0], tuple)
    checked = []
    for i, run in enumerate(runs):
        if isinstance(run, tuple) != pairs:
            raise TypeError(
                f"runs[{i}] is {'not ' if pairs else ''}a (keys, values) pair but runs[0] "
                f"is{'' if pairs else ' not'}: pass all runs as keys or all as pairs"
            )
        keys, values = run if pairs else (run, None)
        k = _keys(keys, f"runs[{i}] keys" if pairs else f"runs[{i}]")
        v = None if values is None else _values(values, f"runs[{i}] values", keys.size, "its keys")
        checked.append((keys, k, v))
    for i, (keys, _, v) in enumerate(checked[1:], start=1):
        _same_dtype(checked[0][0], keys, "runs[0]", f"runs[{i}]")
        if pairs and v.dtype != checked[0][2].dtype:
            raise TypeError(
                f"runs[{i}] values have dtype {v.dtype}, runs[0] values {checked[0][2].dtype}: "
                "all values must share a dtype"
            )
    dtype = checked[0][0].dtype
    keys_runs = [k for _, k, _ in checked]
    values_runs = [v for _, _, v in checked] if pairs else None
    out_keys, out_values = _merge_tree(keys_runs, values_runs, descending, scratch)
    out_keys = out_keys.view(dtype)
    return (out_keys, out_values) if pairs else out_keys


def _merge_tree(keys_runs, values_runs, descending, scratch=None):
    """:func:`gpusort.cuda.dispatch.merge_tree` of the runs, in new memory or over ``scratch``.

    Values of a width the kernels move travel with their keys as unsigned
    bits; wider ones are replaced by their positions in the runs'
    concatenation and gathered once at the end (in new memory: ``scratch``
    is not used).
    """
    gather = None
    if values_runs is not None and values_runs[0].dtype.itemsize not in tuning.VALUE_DTYPES:
        gather = cupy.concatenate(values_runs)
        starts = np.cumsum([0] + [k.size for k in keys_runs])
        values_runs = [cupy.arange(s, s + k.size, dtype=np.int64) for s, k in zip(starts, keys_runs)]
    values_dtype = None if values_runs is None else values_runs[0].dtype
    runs = [(k, None if values_runs is None else _bits(values_runs[i])) for i, k in enumerate(keys_runs)]
    if scratch is not None and gather is None:
        scratch = (_kernel_keys(scratch[0]), None if scratch[1] is None else _bits(scratch[1]))
    else:
        scratch = None
    keys, values = dispatch.merge_tree(runs, descending=descending, scratch=scratch)
    if values is None:
        return keys, None
    values = values.view(values_dtype)
    return keys, values if gather is None else gather[values]


# --- sorting rows: (R, L) contiguous arrays, every row on its own ---------------------------
#
# Which path, by bytes moved (tile NV = NT * VT keys on sm_90: 5888 for
# keys of up to 8 bytes alone, which include the packed (key, position) words
# of an argsort, 8704 with 4-byte values).  The
# blocksort is compute-bound and a merge pass runs near the copy bandwidth,
# so a merge pass costs well under a blocksort over the same bytes.
#
# * Segmented, rows padded to S = segment_length(L, NV): 1 + log2(S / NV)
#   passes over S / L times the data.  Past one tile S < 2L, so padding
#   costs under 2x and the passes are a 1-D sort of one row's; from NV / 2 to
#   NV keys a row is one tile, one blocksort over at most twice the data.
# * Composite keys (row, key): log2(R * L / NV') passes over keys of 8 bytes
#   or more (NV' = 5888): 16 merge levels for 2**28 keys, where the segmented
#   sort of rows of 2**14 takes two.  Below L = NV / 2 the pad would be more
#   than the data itself (rows of 256 padded to 5888 are 23x), so composite
#   keys win there: their cost does not grow as rows get short.
# The 2x bound is also the memory bound the segmented sort promises.


def _sort_rows(rows: cupy.ndarray, descending: bool) -> cupy.ndarray:
    """Each row of real ``(R, L)`` keys sorted, in new memory."""
    count, length = rows.shape
    if rows.size == 0 or length == 1:
        return rows.copy()
    if count == 1 and rows.dtype in _BY_BITS:
        # The kernels load the floats as exact keys and store their bits back.
        return dispatch.exact_sort(rows.ravel(), descending=descending).reshape(1, length)
    keys = _kernel_keys(rows)
    segment = _segment(count, length, keys.dtype, 0, descending)
    if segment is not None:
        return _segmented(keys, segment, descending, positions=False).view(rows.dtype)
    if composite.row_bits(count) + 8 * rows.dtype.itemsize > composite.WORD:
        # 64-bit keys of many rows: two words, sorted as positions, then a gather.
        return cupy.take_along_axis(rows, _argsort_rows([rows], descending), axis=1)
    # Composite keys of scheme "exact", a bijection: the sorted keys decode
    # back to the input's bits, no positions needed.
    layout, okeys = _pack([rows], descending, "exact")
    out, _ = dispatch.mergesort(okeys)
    keys_out = layout.unpack(out, len(layout.widths) - 1)
    return order.decode_column(keys_out, rows.dtype, descending, "exact").reshape(count, length)


#: Floats whose 1-D sort runs on their exact order keys: the kernels compare
#: float16 and float32 as sign-magnitude integers (kernels/order.cuh), several
#: instructions a compare, so sorting the floats themselves runs well below
#: an int32 sort; their exact keys compare in one.  float64 keeps the
#: hardware compare, as fast as int64's.
_BY_BITS = tuning.EXACT_FLOATS


def _tied_keys(keys: cupy.ndarray, descending: bool) -> cupy.ndarray:
    """Order keys of scheme ``"tied"`` for float16/float32 ``keys`` (any shape), in one fused pass."""
    b = order.FloatBits(keys.dtype)
    return _tied_kernel()(keys.view(b.uint), b.sign, b.nans, b.inf, b.canonical_nan, descending)


@functools.cache
def _tied_kernel() -> cupy.ElementwiseKernel:
    """The fused pass from a float's bits to its tied order key (kernels/float_keys.cuh)."""
    return build.fused_kernel("U x, U sign, U nans, U inf, U nan, bool descending", "U out",
                              "out = gpusort_tied_key(x, sign, nans, inf, nan, descending);", "gpusort_tied_key")


def _argsort_rows(keys: list[cupy.ndarray], descending: bool) -> cupy.ndarray:
    """int64 positions within each row that sort ``(R, L)`` key arrays of one shape, most significant first."""
    count, length = keys[0].shape
    if keys[0].size == 0 or length == 1:
        return cupy.zeros(keys[0].shape, np.int64)
    if count == 1 and len(keys) == 1 and tuning.packs(_kernel_keys(keys[0]).dtype) and length < 2**32:
        # One row of narrow keys: packed with positions as the blocksort loads
        # them, unpacked as the last pass stores (no passes of their own).
        return dispatch.packed_argsort(_kernel_keys(keys[0]).ravel(), descending=descending).reshape(1, length)
    packed = _packed_positions(keys, descending)
    if packed is not None:
        return packed
    if len(keys) == 1 and keys[0].dtype not in _COMPLEX:
        # float16/32 as tied order keys, sorted ascending: integer compares,
        # and ties (both zeros, every NaN) keep their input order.
        by_bits = keys[0].dtype in _BY_BITS
        kernel_keys = _tied_keys(keys[0], descending) if by_bits else _kernel_keys(keys[0])
        direction = descending and not by_bits
        segment = _segment(count, length, kernel_keys.dtype, 4, direction)
        if segment is not None:
            return _segmented(kernel_keys, segment, direction, positions=True)
    # Scheme "tied": both zeros and every NaN tie, and keep their input order.
    layout, okeys = _pack(keys, descending, "tied")
    if layout.words == 1:
        _, positions = dispatch.mergesort(okeys, positions=True)
    else:
        positions = _lsd_argsort(okeys, layout)
    return _row_positions(positions, count, length, length)


def _packed_positions(keys: list[cupy.ndarray], descending: bool) -> cupy.ndarray | None:
    """Positions as :func:`_argsort_rows` returns them, from a keys-only sort of keys and positions in one word.

    The order keys (scheme "tied") and each element's position in its row
    are packed into one unsigned integer, the position lowest: a key-value
    sort moves the positions through shared memory in every pass, packed
    they travel as the key's low bits, and they break its ties in input
    order, which is what stability asks.  Rows long enough for a segmented
    sort are sorted so; shorter ones get the row number on top.  ``None``
    where the columns do not fit 64 bits.
    """
    count, length = keys[0].shape
    widths = [w for k in keys for w in order.key_widths(k.dtype, descending)]
    index = composite.row_bits(length)
    if sum(widths) + index > composite.WORD:
        return None  # before any encoding: wide keys take the key-value sort
    # Several keys are packed into one column first (rare enough for the unfused pack).
    key_bits = widths[0] if len(widths) == 1 else 8 * composite.Layout(tuple(widths)).dtype.itemsize
    rowwise = composite.Layout((key_bits, index))
    segment = _segment(count, length, rowwise.dtype, 0, False) if rowwise.bits <= composite.WORD else None
    if segment is None:
        rowwise = composite.Layout((composite.row_bits(count), key_bits, index))
        if rowwise.bits > composite.WORD:
            return None
    elif len(keys) == 1 and keys[0].dtype not in _COMPLEX and not _packing_pays(
            count, length, segment, rowwise.dtype, _kernel_keys(keys[0]).dtype, descending):
        return None
    columns = [c for k in keys for c in _tied_columns(k.ravel(), descending)]
    if len(columns) != 1:
        columns = [composite.Layout(tuple(widths)).pack(columns)]
    packed = _with_positions(columns[0], rowwise, length, 0 if segment is not None else 1)
    if segment is not None:
        out = _segmented(packed.reshape(count, length), segment, False, positions=False).ravel()
    else:
        out, _ = dispatch.mergesort(packed)
    return _positions_of(out, rowwise).reshape(count, length)


def _tied_columns(keys: cupy.ndarray, descending: bool) -> list[cupy.ndarray]:
    """:func:`gpusort.keys.order.key_columns` of scheme ``"tied"``, float16/32 in one fused pass."""
    if keys.dtype in _BY_BITS:
        return [_tied_keys(keys, descending)]
    return order.key_columns(keys, descending, "tied")[0]


#: How many more passes a packed argsort may take than the key-value one and
#: still win: its passes are keys-only, cheaper than passes that gather
#: positions by a little more than this ratio; but rows of 16384 float32
#: packed into 8 bytes take 2 passes where the key-value sort takes 1, and
#: lose (benchmarks/NOTES.md has the cases).
PACKED_PASSES = 1.3


def _packing_pays(count: int, length: int, segment: int, packed: np.dtype, key: np.dtype,
                  descending: bool) -> bool:
    """Whether a segmented sort of packed (key, position) words beats the key-value argsort of ``key`` rows."""
    kv_segment = _segment(count, length, key, 4, descending)
    if kv_segment is None:
        return True

    def passes(segment, dtype, value_size):
        return tuning.merge_passes(segment, build.kernels(dtype, value_size, False).nv)

    return passes(segment, packed, 0) <= PACKED_PASSES * passes(kv_segment, key, 4)


@functools.cache
def _pack_kernel() -> cupy.ElementwiseKernel:
    return build.fused_kernel("T key, int64 length, int32 row_shift, int32 key_shift, int32 index_shift", "U out",
                              "out = gpusort_pack_position<U, T>(key, i, length, row_shift, key_shift, index_shift);",
                              "gpusort_pack_positions")


@functools.cache
def _unpack_kernel() -> cupy.ElementwiseKernel:
    return build.fused_kernel("U packed, int32 shift, U mask", "int64 position",
                              "position = gpusort_unpack_position<U>(packed, shift, mask);", "gpusort_unpack_positions")


def _with_positions(column: cupy.ndarray, layout: composite.Layout, length: int, first: int) -> cupy.ndarray:
    """``column`` packed as ``layout`` says, in one pass: (the row number,) the key, its position in the row.

    ``first`` is the key's column in ``layout``: 1 with a row number above it, else 0.
    """
    shifts = layout.shifts
    out = cupy.empty(column.size, layout.dtype)
    return _pack_kernel()(column, length, shifts[0] if first else -1, shifts[first], shifts[-1], out)


def _positions_of(packed: cupy.ndarray, layout: composite.Layout) -> cupy.ndarray:
    """The last column of ``layout`` (the positions) out of packed keys, as int64, in one pass."""
    return _unpack_kernel()(packed, layout.shifts[-1], layout.dtype.type((1 << layout.widths[-1]) - 1))


def _segment(count: int, length: int, dtype: np.dtype, value_size: int, descending: bool) -> int | None:
    """The padded row length of a segmented sort of ``count`` rows, or ``None`` where composite keys do better.

    One row is its own segment and needs no pad.  ``value_size`` 4 is an
    argsort: its tile is the one for uint32 positions, which the sort makes
    only for fewer than 2**32 padded keys; past that, composite keys.
    """
    if count == 1:
        return length
    segment = tuning.segment_length(length, build.kernels(dtype, value_size, descending).nv)
    if segment > 2 * length or (value_size and count * segment >= 2**32):
        return None
    return segment


def _segmented(keys: cupy.ndarray, segment: int, descending: bool, positions: bool):
    """Every row of ``(R, L)`` kernel keys sorted on its own by one segmented mergesort.

    Rows are padded to ``segment`` keys with :func:`gpusort.cuda.tuning.last_key`
    (NaN, or the integer that sorts last): the stable sort leaves the pads
    after the row's real keys, so each sorted row's first ``L`` keys are the
    row's.  Returns the ``(R, L)`` sorted keys, or with ``positions`` their
    int64 positions within the row.
    """
    count, length = keys.shape
    if segment > length:
        padded = cupy.empty((count, segment), keys.dtype)
        padded[:, length:] = tuning.last_key(keys.dtype, descending)  # one strided fill of the pads
        padded[:, :length] = keys
        keys = padded  # ours: the sort may use its memory as a ping-pong buffer
    out, pos = dispatch.mergesort(keys.ravel(), descending=descending, positions=positions,
                                 overwrite_input=segment > length,
                                 segment=None if count == 1 else segment)
    if positions:
        return _row_positions(pos, count, segment, length)
    return cupy.ascontiguousarray(out.reshape(count, segment)[:, :length])


def _row_positions(positions: cupy.ndarray, count: int, width: int, length: int) -> cupy.ndarray:
    """``(count, length)`` int64 positions within each row, from the flat positions of a sort of ``(count, width)`` rows."""
    if positions.itemsize == 8:
        positions = positions.view(np.int64)  # uint64 minus int64 would promote to float64
    starts = cupy.arange(0, count * width, width, dtype=np.int64)[:, None]
    return positions.reshape(count, width)[:, :length] - starts  # one kernel: slice, widen, subtract


def _pack(keys: list[cupy.ndarray], descending: bool, scheme: order.Scheme):
    """The composite order keys of ``(R, L)`` key arrays: the row number (when R > 1), then each key's columns.

    Returns the :class:`gpusort.keys.composite.Layout` and the packed keys (1-D,
    or ``(R * L, words)`` uint64 past 64 bits).
    """
    count, length = keys[0].shape
    columns, widths = [], []
    if count > 1:
        columns.append(cupy.arange(count * length, dtype=np.int64) // length)
        widths.append(composite.row_bits(count))
    for k in keys:
        c, w = order.key_columns(k.ravel(), descending, scheme)
        columns += c
        widths += w
    layout = composite.Layout(tuple(widths))
    return layout, layout.pack(columns)


def _lsd_argsort(okeys: cupy.ndarray, layout: composite.Layout) -> cupy.ndarray:
    """Stable positions that sort ``(n, words)`` composite keys, least significant word first.

    A stable argsort of the last word, then for each word before it a stable
    sort of that word gathered through the positions, carrying them: after
    the first word's sort, the positions sort the whole string (LSD radix
    order, with a merge sort per digit).  The last word holds only the
    string's tail, in its top bits: shifted down into the narrowest integer,
    its sort moves fewer bytes and takes the larger tile.
    """
    tail_bits = layout.bits - composite.WORD * (layout.words - 1)
    tail = composite.Layout((tail_bits,)).dtype
    last = (okeys[:, -1] >> np.uint64(composite.WORD - tail_bits)).astype(tail)
    _, positions = dispatch.mergesort(last, positions=True)
    for q in range(layout.words - 2, -1, -1):
        _, positions = dispatch.mergesort(okeys[:, q][positions], positions)
    return positions


def _rows(a: cupy.ndarray, axis: int | None) -> tuple[cupy.ndarray, Callable]:
    """``a`` as contiguous ``(R, L)`` rows along ``axis`` (``None``: one row, flattened), and the map of ``(R, L)`` results back to ``a``'s shape."""
    if axis is None or a.ndim == 1:  # no axes to move: the cheap path (small sorts feel views' host time)
        return cupy.ascontiguousarray(a).reshape(1, a.size), lambda out: out.reshape(a.size)
    moved = cupy.moveaxis(a, axis, -1)
    rows = cupy.ascontiguousarray(moved).reshape(math.prod(moved.shape[:-1]), a.shape[axis])
    return rows, lambda out: cupy.moveaxis(out.reshape(moved.shape), -1, axis)


def _kernel_keys(x: cupy.ndarray) -> cupy.ndarray:
    """Real keys as a kernel key type: bool travels as uint8 (False < True)."""
    return x.view(np.uint8) if x.dtype == np.bool_ else x


# --- checking user input ------------------------------------------------------------------


def _axis(axis, ndim: int) -> int | None:
    """``axis`` in ``[0, ndim)``, ``None`` as is, or NumPy's AxisError naming it and ``ndim``."""
    if axis is None:
        return None
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an integer or None, not {type(axis).__name__}") from None
    if not -ndim <= axis < ndim:
        fix = "pass axis=None" if ndim == 0 else f"pass -{ndim} <= axis < {ndim}, or axis=None to flatten"
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension {ndim}: {fix}")
    return axis % ndim


def _check_kind(kind, stable) -> None:
    if kind is not None and stable is not None:
        raise ValueError("kind and stable cannot both be given (NumPy refuses them together too): "
                         "pass one of them; gpusort's sort is stable either way")
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"kind={kind!r} is not a sort kind: pass None or one of {', '.join(_KINDS)} "
                         "(each runs gpusort's stable merge sort)")


def _check_keys(x, name: str, complex_ok: bool = False) -> None:
    """A TypeError naming ``name`` and the fix unless ``x`` is a CuPy array of a key dtype."""
    _check_cupy(x, name)
    dtype = np.dtype(np.uint8) if x.dtype == np.bool_ else x.dtype
    if dtype not in tuning.KEY_TYPES and not (complex_ok and dtype in _COMPLEX):
        supported = _SUPPORTED.replace(" and", ",") + " and complex64/128" if complex_ok else _SUPPORTED
        raise TypeError(
            f"{name} has dtype {x.dtype}, which gpusort.gpu cannot sort; key dtypes are "
            f"{supported} (convert first, e.g. {name.split()[0]}.astype('float64'))"
        )


def _check_lexsort_keys(keys) -> list[cupy.ndarray]:
    """lexsort's keys as a list of CuPy arrays of one shape, or the error that says the fix."""
    if isinstance(keys, cupy.ndarray):
        if keys.ndim == 0:
            raise ValueError("keys is a 0-D array; lexsort takes a sequence of key arrays or an array "
                             "whose first axis indexes the keys: pass [keys] (one key)")
        keys = list(keys)  # a 1-D array is keys of one element each, as NumPy takes it
    elif isinstance(keys, np.ndarray) or not isinstance(keys, Sequence):
        kind = f"{type(keys).__module__}.{type(keys).__qualname__}"
        raise TypeError(f"keys must be a sequence of cupy.ndarray or a cupy.ndarray, not {kind}: "
                        "move the keys to the GPU first (cupy.asarray(keys))")
    if not len(keys):
        raise ValueError("keys is empty: lexsort needs at least one key array")
    for i, k in enumerate(keys):
        _check_keys(k, f"keys[{i}]", complex_ok=True)
        if k.shape != keys[0].shape:
            raise ValueError(f"keys[{i}] has shape {k.shape} but keys[0] has {keys[0].shape}: "
                             "all keys must have one shape (broadcast them first)")
    return list(keys)


def _check_cupy(x, name: str) -> None:
    if not isinstance(x, cupy.ndarray):
        kind = f"{type(x).__module__}.{type(x).__qualname__}"
        raise TypeError(
            f"{name} must be a cupy.ndarray, not {kind}: move it to the GPU first "
            f"(cupy.asarray({name.split()[0]}))"
        )


def _keys(x, name: str) -> cupy.ndarray:
    """``x`` as contiguous 1-D keys of a kernel key type, or a TypeError/ValueError saying the fix."""
    _check_keys(x, name)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not of shape {x.shape}: sort {name.split()[0]}.ravel()")
    return _kernel_keys(cupy.ascontiguousarray(x))


def _values(x, name: str, size: int, keys_name: str) -> cupy.ndarray:
    _check_cupy(x, name)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, not of shape {x.shape}")
    if x.size != size:
        raise ValueError(
            f"{name} has {x.size} elements but {keys_name} has {size}: pass one value per key"
        )
    return cupy.ascontiguousarray(x)


def _same_dtype(a, b, a_name: str, b_name: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(
            f"{a_name} has dtype {a.dtype} but {b_name} has {b.dtype}: merge arrays of one "
            f"dtype (e.g. {b_name}.astype({a_name}.dtype))"
        )


def _bits(values: cupy.ndarray) -> cupy.ndarray:
    """Values as the unsigned integers of their width: the kernels only move them."""
    return values.view(tuning.VALUE_DTYPES[values.dtype.itemsize])
