"""Unique keys of a Dask array from one sort: ``np.unique``'s results, lazily.

The sorted keys (with their input positions when the index or the inverse is
asked for: one stable :func:`gpusort.sort_by_key`) fall into groups of equal
keys, equal as ``np.unique`` compares them: ``-0.0 == 0.0``, and every NaN
(NaT) one group -- the ``"tied"`` order keys of :mod:`gpusort.keys.order`.  Every
chunk marks where its groups start, its first key compared with the last key
of the chunks before it, which a chain of tiny tasks carries past empty
chunks.  Then, per chunk:

* values: the first key of each group that starts there;
* index: the first input position of the group (the stable sort puts the
  first occurrence first);
* counts: the distance to the next group's start, which a chain from the
  right carries back from later chunks.

The inverse is each sorted key's group number (a cumulative sum of the
starts), put back in input order by a second sort: the positions are a
permutation, so sorting them with the group numbers as values scatters
them.  Every task holds one chunk; the graph grows with the chunks.
"""

from __future__ import annotations

import math
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort.arrays import namespace, to_numpy
from gpusort.keys import order


def _last_key(block: Any) -> Any:
    """The tied order key of ``block``'s last element, or ``None`` for an empty block."""
    return to_numpy(order.encode(block[-1:], False, "tied"))[0] if len(block) else None


def _carry(default: Any, found: Any) -> Any:
    """``found``, or ``default`` where the chunk had none: what a chain of chunks passes on."""
    return default if found is None else found


def _group_starts(block: Any, before: Any) -> Any:
    """Where groups of equal keys start in ``block``; ``before`` is the last key before it (or ``None``)."""
    xp = namespace(block)
    okeys = order.encode(block, False, "tied")
    starts = xp.empty(len(block), dtype=bool)
    if len(block):
        starts[0] = before is None or bool(okeys[0] != before)
        starts[1:] = okeys[1:] != okeys[:-1]
    return starts


def _first_start(starts: Any, offset: int) -> int | None:
    """The global position of the first group start in a chunk, or ``None``."""
    found = namespace(starts).flatnonzero(starts)
    return offset + int(found[0]) if len(found) else None


def _counts(starts: Any, offset: int, end: int) -> Any:
    """Sizes of the groups that start in a chunk; ``end`` is where the next group after it starts."""
    xp = namespace(starts)
    at = xp.flatnonzero(starts) + offset
    return xp.diff(xp.concatenate([at, xp.asarray([end], dtype=at.dtype)])).astype(np.int64)


def _pick(block: Any, starts: Any) -> Any:
    return block[starts]


def unique(keys: da.Array, positions: da.Array | None, resort: Any, *, return_index: bool,
           return_inverse: bool, return_counts: bool) -> tuple[da.Array, ...]:
    """The graph of :func:`gpusort.unique` over sorted ``keys`` (and their input ``positions``).

    ``resort(keys, values, chunk)`` is the stable sort by key that puts the
    group numbers back in input order.  Returns the unique values, then the
    index, inverse and counts asked for, in ``np.unique``'s order.
    """
    token = tokenize(keys, positions, return_index, return_inverse, return_counts)
    nblocks = keys.numblocks[0]
    offsets = np.concatenate(([0], np.cumsum(keys.chunks[0]))).tolist()
    n = offsets[-1]
    last, before, starts = "unique-last-" + token, "unique-before-" + token, "unique-starts-" + token
    dsk: dict = {}
    for j in range(nblocks):
        dsk[(last, j)] = (_last_key, (keys.name, j))
        # The last key of the chunks before chunk j: chunk j-1's, or carried past it if empty.
        dsk[(before, j)] = None if j == 0 else (_carry, (before, j - 1), (last, j - 1))
        dsk[(starts, j)] = (_group_starts, (keys.name, j), (before, j))
    graph = HighLevelGraph.from_collections(starts, dsk, dependencies=[keys])
    flags = da.Array(graph, starts, keys.chunks, meta=keys._meta.astype(bool))
    unknown = ((math.nan,) * nblocks,)

    def picked(source: da.Array, label: str) -> da.Array:
        return da.map_blocks(_pick, source, flags, chunks=unknown, dtype=source.dtype,
                             meta=source._meta, name=f"unique-{label}-{token}")

    out = [picked(keys, "values")]
    if return_index:
        out.append(picked(positions, "index"))
    if return_inverse:
        groups = da.cumsum(flags.astype(np.int64)) - 1
        out.append(resort(positions, groups, max(keys.chunks[0]))[1])
    if return_counts:
        first, after, counts = "unique-first-" + token, "unique-after-" + token, "unique-counts-" + token
        dsk = {}
        for j in reversed(range(nblocks)):
            dsk[(first, j)] = (_first_start, (starts, j), offsets[j])
            # Where the next group after chunk j starts: chunk j+1's first start, or carried from further on.
            dsk[(after, j)] = n if j == nblocks - 1 else (_carry, (after, j + 1), (first, j + 1))
            dsk[(counts, j)] = (_counts, (starts, j), offsets[j], (after, j))
        graph = HighLevelGraph.from_collections(counts, dsk, dependencies=[flags])
        out.append(da.Array(graph, counts, unknown, meta=keys._meta.astype(np.int64)))
    return tuple(out)
