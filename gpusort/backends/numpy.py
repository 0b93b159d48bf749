"""The NumPy backend: runs and merges on the CPU, anywhere, no GPU needed."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from gpusort.backends import Pair


def _merge_pair(a: Pair, b: Pair) -> Pair:
    """Stable two-way merge by co-rank: ``a`` before ``b`` on ties.

    Element ``a[i]`` lands at ``i`` plus the number of ``b`` keys strictly
    below it; ``b[j]`` at ``j`` plus the number of ``a`` keys not above it.
    NumPy's ``searchsorted`` orders NaN last, as the runs are.
    """
    (ka, va), (kb, vb) = a, b
    at_a = np.arange(len(ka)) + np.searchsorted(kb, ka, side="left")
    at_b = np.arange(len(kb)) + np.searchsorted(ka, kb, side="right")

    def scatter(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = np.empty(len(x) + len(y), dtype=x.dtype)
        out[at_a] = x
        out[at_b] = y
        return out

    return scatter(ka, kb), None if va is None else scatter(va, vb)


class NumpyBackend:
    name = "numpy"

    def sort_run(self, keys: np.ndarray, values: np.ndarray | None = None) -> Pair:
        if values is None:
            # Keys alone have no order among equals to keep, so the fastest
            # (SIMD) sort serves; NaN lands last either way.
            return np.sort(keys), None
        order = np.argsort(keys, kind="stable")
        return keys[order], values[order]

    def merge_runs(self, runs: Sequence[Pair]) -> Pair:
        # A balanced tree of two-way merges: log2(P) passes over the data,
        # each pairing neighbours, so run order (stability) is kept.
        runs = [r for r in runs if len(r[0])] or list(runs[:1])
        if len(runs) == 1:  # a lone slice would keep its whole run alive
            keys, values = runs[0]
            return keys.copy(), None if values is None else values.copy()
        while len(runs) > 1:
            runs = [
                _merge_pair(runs[i], runs[i + 1]) if i + 1 < len(runs) else runs[i]
                for i in range(0, len(runs), 2)
            ]
        return runs[0]

    def searchsorted(
        self, sorted_keys: np.ndarray, needles: Any, side: Literal["left", "right"] = "left"
    ) -> np.ndarray:
        return np.searchsorted(sorted_keys, needles, side=side)


BACKEND = NumpyBackend()
