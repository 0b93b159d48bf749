"""Selection: the ``k`` largest or smallest keys of a Dask array, without sorting it.

A tree reduction (Dask's ``da.reduction``): every chunk keeps its ``|k|``
extreme *order keys* (:mod:`gpusort.order`, scheme ``"exact"``), neighbours'
survivors are selected again, and the last ``|k|`` are sorted and decoded.
Order keys make the selection an integer one and NaN the largest key, as
NumPy's order has it; being a bijection, equal order keys are equal bits, so
the result is exact, in the input's bits, without carrying the elements.

Each selection (:func:`largest`) is a sample select with a three-way
partition: a pivot drawn from a sample of the keys, the keys above it counted
and, unless that already decides, the keys equal to it; then
either every key above it is kept and the rest is the pivot repeated (the
answer), or only the keys above it stay in play, or the keys at or above it
are all in the answer and the search goes on below.  The pivot is picked so
that about ``k`` plus a few standard deviations of keys lie above it, so one
round over the chunk usually leaves a few thousand candidates for a
sort.  A round counts and compacts the keys above the pivot in one pass
on the GPU (CuPy chunks: a fused kernel where each such key takes a slot by
an atomic; elsewhere a compare, a sum and a boolean index): O(N) work plus
a small sort, where a partition (``cupy.argpartition``) costs a full sort.
A CuPy chunk's first round reads its raw keys and encodes them in
registers, so the chunk's own order keys are never written: one read of
the chunk where encoding first would add a write and a read.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import dask.array as da

from gpusort import order
from gpusort.backends import is_cupy, namespace

#: Candidate sets this small are sorted outright.
SMALL = 4096
#: Keys in the sample that picks a pivot: enough that on a chunk of 2**26
#: keys and ``k = 100`` the first pivot leaves a few thousand candidates.
SAMPLE = 2**16
#: Most keys the GPU compacts with one atomic slot each (more would queue on it).
ATOMIC_KEYS = 2**20
#: Survivors one combine step takes by default: chunks' ``|k|`` each.
COMBINE_KEYS = 2**20


def largest(okeys: Any, k: int, small: int = SMALL) -> Any:
    """The ``k`` largest of integer order keys ``okeys`` (``1 <= k <= len``), in no order.

    ``small``: candidate sets of at most ``max(small, k)`` keys are sorted
    instead of selected from (a test sets 0 to select all the way).

    Examples
    --------
    >>> import numpy as np
    >>> np.sort(largest(np.array([5, 1, 5, 3, 9, 5], dtype=np.uint8), 3, small=0)).tolist()
    [5, 5, 9]
    """
    xp = namespace(okeys)
    kept = []  # keys known to be in the answer
    # Past 2k candidates a round pays; nearer k the pivot, aimed a few
    # standard deviations above the k-th key, would shave a key or two a round.
    while len(okeys) > max(small, 2 * k) and k > 0:
        pivot = _pivot(okeys[:: _stride(len(okeys))], k, len(okeys))
        above, keys = _above(okeys, pivot, k)
        if keys is None:  # too many for one pass's room: a misleading sample
            keys = okeys[okeys > pivot]
        if above >= k:  # the answer lies above the pivot
            okeys = keys
            continue
        equal = int((okeys == pivot).sum())
        ties = xp.repeat(pivot.reshape(1), min(equal, k - above))
        kept += [keys, ties]  # all above, then as many of the pivot's ties as fit
        if above + equal >= k:
            k = 0
        else:  # the rest lies below
            okeys, k = okeys[okeys < pivot], k - above - equal
    if k > 0:
        kept.append(xp.sort(okeys)[len(okeys) - k:])
    return kept[0] if len(kept) == 1 else xp.concatenate(kept)


def _above(okeys: Any, pivot: Any, k: int) -> tuple[int, Any]:
    """How many keys lie above ``pivot``, and those keys in no order (``None`` past :data:`ATOMIC_KEYS` on the GPU).

    On the GPU, for ``k`` up to :data:`ATOMIC_KEYS`, one fused pass counts
    and compacts them (an atomic slot per key); the count decides, so a pivot
    that leaves too many costs a second pass, never a wrong answer.  Larger
    ``k`` would queue that many atomics on one counter: a compare, a sum and
    a boolean index instead.
    """
    if is_cupy(okeys) and k <= ATOMIC_KEYS:
        from gpusort.backends.cupy import encoded_beyond

        return encoded_beyond(okeys, pivot, False, ATOMIC_KEYS)  # integer order keys are their own
    mask = okeys > pivot
    return int(mask.sum()), okeys[mask]


def _pivot(sample: Any, k: int, n: int) -> Any:
    """A key with about ``k`` plus three standard deviations of ``n`` keys above it, as a 0-d array.

    Read from ``sample``, an evenly strided sample of the keys (the GPU path
    samples raw keys and encodes only the sample), sorted here: sorted and
    reversed input give exact quantiles, and a sample that misleads costs
    another round, never a wrong answer.
    """
    sample = namespace(sample).sort(sample)
    expected = k * len(sample) / n  # sample keys above the k-th largest key
    rank = min(len(sample) - 1, math.ceil(expected + 3 * math.sqrt(expected) + 1))
    return sample[len(sample) - 1 - rank]


def _stride(n: int) -> int:
    """The sample's stride over ``n`` keys: about :data:`SAMPLE` keys."""
    return max(1, n // SAMPLE)


def extremes(block: Any, k: int, axis: Any = None, keepdims: bool = True) -> Any:
    """The order keys of ``block``'s ``k`` largest elements (``k < 0``: the ``-k`` smallest), in no order.

    Chunk step of :func:`gpusort.topk`'s reduction, on the input's elements.
    CuPy chunks take :func:`_encoded_beyond` first, which never writes the
    chunk's order keys: only the candidates'.
    """
    if is_cupy(block) and len(block) > max(SMALL, 2 * abs(k)) and abs(k) <= ATOMIC_KEYS:
        candidates = _encoded_beyond(block, k)
        if candidates is not None:
            return survivors(candidates, k)
    return survivors(order.encode(block, False, "exact"), k)


def _encoded_beyond(block: Any, k: int) -> Any:
    """Order keys of a few more than ``block``'s ``|k|`` extremes, in one pass over its raw keys; ``None`` if the pivot missed.

    The first round of :func:`largest` without encoding the chunk: the
    sample alone is encoded, and the fused pass
    (:func:`gpusort.backends.cupy.encoded_beyond`) encodes each key in
    registers, compares it with the pivot and keeps the order keys beyond it.
    A pivot that leaves fewer than ``|k|`` keys beyond it, or more than the
    pass has room for, returns ``None``: the caller then encodes the chunk
    and selects as on any backend.
    """
    from gpusort.backends.cupy import encoded_beyond

    n = len(block)
    sample = order.encode(block[:: _stride(n)], False, "exact")
    pivot = _pivot(sample if k > 0 else ~sample, abs(k), n)  # the smallest are the largest complemented
    count, candidates = encoded_beyond(block, pivot, k < 0, ATOMIC_KEYS)
    return candidates if candidates is not None and count >= abs(k) else None


def survivors(okeys: Any, k: int, axis: Any = None, keepdims: bool = True) -> Any:
    """The ``k`` largest (``k < 0``: ``-k`` smallest) of order keys, in no order: the combine step."""
    if abs(k) >= len(okeys):
        return okeys
    # The smallest keys are the largest of the complemented keys.
    return largest(okeys, k) if k > 0 else ~largest(~okeys, -k)


def ranked(okeys: Any, k: int, dtype: Any, axis: Any = None, keepdims: bool = True) -> Any:
    """:func:`survivors`, sorted and decoded to ``dtype``: largest first for ``k > 0``, smallest first for ``k < 0``.

    The aggregate step of :func:`gpusort.topk`'s reduction.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, np.nan, 3.0, -0.0, 2.0])
    >>> ranked(order.encode(x, False, "exact"), 2, x.dtype)
    array([nan,  3.])
    """
    xp = namespace(okeys)
    values = order.decode(xp.sort(survivors(okeys, k)), dtype, False, "exact")
    return values[::-1] if k > 0 else values


def topk(x: da.Array, k: int, split_every: int | None) -> da.Array:
    """The reduction graph of :func:`gpusort.topk` over the 1-D keys ``x``."""
    if split_every is None:  # no more than the chunks: Dask builds a tuple of split_every slots per step
        split_every = max(2, min(x.numblocks[0], COMBINE_KEYS // abs(k)))
    return da.reduction(
        x, chunk=functools.partial(extremes, k=k), combine=functools.partial(survivors, k=k),
        aggregate=functools.partial(ranked, k=k, dtype=x.dtype), axis=0, keepdims=True,
        dtype=x.dtype, split_every=split_every, output_size=abs(k), concatenate=True,
        meta=x._meta, name="topk",
    )
