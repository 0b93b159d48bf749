"""GPU memory budgets: what fits, and sorting or merging host data in pieces that fit.

The CuPy backend sorts host-resident (NumPy) chunks on a GPU that may hold
far less than the data.  Every GPU step it takes -- sort one piece, merge one
range of output ranks -- has a *footprint*, the most GPU memory it can hold
at once, and this module sizes the steps so that the footprint stays within
the budget:

``sort_bytes(n)``
    staged keys (and values), which the mergesort reuses as one of its two
    ping-pong buffers: ``2 * n * (key + value bytes)``, plus the merge-path
    partition arrays; a keys-only sort also holds its bucket pass's byte a
    key and count tables (:func:`gpusort.cuda.buckets.bucket_pass`).
``merge_bytes(n)``
    the staged slices and one more buffer: the pairwise merge tree's levels
    ping-pong between the two (level 2 on writes over the staged slices),
    again ``2 * n * (key + value bytes)``.

While a step's result goes down to the host it holds only the result
(``n * (key + value bytes)``): the backend then lowers its reservation, so
that the next step's upload and sort overlap that download.

A chunk whose sort does not fit is cut into sub-runs that do; each is sorted
on the GPU and lands in host memory, and the sub-runs are merged.  A merge
whose pieces do not fit is done in *ranges of output ranks*: the exact split
vectors of ranks ``0, m, 2m, ...`` over the host pieces come from
:mod:`gpusort.keys.corank` (regular samples, windows, refine), so every range is
exactly ``m`` elements, each a small merge on the GPU written straight into
its place in the host output.  Ties keep (piece, position) order, so the
result is the stable merge, equal to one merge of everything.

Everything here is plain Python and NumPy; the device work is passed in as
a :class:`Device`, so the planning and the piecewise algorithms are tested
on any machine (``tests/test_budget.py``) with a NumPy stand-in.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, Sequence

import numpy as np

from gpusort.keys import corank

Pair = tuple[Any, Any]

#: Share of the budget the steps are planned to fill; the rest absorbs the pool's
#: rounding and fragmentation (the pool's limit is the whole budget).  After
#: earlier sorts in the same worker, a pool split into blocks of other sizes
#: can meet its limit with a step's bytes free in all but one piece, so the
#: plan leaves a quarter (benchmarks/NOTES.md has the case that set it).
PLAN_FRACTION = 0.75
#: Bytes every GPU step may hold beyond its arrays: allocator rounding,
#: partition arrays of tiny pieces, the merge tree's per-level scratch.
FIXED_BYTES = 4 * 2**20
#: Per element, the merge passes' partition and sample arrays (up to 20 int64 per
#: tile of >= 128 x 11 keys: about 0.11 bytes) and rounding.
SLACK_PER_ELEMENT = 1 / 4


def parse_budget(budget: int | str | None, argname: str = "gpu_memory_budget") -> int | None:
    """``budget`` in bytes: an int, a string such as ``"2GiB"`` or ``"512MB"``, or ``None``.

    Examples
    --------
    >>> parse_budget("2GiB"), parse_budget(10**9), parse_budget(None)
    (2147483648, 1000000000, None)
    """
    if budget is None:
        return None
    if isinstance(budget, str):
        from dask.utils import parse_bytes

        try:
            budget = parse_bytes(budget)
        except ValueError as exc:
            raise ValueError(
                f"{argname}={budget!r} is not a size; write e.g. '2GiB', '512MB' or an int of bytes"
            ) from exc
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"{argname} must be an int of bytes or a string like '2GiB'; got {budget!r}")
    if budget < 2 * FIXED_BYTES:
        raise ValueError(
            f"{argname}={budget} bytes is too small to sort anything on a GPU; "
            f"give at least {2 * FIXED_BYTES} bytes (e.g. '64MiB')"
        )
    return int(budget)


#: A keys-only sort's bucket pass holds each key's bucket, a byte.  Its
#: tables (an int32 count and an int64 base for 256 buckets by at most 1024
#: spans, 3 MiB) fit the slack and fixed bytes of the 64 MiB of keys or
#: more it needs (gpusort.cuda.tuning.BUCKET_MIN_BYTES).
BUCKET_BYTES_PER_KEY = 1


def sort_bytes(n: int, key_bytes: int, value_bytes: int = 0) -> int:
    """Most GPU memory sorting ``n`` staged keys (and values) holds at once."""
    buckets = 0 if value_bytes else n * BUCKET_BYTES_PER_KEY
    return 2 * n * (key_bytes + value_bytes) + buckets + math.ceil(n * SLACK_PER_ELEMENT) + FIXED_BYTES


def whole_bytes(n: int, key_bytes: int, value_bytes: int = 0, temporaries: int = 0) -> int:
    """Most GPU memory one step that uploads, encodes, sorts and decodes ``n`` keys (and values) holds at once.

    :func:`sort_bytes`, and ``temporaries`` arrays of the keys' size: the
    new arrays that encoding and decoding order keys on the GPU make while
    their inputs live (:func:`gpusort.keys.order.encode_temporaries`).
    """
    return sort_bytes(n, key_bytes, value_bytes) + temporaries * n * key_bytes


def merge_bytes(n: int, key_bytes: int, value_bytes: int = 0) -> int:
    """Most GPU memory merging pieces of ``n`` staged keys (and values) in all holds at once.

    The staged pieces and one more buffer: the merge tree's levels ping-pong
    between them.
    """
    return 2 * n * (key_bytes + value_bytes) + math.ceil(n * SLACK_PER_ELEMENT) + FIXED_BYTES


def largest_fit(cost, budget: int) -> int:
    """The largest ``n`` with ``cost(n) <= budget`` (``cost`` grows with ``n``); 0 if none.

    Examples
    --------
    >>> largest_fit(lambda n: 10 * n + 5, 100)
    9
    """
    if cost(1) > budget:
        return 0
    lo, hi = 1, 2
    while cost(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # cost(lo) <= budget < cost(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= budget else (lo, mid)
    return lo


def piece_bounds(n: int, most: int) -> list[tuple[int, int]]:
    """``[a, b)`` bounds of the fewest balanced pieces of ``n`` with at most ``most`` each.

    Examples
    --------
    >>> piece_bounds(10, 4)
    [(0, 3), (3, 6), (6, 10)]
    """
    if most < 1:
        raise ValueError(f"most must be at least 1, got {most}")
    count = max(1, -(-n // most))
    edges = [n * i // count for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:]))


def range_splits(pieces: Sequence[np.ndarray], step: int) -> np.ndarray:
    """Split vectors of output ranks ``0, step, 2*step, ..., n`` over sorted host ``pieces``.

    Row ``i`` says how many elements of each piece come before rank
    ``i * step`` in the strict order (key, piece, position): output range
    ``i`` merges ``pieces[k][s[i, k]:s[i + 1, k]]`` for every ``k``.

    Examples
    --------
    >>> range_splits([np.array([1, 3, 5]), np.array([2, 4, 6])], 4).tolist()
    [[0, 0], [2, 2], [3, 3]]
    """
    lengths = [len(p) for p in pieces]
    ranks = corank.output_ranks(sum(lengths), step)
    inner = ranks[1:-1]
    if not len(inner):
        return corank.split_vectors(lengths, inner)
    # The splitter phases of gpusort.engine.graph, in one process.
    g = corank.sample_stride(int(ranks[-1]), len(pieces), len(inner))
    lo, hi = corank.plan_windows([p[::g] for p in pieces], lengths, inner, g)
    windows = [
        np.concatenate([p[a:b] for a, b in zip(lo[:, k].tolist(), hi[:, k].tolist())])
        for k, p in enumerate(pieces)
    ]
    return corank.split_vectors(lengths, inner, (lo, hi), windows)


class Device(Protocol):
    """The GPU steps the piecewise algorithms need; each must fit its footprint.

    Host arrays in, host arrays out: a step stages its inputs, works, and
    writes its result into the host arrays it is given.
    """

    def empty(self, n: int, dtype: Any) -> np.ndarray:
        """A host array for results."""

    def sort(self, keys: np.ndarray, values: np.ndarray | None, out: Pair) -> None:
        """Sort one piece stably into ``out = (keys, values)``."""

    def merge(self, pieces: Sequence[Pair], out: Pair) -> None:
        """Merge sorted pieces stably (ties in piece order) into ``out``."""


def sort_within(keys: np.ndarray, values: np.ndarray | None, budget: int, device: Device) -> Pair:
    """Stable sort of host ``keys`` (and ``values``) whose GPU steps fit ``budget`` bytes.

    One step if the whole sort fits; otherwise sub-runs that fit, each sorted
    into host memory, then :func:`merge_within`.
    """
    kb, vb = keys.dtype.itemsize, 0 if values is None else values.dtype.itemsize
    most = largest_fit(lambda n: sort_bytes(n, kb, vb), budget)
    _check_fits(most, budget, "sort")
    out = _empty_like(device, len(keys), keys, values)
    bounds = piece_bounds(len(keys), most)
    if len(bounds) == 1:
        device.sort(keys, values, out)
        return out
    for a, b in bounds:
        device.sort(keys[a:b], None if values is None else values[a:b], _cut(out, a, b))
    return merge_within([_cut(out, a, b) for a, b in bounds], budget, device)


def merge_within(pieces: Sequence[Pair], budget: int, device: Device) -> Pair:
    """Stable merge of sorted host ``pieces`` whose GPU steps fit ``budget`` bytes.

    One step if everything fits; otherwise ranges of ``m`` output ranks, ``m``
    the most that fits, each cut from every piece at its exact split.
    """
    keys0, values0 = pieces[0]
    kb, vb = keys0.dtype.itemsize, 0 if values0 is None else values0.dtype.itemsize
    most = largest_fit(lambda n: merge_bytes(n, kb, vb), budget)
    _check_fits(most, budget, "merge")
    n = sum(len(k) for k, _ in pieces)
    out = _empty_like(device, n, keys0, values0)
    if n <= most:
        device.merge(pieces, out)
        return out
    splits = range_splits([k for k, _ in pieces], most)
    for i in range(len(splits) - 1):
        part = [_cut(piece, int(a), int(b)) for piece, a, b in zip(pieces, splits[i], splits[i + 1])]
        device.merge(part, _cut(out, i * most, min(n, (i + 1) * most)))
    return out


def _check_fits(most: int, budget: int, what: str) -> None:
    if most < 1:
        raise ValueError(
            f"a GPU memory budget of {budget} bytes cannot {what} even one element; "
            "give a larger gpu_memory_budget"
        )


def _empty_like(device: Device, n: int, keys: np.ndarray, values: np.ndarray | None) -> Pair:
    return device.empty(n, keys.dtype), None if values is None else device.empty(n, values.dtype)


def _cut(pair: Pair, a: int, b: int) -> Pair:
    keys, values = pair
    return keys[a:b], None if values is None else values[a:b]
