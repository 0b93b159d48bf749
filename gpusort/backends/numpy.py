"""The NumPy backend: runs and merges on the CPU, anywhere, no GPU needed."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from gpusort.backends import Pair
from gpusort.composite import argsort_rows


class NumpyBackend:
    name = "numpy"

    def sort_run(self, keys: np.ndarray, values: np.ndarray | None = None) -> Pair:
        if keys.ndim == 2:  # composite keys past 64 bits: rows compared word by word
            order = argsort_rows(keys)
            return keys[order], None if values is None else values[order]
        if values is None:
            # Keys alone have no order among equals to keep, so the fastest
            # sort serves; NaN lands last either way.  That is the SIMD
            # quicksort, but for 1-byte keys (and bool) the radix sort behind
            # kind="stable": 28 ms against 760 ms for 2^24 random uint8 keys.
            return np.sort(keys, kind="stable" if keys.dtype.itemsize == 1 else None), None
        order = np.argsort(keys, kind="stable")
        return keys[order], values[order]

    def merge_runs(self, runs: Sequence[Pair]) -> Pair:
        """Stable k-way merge of the runs: :meth:`sort_run` of their concatenation.

        NumPy has no merge primitive, but its sorts are one here.  With values,
        the stable sort: timsort finds the P sorted runs of the concatenation
        in one linear scan and merges them pairwise, balanced, with galloping
        -- n·log2(P) comparisons, in C, ties kept in run order (for 8- and
        16-bit keys it is a linear radix pass).  Keys alone need no tie order
        (equal order keys are equal bits), so the faster SIMD sort serves.
        Measured on 16 runs of 2^16 int64 keys (2-core development box, NumPy
        2.4): about 25 ms keys only, 32 ms with int64 values, against 180 ms
        for a vectorized co-rank merge tree (searchsorted + scatter per level,
        an earlier measurement that benchmarks/NOTES.md does not keep).
        """
        runs = [r for r in runs if len(r[0])] or list(runs[:1])
        # concatenate would canonicalize dtypes (native byte order, structured
        # padding dropped): keep the dtypes the graph declares.
        keys = np.concatenate([k for k, _ in runs], dtype=runs[0][0].dtype)
        values = None if runs[0][1] is None else np.concatenate([v for _, v in runs], dtype=runs[0][1].dtype)
        return self.sort_run(keys, values)

    def searchsorted(
        self, sorted_keys: np.ndarray, needles: Any, side: Literal["left", "right"] = "left"
    ) -> np.ndarray:
        return np.searchsorted(sorted_keys, needles, side=side)


BACKEND = NumpyBackend()
