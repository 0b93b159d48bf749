"""Search: positions of needles in a sorted Dask array, over all its chunks.

In a sorted array the chunks that end before a needle count whole, and only
the first chunk that does not is searched: a needle's position is that
chunk's offset plus one binary search in it.  The graph routes each needle
to its chunk and back, so every needle is searched once and moves twice:

``last-``    the last key of every non-empty chunk (tiny tasks);
``route-``   per needle block: which chunk each needle goes to
             (``searchsorted`` over the chunks' last keys, with the caller's
             ``side``, so NaN follows NumPy's order), the needles cut by chunk;
``within-``  per chunk: its needles from every block, searched in the chunk
             (``searchsorted`` of the chunk's array module: CuPy chunks search
             on their GPU);
``found-``   per needle block: the offsets plus the searches, in place.

Tasks grow with chunks plus needle blocks.  Each ``within-`` task reads every
``route-`` result whole, and each ``found-`` every ``within-`` result: in one
process those are references, but across workers each needle block travels
to every chunk's worker (needles × chunks bytes).  A getitem task per (block,
chunk) pair would move each needle once, at the price of that many tasks.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort.arrays import namespace, to_numpy


def _last(chunk: Any) -> Any:
    return to_numpy(chunk[-1:])


def _route(needles: Any, side: str, chunk_ids: list[int], offsets: list[int], *lasts: Any) -> tuple:
    """(base, parts): every needle's count of elements in the chunks that end before it, and per chunk
    in ``chunk_ids`` the (flat positions, needles) to search in that chunk."""
    xp = namespace(needles)
    flat = needles.reshape(-1)
    edges = np.concatenate(lasts) if lasts else np.empty(0, flat.dtype)
    k = np.searchsorted(edges, to_numpy(flat), side=side)  # chunks wholly before each needle
    # Offset of the chunk each needle goes to; past the last chunk, the whole length.
    base = np.asarray(offsets, dtype=np.int64)[np.asarray(chunk_ids + [-1])[k]]
    # Needles grouped by chunk: one sort of the chunk numbers, not one scan per chunk,
    # and one upload and one gather of the grouping (GPU needles), sliced per chunk.
    by_chunk = np.argsort(k, kind="stable")
    cuts = np.searchsorted(k, np.arange(len(chunk_ids) + 1), sorter=by_chunk).tolist()
    at = xp.asarray(by_chunk)
    grouped = flat[at]
    parts = [(at[a:b], grouped[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    return xp.asarray(base), parts


def _within(chunk: Any, i: int, side: str, *routes: tuple) -> list:
    """The local positions, in ``chunk``, of its needles from every route (the ``i``-th part of each)."""
    xp = namespace(chunk)
    return [(at, xp.searchsorted(chunk, needles, side=side)) for at, needles in (r[1][i] for r in routes)]


def _found(shape: tuple, route: tuple, b: int, *within: list) -> Any:
    counts = route[0].copy()
    for found in within:
        at, local = found[b]  # at: positions in the needles' own array module
        counts[at] += local.astype(np.int64)
    return counts.reshape(shape)


def searchsorted(x: da.Array, needles: da.Array, side: str) -> da.Array:
    """The graph of :func:`gpusort.searchsorted`: needles routed to the one chunk each must search."""
    token = tokenize(x, needles, side)
    offsets = np.concatenate(([0], np.cumsum(x.chunks[0]))).tolist()
    chunk_ids = [c for c, size in enumerate(x.chunks[0]) if size]
    last, route, within, found = (f"{what}-{token}" for what in ("last", "route", "within", "found"))
    blocks = list(np.ndindex(*needles.numblocks))
    shapes = [tuple(needles.chunks[d][i] for d, i in enumerate(b)) for b in blocks]
    dsk: dict = {(last, c): (_last, (x.name, c)) for c in chunk_ids}
    for b, index in enumerate(blocks):
        dsk[(route, b)] = (_route, (needles.name, *index), side, chunk_ids, offsets, *[(last, c) for c in chunk_ids])
    for i, c in enumerate(chunk_ids):
        dsk[(within, i)] = (_within, (x.name, c), i, side, *[(route, b) for b in range(len(blocks))])
    for b, index in enumerate(blocks):
        dsk[(found, *index)] = (_found, shapes[b], (route, b), b, *[(within, i) for i in range(len(chunk_ids))])
    graph = HighLevelGraph.from_collections(found, dsk, dependencies=[x, needles])
    return da.Array(graph, found, needles.chunks, meta=needles._meta.astype(np.int64))
