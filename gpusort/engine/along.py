"""Sorting an N-D Dask array along one axis: every row on its own, in three shapes of graph.

With the sort axis moved last, a *row* is a 1-D slice along it and a
*block-row* the blocks that share their chunk indices off the axis.

``within``  The axis lies in one chunk: each block sorts its rows (a
            segmented sort: ``np.sort(axis=-1)`` on order keys, or
            :func:`gpusort.gpu.sort` with ``axis=-1``).  One task per block.
``gather``  The axis spans chunks but a row fits one task (the 1-D sort's
            batch, :func:`gpusort.engine.graph.task_bytes`, or :data:`ROW_BLOCKS`
            blocks): one task per group of whole rows, about an input block's
            worth, takes its rows' slices of the block-row's blocks and sorts
            them ``within``, and one task per output block cuts its slices
            from the groups.  Row ``r`` of every block is a known range, so
            cutting rows into groups is an exact, balanced split that needs no
            splitter search, and the graph has two tasks per block however
            the rows fall.  Groups of a block's size keep the input's
            parallelism and memory per task; larger groups run slower
            (benchmarks/NOTES.md).
``corank``  Rows longer than a task: each block-row is sorted as one 1-D
            sort of composite keys ``(row, key)`` (:mod:`gpusort.engine.multikey`),
            the exact co-rank splitters cutting every row at the output
            chunks' edges; a last task per output block takes its rows'
            slices of the merged block-row.  A block-row of one row needs
            neither: it is a 1-D sort whose output chunks are the row's.  The
            graph stays ``O(blocks)`` whatever the number of rows.

Sorts by several keys (``lexsort``) and complex keys take the same three
shapes, with positions (or the keys) carried where the keys cannot be
decoded from their order keys.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort.arrays import namespace
from gpusort.backends import backend_for, get_backend, on_device
from gpusort.engine import graph, multikey
from gpusort.keys import composite, order

#: Rows up to this many input blocks long are gathered whole, even past a task's bytes.
ROW_BLOCKS = 4


def sort_along(keys: Sequence[da.Array], axis: int, *, descending: bool, positions: bool,
               backend: Any) -> da.Array:
    """``keys`` (primary first, one shape and chunking) sorted along ``axis``: the keys, or int64 positions.

    Without ``positions`` there is one key array and the result holds its
    elements sorted along the axis (the input's bits); with ``positions``,
    ``np.argsort(kind="stable")``'s positions along the axis (``np.lexsort``'s
    for several keys, given primary first).
    """
    moved = [da.moveaxis(k, axis, -1) for k in keys]
    x = moved[0]
    if x.numblocks[-1] == 1:  # (empty keys never get here: api._sort_any answers them)
        out = _within(moved, descending, positions, backend)
    else:
        element = sum(k.dtype.itemsize for k in moved) + (8 if positions else 0)
        block_bytes = x.size / math.prod(x.numblocks) * element
        task = graph.task_bytes(int(x.size * element), on_device(x._meta))
        row_bytes = x.shape[-1] * element
        if row_bytes <= max(task, ROW_BLOCKS * block_bytes):
            if axis % x.ndim != x.ndim - 1:
                # Moved blocks are transposed views: made contiguous once per
                # block (fused with the transpose), each group's rows are a view.
                moved = [k.map_blocks(_contiguous, dtype=k.dtype) for k in moved]
            out = _gather(moved, descending, positions, backend, max(1, int(block_bytes // row_bytes)))
        else:
            out = _corank(moved, descending, positions, backend)
    return da.moveaxis(out, -1, axis)


def with_empty_chunks(y: da.Array, chunks: tuple) -> da.Array:
    """``y`` in ``chunks``: its own chunks with empty ones put back; an empty block is a neighbour's empty slice."""
    where = []
    for dim, sizes in zip(y.chunks, chunks):
        index, taken = [], -1
        for size in sizes:
            taken += bool(size)
            index.append((max(taken, 0), not size))
        assert taken == len(dim) - 1, (dim, sizes)
        where.append(index)
    name = "chunks-" + tokenize(y, chunks)
    dsk = {}
    for block in np.ndindex(*[len(sizes) for sizes in chunks]):
        source = [where[d][i] for d, i in enumerate(block)]
        cut = tuple(slice(0, 0) if empty else slice(None) for _, empty in source)
        dsk[(name, *block)] = (operator.getitem, (y.name, *[i for i, _ in source]), cut)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[y])
    return da.Array(graph, name, chunks, meta=y._meta)


