"""Exact multiway co-rank splitters from regular samples: pure NumPy.

Runs ``0 … P-1`` are sorted; together they are ordered by the strict order
``(key, run, position)``, which makes duplicates harmless and the sort stable.
For a boundary rank ``r`` (``0 <= r <= N``) the *split vector* ``s(r)`` says
how many elements of each run are among the first ``r`` of that order:
``sum(s(r)) == r``, and everything left of the splits precedes everything
right of them.  Output chunk ``j`` owns ranks ``[r_j, r_{j+1})`` and merges
``run_k[s_k(r_j):s_k(r_{j+1})]`` for every run ``k``.  This is Merge Path's
co-rank (Green, McColl, Bader 2012; Odeh et al. 2012) over ``P`` sequences.

Why samples give exact answers in a constant number of rounds
-----------------------------------------------------------
Run ``m`` publishes every ``g``-th key (positions ``0, g, 2g, …``).  If ``q``
of those samples precede an element ``e``, then between ``(q-1)g+1`` and
``qg`` elements of run ``m`` precede ``e`` (exactly 0 if ``q == 0``), because
"precedes ``e``" is a prefix of a sorted run.  Merge all samples in the strict
order; a sample at merged index ``i`` therefore has a global rank in
``[(i-P+1)g, ig]`` (sum the per-run windows; its own run contributes exactly).
For boundary ``r`` take the samples ``a`` at index ``r // g`` (rank <= r) and
``b`` at index ``ceil(r/g) + P - 1`` (rank >= r): every split lies between
what ``a`` and ``b`` imply, ``lo_k <= s_k(r) <= hi_k``, with windows that add
up to at most ``(2P+1)g`` elements.  Gathering those window elements and
taking the first ``r - sum(lo)`` of them in the strict order gives ``s(r)``
exactly.  Samples cost ``N/g`` keys and windows ``(2P+1)g`` per boundary, so
:func:`sample_stride` balances the two.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from gpusort.arrays import concatenate, every, to_numpy
from gpusort.keys.composite import argsort_rows


def output_ranks(n: int, chunk: int | Sequence[int]) -> np.ndarray:
    """Boundary ranks ``0, chunk, 2·chunk, …, n`` of exactly balanced chunks, or of the chunk sizes given.

    Examples
    --------
    >>> output_ranks(10, 4).tolist(), output_ranks(10, (3, 7)).tolist()
    ([0, 4, 8, 10], [0, 3, 10])
    """
    if not isinstance(chunk, (int, np.integer)):
        sizes = np.asarray(chunk, dtype=np.int64)
        if sizes.sum() != n or (sizes < 0).any():
            raise ValueError(f"chunk sizes {tuple(chunk)} do not cover {n} keys")
        return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    if n == 0:
        return np.zeros(2, dtype=np.int64)
    return np.append(np.arange(0, n, chunk, dtype=np.int64), np.int64(n))


def sample_stride(n: int, nruns: int, nbounds: int) -> int:
    """The sample stride ``g`` that balances samples against windows.

    Samples move ``n/g`` keys and windows at most ``nbounds·(2·nruns+1)·g``;
    their sum is least at ``g = sqrt(n / (nbounds·(2·nruns+1)))``.
    """
    if nbounds == 0 or n == 0:
        return max(n, 1)
    return max(1, round(math.sqrt(n / (nbounds * (2 * nruns + 1)))))


def split_cost(lengths: Sequence[int], nbounds: int, g: int) -> int:
    """Most keys that splitting moves off the runs: samples plus windows."""
    samples = sum(-(-int(n) // g) for n in lengths)
    return samples + nbounds * min(int(sum(lengths)), (2 * len(lengths) + 1) * g)


def plan_windows(
    samples: Sequence[np.ndarray], lengths: Sequence[int], ranks: np.ndarray, g: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-run windows ``[lo, hi)`` that must hold the split of every rank.

    Parameters
    ----------
    samples : sequence of ndarray
        ``run_k[::g]`` for every run ``k``, as order keys.
    lengths : sequence of int
        Length of every run.
    ranks : ndarray of int64
        Boundary ranks to split at.
    g : int
        The sample stride.

    Returns
    -------
    lo, hi : ndarray of int64, shape ``(len(ranks), P)``

    Examples
    --------
    >>> runs = [np.array([1, 3, 5, 7]), np.array([2, 4, 6, 8])]
    >>> lo, hi = plan_windows([r[::2] for r in runs], [4, 4], np.array([4]), 2)
    >>> bool((lo <= [[2, 2]]).all() and ([[2, 2]] <= hi).all())
    True
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    nruns = len(lengths)
    counts = np.array([len(s) for s in samples], dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        zeros = np.zeros((len(ranks), nruns), dtype=np.int64)
        return zeros, zeros.copy()
    samples_before = _before_rows(samples, counts) if any(s.ndim == 2 for s in samples) else _before_keys(samples)

    ranks = np.asarray(ranks, dtype=np.int64)
    ia = np.minimum(ranks // g, total - 1)
    ib = -(-ranks // g) + nruns - 1
    past = ib >= total
    # Both ends of every window in one search of the samples.
    qa, qb = np.split(samples_before(np.concatenate((ia, np.minimum(ib, total - 1)))), 2)
    lo = np.where(qa > 0, (qa - 1) * g + 1, 0)
    hi = np.minimum(qb * g, lengths[None, :])
    hi[past] = lengths
    return lo.astype(np.int64), hi.astype(np.int64)


def _before_keys(samples: Sequence[np.ndarray]):
    """``samples_before(index)`` for 1-D samples: per run, its samples before merged position ``index``.

    The strict order is ``(key, run, position)``.  Position ``i`` of the
    merge holds the ``i``-th smallest key ``v`` (:func:`_nth_keys`, no
    merged index of every sample): before it come every run's samples below
    ``v``, and of the ``i - (those below)`` ties with ``v``, the first ones
    in run order.
    """
    nth = _nth_keys(samples)

    def samples_before(index: np.ndarray) -> np.ndarray:
        v = nth(index)
        below = np.stack([np.searchsorted(s, v, "left") for s in samples], axis=1)
        equal = np.stack([np.searchsorted(s, v, "right") for s in samples], axis=1) - below
        ties = (index - below.sum(axis=1))[:, None]
        ahead = np.cumsum(equal, axis=1) - equal  # ties in the runs before each
        return below + np.clip(ties - ahead, 0, equal)

    return samples_before


def _nth_keys(samples: Sequence[np.ndarray]):
    """``nth(index)``: the ``index``-th smallest key of the sorted ``samples`` together, for every index.

    Integer keys are found by bisection over their range: each of at most
    ``8·itemsize`` rounds counts the keys up to a guess with one binary
    search per run, a cost that grows with the log of the samples where a
    sort of every sample (millions, for a large sort) grows with their
    number, on the path between the phases.  Other keys (floats, ordered
    as floats) are sorted once.

    Examples
    --------
    >>> nth = _nth_keys([np.array([1, 4, 4]), np.array([2, 4, 9])])
    >>> nth(np.arange(6)).tolist()
    [1, 2, 4, 4, 4, 9]
    """
    dtype = samples[0].dtype
    if dtype.kind not in "iub":
        merged = np.sort(np.concatenate(samples))
        return lambda index: merged[index]
    held = [s for s in samples if len(s)]
    # Bisect in the unsigned type of the keys' width, where halving a range
    # cannot overflow: a signed key maps there, in order, by flipping its sign bit.
    unsigned = np.dtype(f"u{dtype.itemsize}")
    flip = unsigned.type(1 << (8 * dtype.itemsize - 1) if dtype.kind == "i" else 0)
    least = np.array(min(s[0] for s in held), dtype).view(unsigned) ^ flip
    most = np.array(max(s[-1] for s in held), dtype).view(unsigned) ^ flip

    def nth(index: np.ndarray) -> np.ndarray:
        lo, hi = np.full(len(index), least, unsigned), np.full(len(index), most, unsigned)
        while (lo < hi).any():
            guess = lo + (hi - lo) // 2
            keys = (guess ^ flip).view(dtype)
            past = sum(np.searchsorted(s, keys, "right") for s in held) > index  # the answer is at most the guess
            hi = np.where(past, guess, hi)
            lo = np.where(past, lo, guess + 1)
        return (lo ^ flip).view(dtype)

    return nth


def _before_rows(samples: Sequence[np.ndarray], counts: np.ndarray):
    """``samples_before(index)`` for rows of composite keys: every sample's merged index, by one stable sort."""
    total = int(counts.sum())
    order = argsort_rows(np.concatenate(samples))
    merged_index = np.empty(total, dtype=np.int64)
    merged_index[order] = np.arange(total, dtype=np.int64)
    # Make merged indices increase across the concatenation (run k shifted by
    # k·(total+1)), so one searchsorted answers "how many samples of run k sit
    # before merged index i" for every (i, k) at once.
    nruns = len(samples)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    run_of = np.repeat(np.arange(nruns, dtype=np.int64), counts)
    keyed = merged_index + run_of * (total + 1)

    def samples_before(index: np.ndarray) -> np.ndarray:
        shift = np.arange(nruns, dtype=np.int64) * (total + 1)
        at = np.searchsorted(keyed, index[:, None] + shift[None, :], side="left")
        return at - first[None, :]

    return samples_before


