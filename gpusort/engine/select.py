"""Selection: the ``k`` largest or smallest keys of a Dask array, without sorting it.

A tree reduction along the axis: every chunk keeps its ``|k|`` extreme
*order keys* (:mod:`gpusort.keys.order`, scheme ``"exact"``) in each row, the
survivors of neighbouring chunks are selected again, and the last ``|k|``
are sorted and decoded.  Order keys make the selection an integer one and
NaN the largest key, as NumPy's order has it; being a bijection, equal order
keys are equal bits, so the result is exact, in the input's bits, without
carrying the elements.

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
The first round over a task's batch of 1-D CuPy chunks reads their raw
keys and encodes them in registers, so the chunks' own order keys are never
written (one read of each chunk, where encoding first would add a write and
a read), with one pivot and one count read for the whole batch.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Sequence

import dask.array as da

from gpusort.arrays import namespace
from gpusort.backends import backend_for, get_backend, on_device
from gpusort.keys import order

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
    if on_device(okeys) and k <= ATOMIC_KEYS:  # integer order keys are their own: the pass encodes nothing
        return get_backend(backend_for(okeys)).beyond([okeys], pivot, False, ATOMIC_KEYS)
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


def extremes(blocks: Sequence[Any], k: int, axis: int = 0) -> list[Any]:
    """Parts whose union holds the order keys of the ``k`` largest elements (``k < 0``: the ``-k`` smallest) of ``blocks`` joined along ``axis``.

    Chunk step of :func:`gpusort.topk`'s reduction, on a batch of input
    blocks.  A batch of 1-D CuPy blocks takes :func:`_encoded_beyond` first,
    which never writes the blocks' order keys, only the candidates', and
    returns the batch's extremes; other blocks keep their own extremes one
    by one, each encoded on its own.  Parts are in no order.

    Examples
    --------
    >>> import numpy as np
    >>> [np.sort(p).tolist() for p in extremes([np.array([4, 1, 7]), np.array([9, 0])], 2)]
    [[4, 7], [0, 9]]
    """
    n = sum(b.shape[axis] for b in blocks)
    if (all(on_device(b) and b.ndim == 1 for b in blocks) and n > max(SMALL, 2 * abs(k))
            and abs(k) <= ATOMIC_KEYS):
        candidates = _encoded_beyond(blocks, k)
        if candidates is not None:
            return [survivors(candidates, k)]
    return [survivors(order.encode(b, False, "exact"), k, axis) for b in blocks]


def _encoded_beyond(blocks: Sequence[Any], k: int) -> Any:
    """Order keys of a few more than the ``|k|`` extremes of 1-D ``blocks``, in one pass over their raw keys; ``None`` if the pivot missed.

    The first round of :func:`largest` for the whole batch without encoding
    it: one pivot from a sample strided over every block (the sample alone
    is encoded), then the fused pass (:meth:`gpusort.backends.cupy.CupyBackend.beyond`)
    over each block into one buffer, which encodes each key in registers,
    compares it with the pivot and keeps the order keys beyond it; the
    count is read once for the batch.  A pivot that leaves fewer than
    ``|k|`` keys beyond it, or more than the pass has room for, returns
    ``None``: the caller then encodes the blocks and selects as on any backend.
    """
    n = sum(len(b) for b in blocks)
    stride = _stride(n)
    sample = order.encode(namespace(blocks[0]).concatenate([b[::stride] for b in blocks]), False, "exact")
    pivot = _pivot(sample if k > 0 else ~sample, abs(k), n)
    count, candidates = get_backend(backend_for(blocks[0])).beyond(blocks, pivot, k < 0, ATOMIC_KEYS)
    return candidates if candidates is not None and count >= abs(k) else None


def survivors(okeys: Any, k: int, axis: int = 0) -> Any:
    """The ``k`` largest (``k < 0``: ``-k`` smallest) of order keys along ``axis``, in no order: the combine step.

    1-D keys take :func:`largest`'s sample select; the rows of N-D keys a
    partition along ``axis`` (NumPy's and CuPy's introselect), also linear.
    """
    n = okeys.shape[axis]
    if abs(k) >= n:
        return okeys
    if okeys.ndim == 1:  # the smallest keys are the largest of the complemented keys
        return largest(okeys, k) if k > 0 else ~largest(~okeys, -k)
    kept = slice(n - k, n) if k > 0 else slice(0, -k)
    parted = namespace(okeys).partition(okeys, kept.start if k > 0 else -k - 1, axis=axis)
    return parted[(slice(None),) * axis + (kept,)]


def ranked(okeys: Any, k: int, dtype: Any, axis: int = 0) -> Any:
    """:func:`survivors`, sorted along ``axis`` and decoded to ``dtype``: largest first for ``k > 0``, smallest first for ``k < 0``.

    The aggregate step of :func:`gpusort.topk`'s reduction.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, np.nan, 3.0, -0.0, 2.0])
    >>> ranked(order.encode(x, False, "exact"), 2, x.dtype)
    array([nan,  3.])
    """
    xp = namespace(okeys)
    values = order.decode(xp.sort(survivors(okeys, k, axis), axis=axis), dtype, False, "exact")
    return xp.flip(values, axis=axis) if k > 0 else values


def _step(*parts: Any, k: int, axis: int, chunks: bool, dtype: Any = None) -> Any:
    """One task of :func:`topk`'s tree: the survivors of ``parts`` joined along ``axis``, or the ranked answer.

    ``chunks``: the parts are input blocks, whose extremes are taken first
    (the chunk step); ``dtype``: this is the last task, which ranks and
    decodes (the aggregate step).
    """
    if chunks:
        parts = extremes(parts, k, axis)
    okeys = parts[0] if len(parts) == 1 else namespace(parts[0]).concatenate(parts, axis=axis)
    return survivors(okeys, k, axis) if dtype is None else ranked(okeys, k, dtype, axis)


def topk(x: da.Array, k: int, axis: int, split_every: int | None) -> da.Array:
    """The reduction graph of :func:`gpusort.topk` along ``axis`` (non-negative) of ``x``.

    A tree reduction, Dask's shape written out so that its first step can
    take several chunks a task: neighbouring blocks along ``axis`` are
    batched up to :func:`gpusort.engine.graph.task_bytes` (as the sort's runs are),
    because each task costs the scheduler more than a GPU takes to select
    from a GiB of keys.  Then ``split_every`` survivors a task
    until one task is left, which ranks them; a single batch is that task.
    """
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    from gpusort.engine import graph

    width = math.prod(max(c, default=0) for d, c in enumerate(x.chunks) if d != axis)
    element = x.dtype.itemsize * max(width, 1)
    groups = graph.task_groups(x.chunks[axis], element,
                               graph.task_bytes(x.nbytes, on_device(x._meta)))
    if split_every is None:  # survivors of about COMBINE_KEYS keys a task
        split_every = max(2, COMBINE_KEYS // (abs(k) * max(width, 1)))
    name = "topk-" + tokenize(x.name, k, axis, split_every, groups)
    dsk: dict = {}
    for line in itertools.product(*(range(n) for d, n in enumerate(x.numblocks) if d != axis)):
        def at(i: int) -> tuple:
            return (*line[:axis], i, *line[axis:])

        level = [[(x.name, *at(i)) for i in range(a, b)] for a, b in groups]
        first, depth = True, 0
        while len(level) > 1:
            keys = []
            for j, parts in enumerate(level):
                key = (f"{name}-{depth}", *line, j)
                dsk[key] = (functools.partial(_step, k=k, axis=axis, chunks=first), *parts)
                keys.append(key)
            level = [keys[j:j + split_every] for j in range(0, len(keys), split_every)]
            first, depth = False, depth + 1
        dsk[(name, *at(0))] = (functools.partial(_step, k=k, axis=axis, chunks=first, dtype=x.dtype), *level[0])
    chunks = tuple((min(abs(k), x.shape[d]),) if d == axis else c for d, c in enumerate(x.chunks))
    return da.Array(HighLevelGraph.from_collections(name, dsk, dependencies=[x]), name, chunks, meta=x._meta)
