"""The CuPy backend: runs sorted and merged on the GPU by gpusort's own kernels.

It sees only order keys (:mod:`gpusort.order`), so it always sorts
ascending.  NumPy chunks are staged to the GPU, sorted or merged there, and
come back as NumPy: the out-of-core path, where runs live in host memory and
the GPU holds one task's data at a time.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import cupy
import numpy as np

import gpusort.gpu as gpu  # not `from gpusort import gpu`: gpusort's lazy __getattr__ recurses
from gpusort.backends import Pair


def _to_device(x: Any) -> Any:
    """``x`` on the GPU (``None`` stays ``None``).

    The one place host data is staged; a later change swaps in pinned
    buffers and a GPU memory budget here.
    """
    return x if x is None or isinstance(x, cupy.ndarray) else cupy.asarray(x)


def _to_host(x: Any) -> Any:
    return None if x is None else cupy.asnumpy(x)


class CupyBackend:
    """:class:`gpusort.backends.Backend` on one GPU, through :mod:`gpusort.gpu`."""

    name = "cupy"

    def sort_run(self, keys: Any, values: Any = None) -> Pair:
        on_host = isinstance(keys, np.ndarray)
        k, v = _to_device(keys), _to_device(values)
        out = (gpu.sort(k), None) if v is None else gpu.sort_pairs(k, v)
        return tuple(map(_to_host, out)) if on_host else out

    def merge_runs(self, runs: Sequence[Pair]) -> Pair:
        if not runs:
            raise ValueError("runs is empty: pass at least one (possibly empty) run")
        on_host = isinstance(runs[0][0], np.ndarray)
        keys_only = runs[0][1] is None
        if any((values is None) != keys_only for _, values in runs):
            raise TypeError("runs mix keys-only runs and (keys, values) runs: pass one kind")
        staged = [(_to_device(k), _to_device(v)) for k, v in runs]
        if keys_only:
            out = (gpu.merge_runs([k for k, _ in staged]), None)
        else:
            out = gpu.merge_runs(staged)
        return tuple(map(_to_host, out)) if on_host else out

    def searchsorted(
        self, sorted_keys: Any, needles: Any, side: Literal["left", "right"] = "left"
    ) -> Any:
        # Host arrays are searched where they are: a transfer would cost more
        # than the binary searches.  NumPy and CuPy both treat NaN as largest.
        if isinstance(sorted_keys, np.ndarray):
            return np.searchsorted(sorted_keys, cupy.asnumpy(needles), side=side)
        return cupy.searchsorted(sorted_keys, _to_device(needles), side=side)


BACKEND = CupyBackend()