def refine_splits(
    ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray, windows: Sequence[np.ndarray]
) -> np.ndarray:
    """Exact split vectors from the window elements.

    ``windows[k]`` concatenates ``run_k[lo[j, k]:hi[j, k]]`` over boundaries
    ``j``.  The first ``ranks[j] - lo[j].sum()`` window elements of boundary
    ``j`` in the strict order are exactly the ones left of its splits.

    Each boundary is a selection among ``P`` sorted windows, not a sort of
    them: the key ``v`` at that position (``np.partition``), then per run
    the elements below ``v`` and, of those equal to it, the first ones in
    run order (``searchsorted``).  Composite keys past 64 bits (rows of
    words) are sorted instead.

    Returns
    -------
    ndarray of int64, shape ``(len(ranks), P)``

    Examples
    --------
    >>> runs = [np.array([1, 2, 2, 5]), np.array([2, 3])]
    >>> lo, hi = np.array([[0, 0]]), np.array([[4, 2]])
    >>> refine_splits(np.array([3]), lo, hi, runs).tolist()  # 1, 2, 2 of run 0: ties go to run 0 first
    [[3, 0]]
    """
    nbounds, nruns = lo.shape
    width = hi - lo
    if width.sum() == 0:
        return lo.copy()
    if any(w.ndim == 2 for w in windows):
        return _refine_rows(ranks, lo, hi, windows)
    # Python ints: slicing by NumPy scalars costs more than the slice's keys.
    starts = np.concatenate((np.zeros((1, nruns), np.int64), np.cumsum(width, axis=0))).tolist()
    take = (np.asarray(ranks, dtype=np.int64) - lo.sum(axis=1)).tolist()
    held = width.sum(axis=1).tolist()
    splits = lo.copy()
    for j in range(nbounds):
        t = take[j]
        if t <= 0:
            continue
        if t >= held[j]:
            splits[j] = hi[j]
            continue
        pieces = [w[a:b] for w, a, b in zip(windows, starts[j], starts[j + 1])]
        keys = np.concatenate(pieces)
        keys.partition(t)  # in place: the concatenation is this call's own
        v = keys[t]
        below = np.array([p.searchsorted(v, "left") for p in pieces], dtype=np.int64)
        equal = np.array([p.searchsorted(v, "right") for p in pieces], dtype=np.int64) - below
        # Ties go to the runs in run order: the strict order (key, run, position).
        left = t - below.sum()
        before = np.concatenate(([0], np.cumsum(equal)[:-1]))
        splits[j] += below + np.clip(left - before, 0, equal)
    return splits