def _within(keys, descending, positions, backend):
    dtype = np.dtype(np.int64) if positions else keys[0].dtype
    return da.map_blocks(sort_rows, descending, positions, backend, *keys, dtype=dtype)


def _gather(keys, descending, positions, backend, group_rows):
    """Whole rows sorted in groups of ``group_rows`` per task; each output block cut from its groups."""
    x = keys[0]
    axis_chunks = x.chunks[-1]
    starts = np.concatenate(([0], np.cumsum(axis_chunks))).tolist()
    token = tokenize(*keys, descending, positions, backend, group_rows)
    group_name, out_name = "rowsort-" + token, "rows-" + token
    key_blocks = [_blocks(k) for k in keys]
    dsk = {}
    for row_index in np.ndindex(*x.numblocks[:-1]):
        row_shape = tuple(x.chunks[d][i] for d, i in enumerate(row_index))
        nrows = math.prod(row_shape)
        ngroups = -(-nrows // group_rows)
        edges = [nrows * g // ngroups for g in range(ngroups + 1)]
        inputs = [kb[row_index + (c,)] for kb in key_blocks for c in range(len(axis_chunks))]
        groups = [(group_name, *row_index, g) for g in range(ngroups)]
        for g, key in enumerate(groups):
            dsk[key] = (sort_group, descending, positions, backend, edges[g], edges[g + 1], len(keys), *inputs)
        for j in range(len(axis_chunks)):
            dsk[(out_name, *row_index, j)] = (_cut_rows, row_shape, starts[j], starts[j + 1], *groups)
    out_dtype = np.dtype(np.int64) if positions else x.dtype
    layer = HighLevelGraph.from_collections(out_name, dsk, dependencies=keys)
    return da.Array(layer, out_name, x.chunks, meta=_meta(x, out_dtype))


def sort_group(descending: bool, positions: bool, backend: Any, first: int, stop: int, nkeys: int,
               *blocks: Any) -> Any:
    """Rows ``first … stop-1`` of a block-row, gathered from its blocks (key by key) and sorted.

    ``blocks`` holds each key's blocks along the row in turn, ``nkeys`` keys.
    """
    per_key = len(blocks) // nkeys
    xp = namespace(blocks[0])
    whole = []
    for i in range(nkeys):
        parts = [b.reshape(-1, b.shape[-1])[first:stop] for b in blocks[i * per_key:(i + 1) * per_key]]
        # concatenate alone makes the byte order native: keep the keys' dtype, as the result declares it.
        whole.append(xp.concatenate(parts, axis=1, dtype=parts[0].dtype))
    return sort_rows(descending, positions, backend, *whole)


def _contiguous(block: Any) -> Any:
    return namespace(block).ascontiguousarray(block)


def _cut_rows(shape: tuple, a: int, b: int, *groups: Any) -> Any:
    """One output block: columns ``a … b-1`` of its block-row's sorted groups, stacked and contiguous."""
    xp = namespace(groups[0])
    parts = [g[:, a:b] for g in groups]
    whole = parts[0] if len(parts) == 1 else xp.concatenate(parts, dtype=parts[0].dtype)  # byte order kept
    return xp.ascontiguousarray(whole).reshape(shape + (b - a,))


def sort_rows(descending: bool, positions: bool, backend: Any, *blocks: Any) -> Any:
    """Every row (last axis) of aligned key blocks sorted: the keys, or int64 positions along the row.

    Host blocks on the CuPy backend (a name or a :class:`gpusort.backends.BackendSpec`)
    sort on the GPU in batches of rows within its memory budget and come back
    to the host (datetime64, timedelta64, bytes, str and structured keys,
    which CuPy lacks, sort on the host); other blocks sort where they are.
    """
    done = get_backend(backend).sort_host_rows(blocks, lambda gpu, rows: _sort_rows(gpu, descending, positions, rows))
    if done is not None:
        return done
    return _sort_rows(get_backend(backend_for(blocks[0])), descending, positions, blocks)


def _sort_rows(backend, descending, positions, blocks):
    first = blocks[0]
    if not positions and len(blocks) == 1 and not order.is_composite(first.dtype):
        # Keys whose exact order keys decode back: sort those, bits and all.
        okeys = order.encode(first, descending, "exact")
        return order.decode(backend.sort_rows(okeys), first.dtype, descending, "exact")
    columns = [c for b in blocks for c in order.key_columns(b, descending, "tied")[0]]
    index = backend.lexsort_rows(columns[::-1])
    return index if positions else namespace(first).take_along_axis(first, index, axis=-1)


def _corank(keys, descending, positions, backend):
    x = keys[0]
    nchunks = x.numblocks[-1]
    axis_chunks = x.chunks[-1]
    starts = np.concatenate(([0], np.cumsum(axis_chunks))).tolist()
    length = x.shape[-1]
    decodable = not positions and len(keys) == 1 and not order.is_composite(x.dtype)
    out_dtype = np.dtype(np.int64) if positions else x.dtype
    token = tokenize(*keys, descending, positions, backend)
    out_name = "rows-" + token
    key_blocks = [_blocks(k) for k in keys]
    graphs, dsk = [], {}
    for row_index in np.ndindex(*x.numblocks[:-1]):
        row_shape = tuple(x.chunks[d][i] for d, i in enumerate(row_index))
        nrows = math.prod(row_shape)
        # One row needs no row column: its composite keys are the keys' own.
        row_bits = composite.row_bits(nrows) if nrows > 1 else 0
        layout = multikey.layout_of([k.dtype for k in keys], descending, row_bits)
        okeys, values = _block_row(token, row_index, key_blocks, keys, layout, nrows, axis_chunks, starts,
                                   descending, positions, decodable)
        # One row: the merged chunks are the output blocks.  Several: balanced
        # chunks, and each output block takes its rows' slices of them.
        merge_chunk = axis_chunks if nrows == 1 else max(1, -(-nrows * length // nchunks))
        merged_keys, merged_values = multikey.sort(okeys, values, positions=False, chunk=merge_chunk,
                                                   backend=backend)
        source = merged_keys if decodable else merged_values
        graphs.append(source)
        sources = [(source.name, t) for t in range(source.numblocks[0])]
        ranks = np.concatenate(([0], np.cumsum(source.chunks[0])))
        for j in range(nchunks):
            a, b = starts[j], starts[j + 1]
            needed = _pieces(nrows, length, a, b, ranks)
            used = sorted({t for row in needed for t, _, _ in row}) or [0]  # an empty block: any chunk's type
            dsk[(out_name, *row_index, j)] = (
                _take_rows, layout if decodable else None, x.dtype, descending, row_shape + (b - a,), needed,
                used, *[sources[t] for t in used])
    graph = HighLevelGraph.merge(HighLevelGraph({out_name: dsk}, {out_name: {g.name for g in graphs}}),
                                 *[g.dask for g in graphs])
    return da.Array(graph, out_name, x.chunks, meta=_meta(x, out_dtype))


def _blocks(x: da.Array) -> np.ndarray:
    """The keys of ``x``'s blocks as an object array shaped like its block grid."""
    out = np.empty(x.numblocks, dtype=object)
    for index in np.ndindex(*x.numblocks):
        out[index] = (x.name, *index)
    return out


def _block_row(token, row_index, key_blocks, keys, layout, nrows, axis_chunks, starts, descending, positions,
               decodable):
    """One block-row as 1-D composite keys ``(row, key…)`` and the values to carry, one chunk per block."""
    name = f"rowkeys-{token}-" + "-".join(map(str, row_index))
    vname = f"rowvalues-{token}-" + "-".join(map(str, row_index))
    dsk, vdsk = {}, {}
    wide = layout.words > 1
    for k in range(len(axis_chunks)):
        blocks = [kb[row_index + (k,)] for kb in key_blocks]
        dsk[(name, k, 0) if wide else (name, k)] = (_pack_rows, layout, descending, decodable, *blocks)
        if positions:
            vdsk[(vname, k)] = (_row_positions, blocks[0], starts[k])
        elif not decodable:
            vdsk[(vname, k)] = (_ravel, blocks[0])
    sizes = tuple(nrows * c for c in axis_chunks)
    meta = keys[0]._meta
    chunks = (sizes, (layout.words,)) if wide else (sizes,)
    okeys = da.Array(HighLevelGraph.from_collections(name, dsk, dependencies=keys), name, chunks,
                     meta=_meta(meta, layout.dtype, len(chunks)))
    if not vdsk:
        return okeys, None
    vdtype = np.dtype(np.int64) if positions else keys[0].dtype
    values = da.Array(HighLevelGraph.from_collections(vname, vdsk, dependencies=keys), vname, (sizes,),
                      meta=_meta(meta, vdtype, 1))
    return okeys, values


def _meta(like: Any, dtype: np.dtype, ndim: int | None = None) -> Any:
    # Made anew in ``dtype``: Dask's cast of complex keys' meta to int64 positions warns (ComplexWarning).
    meta = meta_from_array(like, ndim=like.ndim if ndim is None else ndim)
    return namespace(meta).empty(meta.shape, dtype=dtype)


def _pack_rows(layout: composite.Layout, descending: bool, decodable: bool, *blocks: Any) -> Any:
    """Composite keys of one block, row-major: the row number within the block-row, then the keys.

    Keys that are decoded back (``decodable``) are packed exact, every bit kept.
    """
    first = blocks[0]
    xp = namespace(first)
    nrows = math.prod(first.shape[:-1])
    rows = xp.repeat(xp.arange(nrows, dtype=np.uint64), first.shape[-1]) if nrows > 1 else None
    return multikey.pack(layout, descending, *blocks, rows=rows, scheme="exact" if decodable else "tied")


def _row_positions(block: Any, start: int) -> Any:
    xp = namespace(block)
    nrows = math.prod(block.shape[:-1])
    return xp.tile(xp.arange(start, start + block.shape[-1], dtype=np.int64), nrows)


def _ravel(block: Any) -> Any:
    return block.ravel()


def _pieces(nrows: int, length: int, a: int, b: int, ranks: np.ndarray) -> list[list[tuple[int, int, int]]]:
    """For every row, the merged chunks (edges at ``ranks``) and ranges in them that hold its elements ``a … b-1``.

    Examples
    --------
    >>> _pieces(2, 10, 3, 7, np.array([0, 6, 12, 18, 20]))  # row 0: ranks 3..6, chunks 0 and 1; row 1: 13..16
    [[(0, 3, 6), (1, 0, 1)], [(2, 1, 5)]]
    """
    out = []
    for r in range(nrows):
        lo, hi = r * length + a, r * length + b
        row = []
        while lo < hi:
            t = int(np.searchsorted(ranks, lo, side="right")) - 1
            end = min(hi, int(ranks[t + 1]))
            row.append((t, lo - int(ranks[t]), end - int(ranks[t])))
            lo = end
        out.append(row)
    return out


def _take_rows(layout: composite.Layout | None, dtype: np.dtype, descending: bool, shape: tuple, needed: list,
               used: list, *chunks: Any) -> Any:
    """One output block from its rows' slices of the merged block-row; composite keys decoded if ``layout``."""
    where = dict(zip(used, chunks))
    parts = [where[t][lo:hi] for row in needed for t, lo, hi in row] or [chunks[0][:0]]
    flat = parts[0] if len(parts) == 1 else namespace(parts[0]).concatenate(parts, dtype=parts[0].dtype)
    if layout is not None:
        flat = order.decode_column(layout.unpack(flat, len(layout.widths) - 1), dtype, descending, "exact")
    return flat.reshape(shape)
