"""Backends: where a run is sorted and where runs are merged.

Every backend implements the same three operations over *order keys* (see
:mod:`gpusort.order`): keys that sort ascending, stably, NaN last.  The Dask
graph (:mod:`gpusort.graph`) and the splitter math (:mod:`gpusort.corank`) are
written once against this interface and never see a backend's arrays except
through it.

Backends are looked up by name at task run time, so a worker process imports
CuPy only when it runs a CuPy task and ``import gpusort`` works without CuPy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Literal, Protocol, Sequence

BACKENDS = ("numpy", "cupy")
Pair = tuple[Any, Any]
"""``(keys, values)``; ``values`` is ``None`` for a keys-only sort."""


class Backend(Protocol):
    """What the graph needs from a backend.

    All arrays are 1-D.  ``values`` may be ``None`` (keys only).  Inputs are
    never modified.  Arrays come back in the memory space they came from: a
    NumPy chunk handed to the CuPy backend is staged to the GPU and returned
    as NumPy (the out-of-core path).
    """

    name: str

    def sort_run(self, keys: Any, values: Any = None) -> Pair:
        """Stable ascending sort of one chunk of order keys (NaN last)."""

    def merge_runs(self, runs: Sequence[Pair]) -> Pair:
        """Stable k-way merge of sorted runs; ties keep run order."""

    def searchsorted(
        self, sorted_keys: Any, needles: Any, side: Literal["left", "right"] = "left"
    ) -> Any:
        """Insertion points of ``needles`` in ascending ``sorted_keys`` (NaN last)."""


def get_backend(name: str) -> Backend:
    """The backend called ``name`` ("numpy" or "cupy")."""
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not known; use one of {BACKENDS}")
    return import_module(f"gpusort.backends.{name}").BACKEND


def backend_for(meta: Any) -> str:
    """The backend that matches a chunk type: CuPy chunks sort on the GPU."""
    return "cupy" if is_cupy(meta) else "numpy"


def is_cupy(x: Any) -> bool:
    """Whether ``x`` is a CuPy array (checked without importing CuPy)."""
    return type(x).__module__.split(".")[0] == "cupy"


def namespace(x: Any) -> Any:
    """The array module of ``x``: ``cupy`` for CuPy arrays, else ``numpy``."""
    if is_cupy(x):
        import cupy

        return cupy
    import numpy

    return numpy


def to_numpy(x: Any) -> Any:
    """``x`` in host memory; the splitter math runs there on a few keys."""
    return x.get() if is_cupy(x) else x