def _refine_rows(ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray, windows: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`refine_splits` of composite keys past 64 bits: one stable sort of the windows' rows."""
    nbounds, nruns = lo.shape
    width = hi - lo
    keys = np.concatenate(windows)
    # Window elements in run-major, boundary, position order: a stable sort by
    # (boundary, key) leaves ties in (run, position) order within a boundary.
    bound = np.concatenate([np.repeat(np.arange(nbounds), width[:, k]) for k in range(nruns)])
    run = np.repeat(np.arange(nruns), width.sum(axis=0))
    order = np.lexsort((*keys.T[::-1], bound))  # the first word is the most significant
    bound, run = bound[order], run[order]
    start = np.concatenate(([0], np.cumsum(width.sum(axis=1))[:-1]))
    take = np.asarray(ranks, dtype=np.int64) - lo.sum(axis=1)
    left = np.arange(len(bound)) - start[bound] < take[bound]
    counts = np.bincount(bound[left] * nruns + run[left], minlength=nbounds * nruns)
    return lo + counts.reshape(nbounds, nruns)


def exact_splits(
    runs: Sequence[Any], ranks: np.ndarray, g: int | None = None, cut: Sequence[np.ndarray] | None = None
) -> np.ndarray:
    """Split vectors of ``ranks`` (inner boundaries) over sorted runs held in this process, in one step.

    ``runs`` are the runs' order keys, NumPy or CuPy arrays: samples and
    windows are cut where the runs live and only they come to host memory.
    ``cut`` are the runs' samples at stride ``g`` where they were cut before
    (:func:`samples`); ``g`` is then required.  The split vectors of the ends
    (all zeros, the lengths) are added, as :func:`split_vectors` does.

    Examples
    --------
    >>> runs = [np.array([1, 3, 5, 7]), np.array([2, 4, 6, 8])]
    >>> exact_splits(runs, np.array([3, 5]), g=2).tolist()
    [[0, 0], [2, 1], [3, 2], [4, 4]]
    """
    lengths = [len(r) for r in runs]
    ranks = np.asarray(ranks, dtype=np.int64)
    if not len(ranks):
        return split_vectors(lengths, ranks)
    if cut is not None and not g:  # windows planned at another stride would not hold the splits
        raise ValueError("exact_splits: samples given in cut need the stride g they were cut at")
    g = g or sample_stride(sum(lengths), len(runs), len(ranks))
    plan = plan_windows([samples(r, g) for r in runs] if cut is None else cut, lengths, ranks, g)
    windows = [window_keys(r, plan, k) for k, r in enumerate(runs)]
    return split_vectors(lengths, ranks, plan, windows)


def samples(run: Any, g: int) -> np.ndarray:
    """Every ``g``-th key of a run (NumPy or CuPy), in host memory."""
    return every(run, g)


def window_keys(run: Any, plan: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """Run ``k``'s window keys ``run[lo[j, k]:hi[j, k]]`` of every boundary ``j``, in host memory."""
    lo, hi = plan
    parts = [run[a:b] for a, b in zip(lo[:, k].tolist(), hi[:, k].tolist())]
    return np.ascontiguousarray(to_numpy(concatenate(parts) if parts else run[:0]))


def split_vectors(
    lengths: Sequence[int],
    ranks: np.ndarray,
    plan: tuple[np.ndarray, np.ndarray] | None = None,
    windows: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """Split vectors of the two ends and of every inner boundary rank in ``ranks``.

    Row 0 is all zeros and the last row is ``lengths``; the rows between come
    from :func:`refine_splits` of ``plan = (lo, hi)`` and ``windows``, which
    may be left out when ``ranks`` is empty.

    Returns
    -------
    ndarray of int64, shape ``(len(ranks) + 2, P)``
    """
    ends = [np.zeros((1, len(lengths)), np.int64), np.asarray(lengths, np.int64)[None, :]]
    if plan is None:
        if len(ranks):
            raise ValueError(f"split_vectors needs the plan and windows of {len(ranks)} inner ranks")
        return np.concatenate(ends)
    return np.concatenate([ends[0], refine_splits(ranks, *plan, windows), ends[1]])
