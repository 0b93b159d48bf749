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
from typing import Sequence

import numpy as np

from gpusort.composite import argsort_rows


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
    # Merged sample order: a stable sort of the run-major concatenation breaks
    # ties by (run, position), the same strict order the runs are merged in.
    order = argsort_rows(np.concatenate(samples))
    merged_index = np.empty(total, dtype=np.int64)
    merged_index[order] = np.arange(total, dtype=np.int64)
    # Make merged indices increase across the concatenation (run k shifted by
    # k·(total+1)), so one searchsorted answers "how many samples of run k sit
    # before merged index i" for every (i, k) at once.
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    run_of = np.repeat(np.arange(nruns, dtype=np.int64), counts)
    keyed = merged_index + run_of * (total + 1)

    def samples_before(index: np.ndarray) -> np.ndarray:
        shift = np.arange(nruns, dtype=np.int64) * (total + 1)
        at = np.searchsorted(keyed, index[:, None] + shift[None, :], side="left")
        return at - first[None, :]

    ranks = np.asarray(ranks, dtype=np.int64)
    ia = np.minimum(ranks // g, total - 1)
    q = samples_before(ia)
    lo = np.where(q > 0, (q - 1) * g + 1, 0)

    ib = -(-ranks // g) + nruns - 1
    past = ib >= total
    q = samples_before(np.minimum(ib, total - 1))
    hi = np.minimum(q * g, lengths[None, :])
    hi[past] = lengths
    return lo.astype(np.int64), hi.astype(np.int64)


def refine_splits(
    ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray, windows: Sequence[np.ndarray]
) -> np.ndarray:
    """Exact split vectors from the window elements.

    ``windows[k]`` concatenates ``run_k[lo[j, k]:hi[j, k]]`` over boundaries
    ``j``.  The first ``ranks[j] - lo[j].sum()`` window elements of boundary
    ``j`` in the strict order are exactly the ones left of its splits.

    Returns
    -------
    ndarray of int64, shape ``(len(ranks), P)``
    """
    nbounds, nruns = lo.shape
    width = hi - lo
    if width.sum() == 0:
        return lo.copy()
    keys = np.concatenate(windows)
    # Window elements in run-major, boundary, position order: a stable sort by
    # (boundary, key) leaves ties in (run, position) order within a boundary.
    bound = np.concatenate([np.repeat(np.arange(nbounds), width[:, k]) for k in range(nruns)])
    run = np.repeat(np.arange(nruns), width.sum(axis=0))
    # Composite keys past 64 bits are rows of words, the first the most significant.
    columns = keys.T[::-1] if keys.ndim == 2 else (keys,)
    order = np.lexsort((*columns, bound))
    bound, run = bound[order], run[order]
    start = np.concatenate(([0], np.cumsum(width.sum(axis=1))[:-1]))
    take = np.asarray(ranks, dtype=np.int64) - lo.sum(axis=1)
    left = np.arange(len(bound)) - start[bound] < take[bound]
    counts = np.bincount(bound[left] * nruns + run[left], minlength=nbounds * nruns)
    return lo + counts.reshape(nbounds, nruns)


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


def merge_path_splits(ranks: np.ndarray, a_counts: np.ndarray, na: int, nb: int) -> np.ndarray:
    """Two-way split vectors ``(i, r - i)`` on a valid merge path, each ``i`` the nearest to ``a_counts``.

    A split of rank ``r`` between two sequences of ``na`` and ``nb`` elements
    takes ``i`` elements of the first and ``r - i`` of the second, so
    ``max(0, r - nb) <= i <= min(r, na)``, and along ascending ``ranks`` (from
    0 to ``na + nb``) neither count may decrease.  Each ``i`` is clamped into
    what the previous split leaves possible.  The exact co-ranks of sorted
    sequences already obey all of this and come back unchanged; counts found
    over sequences that are not sorted still become slices that cut each
    sequence into consecutive pieces covering it once, so a check of what
    every slice holds sees every element.

    Returns
    -------
    ndarray of int64, shape ``(len(ranks), 2)``

    Examples
    --------
    >>> merge_path_splits(np.array([0, 3, 6]), np.array([0, 2, 4]), 4, 2).tolist()
    [[0, 0], [2, 1], [4, 2]]
    >>> merge_path_splits(np.array([0, 3, 6]), np.array([5, 0, 9]), 4, 2).tolist()   # not from sorted inputs
    [[0, 0], [1, 2], [4, 2]]
    """
    out = np.empty((len(ranks), 2), dtype=np.int64)
    i = previous = 0
    for j, (r, want) in enumerate(zip(np.asarray(ranks).tolist(), np.asarray(a_counts).tolist())):
        i = min(max(int(want), r - nb, i), na, i + r - previous)
        out[j] = i, r - i
        previous = r
    return out
