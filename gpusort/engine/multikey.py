"""Sorts by composite keys over Dask arrays: several keys (lexsort), complex keys, carried records.

The key arrays' order-key columns (:func:`gpusort.keys.order.key_columns`) are
packed into one composite order key per element (:mod:`gpusort.keys.composite`)
by a blockwise task, and the composite keys go through the same three
phases as any key (:func:`gpusort.engine.graph.sort`): exact co-rank splitters,
one merge per block of output chunks.  The keys are compared ascending: directions are
already in the columns.  What comes out is what the caller carried:
positions (``lexsort``, ``argsort``), the keys themselves (a complex
``sort``: tied order keys do not decode, so the input's bits travel as
values), or records of several arrays (:func:`records`).
"""

from __future__ import annotations

from typing import Any, Sequence

import dask.array as da
import numpy as np

from gpusort.arrays import namespace
from gpusort.engine import graph
from gpusort.keys import composite, order


def layout_of(dtypes: Sequence[np.dtype], descending: bool, row_bits: int = 0) -> composite.Layout:
    """The layout of composite keys over keys of ``dtypes`` (primary first), after a row column of ``row_bits``."""
    widths = [row_bits] if row_bits else []
    for dtype in dtypes:
        widths += order.key_widths(dtype, descending)
    return composite.Layout(tuple(widths))


def pack(layout: composite.Layout, descending: bool, *blocks: Any, rows: Any = None,
         scheme: order.Scheme = "tied") -> Any:
    """Composite order keys of aligned key blocks (primary first), flattened; ``rows``: a row column first.

    ``scheme="exact"`` keeps every bit of real keys, for sorts that decode
    the keys back instead of carrying them.
    """
    columns = [] if rows is None else [rows.ravel()]
    for block in blocks:
        columns += order.key_columns(block.ravel(), descending, scheme)[0]
    return layout.pack(columns)


def composite_keys(keys: Sequence[da.Array], descending: bool) -> da.Array:
    """Composite order keys of 1-D key arrays of one chunking, primary first, as a Dask array.

    1-D when the layout fits one integer, else ``(n, words)`` with one chunk across.
    """
    layout = layout_of([k.dtype for k in keys], descending)
    if layout.words == 1:
        return da.map_blocks(pack, layout, descending, *keys, dtype=layout.dtype)
    return da.map_blocks(pack, layout, descending, *keys, dtype=np.uint64, new_axis=1,
                         chunks=(keys[0].chunks[0], (layout.words,)))


def sort(okeys: da.Array, values: da.Array | None, *, positions: bool, chunk: int | tuple[int, ...], backend: Any
         ) -> tuple[da.Array, da.Array | None]:
    """Composite keys sorted ascending and stably, with ``values`` (or their positions) carried along.

    Returns the sorted composite keys and the carried values, in chunks of
    ``chunk`` (a size, or the sizes); the keys' chunks hold 2-D rows where the keys are 2-D.
    """
    return graph.sort(okeys, values, descending=False, backend=backend, chunk=chunk, positions=positions)


def records(arrays: Sequence[da.Array]) -> da.Array:
    """Several 1-D arrays of one chunking as one ``(n, bytes)`` uint8 array of records, to carry as values.

    NumPy and CuPy alike: CuPy has no structured dtypes, so a record is bytes.
    """
    width = sum(a.dtype.itemsize for a in arrays)
    return da.map_blocks(record_rows, *arrays, dtype=np.uint8, new_axis=1, chunks=(arrays[0].chunks[0], (width,)))


def fields(recs: da.Array, dtypes: Sequence[np.dtype]) -> tuple[da.Array, ...]:
    """The arrays :func:`records` packed, back from sorted records (chunks declared 1-D, blocks 2-D)."""
    out, at = [], 0
    for dtype in dtypes:
        out.append(recs.map_blocks(_field, at, np.dtype(dtype), dtype=dtype))
        at += np.dtype(dtype).itemsize
    return tuple(out)


def record_rows(*blocks: Any) -> Any:
    """Aligned 1-D blocks as one ``(n, bytes)`` uint8 block of records: :func:`records`' task.

    Examples
    --------
    >>> record_rows(np.array([1, 2], np.uint8), np.array([3, 4], np.uint16)).tolist()
    [[1, 3, 0], [2, 4, 0]]
    """
    xp = namespace(blocks[0])
    n = len(blocks[0])
    return xp.concatenate([xp.ascontiguousarray(b).view(np.uint8).reshape(n, b.dtype.itemsize) for b in blocks],
                          axis=1)


def _field(rec: Any, at: int, dtype: np.dtype) -> Any:
    # Always a copy: a record's field sits at any byte offset, and a GPU
    # reading an int32 or float64 view of a misaligned address faults.
    return rec[:, at:at + dtype.itemsize].copy().view(dtype).reshape(len(rec))
