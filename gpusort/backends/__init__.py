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

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal, Protocol, Sequence

BACKENDS = ("numpy", "cupy")
Pair = tuple[Any, Any]
"""``(keys, values)``; ``values`` is ``None`` for a keys-only sort."""


class Backend(Protocol):
    """What the graph needs from a backend.

    Arrays are 1-D, but for composite order keys past 64 bits, which are
    ``(n, words)`` uint64 rows compared lexicographically
    (:mod:`gpusort.composite`), and values that are ``(n, bytes)`` uint8
    records (several arrays carried together).  ``values`` may be ``None``
    (keys only).  Inputs are
    never modified, unless a caller says they may be (``overwrite``).  Arrays come back in the memory space they came from: a
    NumPy chunk handed to the CuPy backend is staged to the GPU and returned
    as NumPy (the out-of-core path).
    """

    name: str

    def sort_run(self, keys: Any, values: Any = None, *, overwrite: bool = False) -> Pair:
        """Stable ascending sort of one chunk of order keys (NaN last).

        ``overwrite``: the arrays are the caller's temporaries, and the sort
        may use their memory (and return it).
        """

    def run_limit(self, keys: Any, values: Any = None) -> int:
        """The most bytes of keys and values like these that one :meth:`sort_run` should take.

        Where memory is only known to be short when a sort fails, the limit
        is unbounded and :meth:`sort_run` raises ``MemoryError``.
        """

    def merge_runs(self, runs: Sequence[Pair]) -> Pair:
        """Stable k-way merge of sorted runs; ties keep run order."""

    def searchsorted(
        self, sorted_keys: Any, needles: Any, side: Literal["left", "right"] = "left"
    ) -> Any:
        """Insertion points of ``needles`` in ascending ``sorted_keys`` (NaN last)."""

    def is_sorted(self, keys: Any) -> bool:
        """Whether 1-D order keys are already ascending (NaN last), checked where they live.

        A sample decides first: keys that are not sorted almost never pass
        it, so only sorted keys pay the full pass.
        """

    def sort_rows(self, okeys: Any) -> Any:
        """Order keys of any shape sorted along their last axis, each row on its own (N-D sorts)."""

    def lexsort_rows(self, columns: Sequence[Any]) -> Any:
        """int64 positions that sort every row of ``columns`` stably, the last column primary (``np.lexsort``'s order)."""


@dataclass(frozen=True)
class BackendSpec:
    """A backend name and its settings, as the Dask graph carries them to the workers.

    Small, frozen and picklable; :func:`get_backend` takes it wherever it
    takes a plain name.  ``gpu_memory_budget`` (bytes per worker, ``"cupy"``
    only) bounds the GPU memory of sorting host-resident chunks.
    """

    name: str
    gpu_memory_budget: int | None = None

    def __post_init__(self):
        if self.name not in BACKENDS:
            raise ValueError(f"backend={self.name!r} is not known; use one of {BACKENDS}")
        if self.gpu_memory_budget is not None and self.name != "cupy":
            raise ValueError(
                f"gpu_memory_budget applies to backend='cupy' only, not {self.name!r}: "
                "pass backend='cupy' to sort these chunks on the GPU, or drop gpu_memory_budget"
            )


def get_backend(spec: str | BackendSpec) -> Backend:
    """The backend ``spec`` names: "numpy", "cupy", or a :class:`BackendSpec`."""
    if isinstance(spec, BackendSpec):
        backend = get_backend(spec.name)
        return backend if spec.gpu_memory_budget is None else backend.with_budget(spec.gpu_memory_budget)
    if spec not in BACKENDS:
        raise ValueError(f"backend={spec!r} is not known; use one of {BACKENDS}")
    return import_module(f"gpusort.backends.{spec}").BACKEND


def backend_spec(name: str, gpu_memory_budget: int | None = None) -> str | BackendSpec:
    """What the graph carries: the plain name, or a :class:`BackendSpec` when there are settings."""
    return name if gpu_memory_budget is None else BackendSpec(name, gpu_memory_budget)


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


#: Value widths (bytes) the GPU kernels move with their keys; wider values
#: are sorted by position and gathered on the host.
MOVABLE_VALUE_BYTES = (1, 2, 4, 8)
#: Keys of a run that :meth:`Backend.is_sorted` reads before it reads them all.
SORTED_SAMPLE = 1024


def in_order(a: Any, b: Any) -> bool:
    """Whether order key ``a`` may come before ``b``: not after it, NaN last (host scalars).

    Examples
    --------
    >>> in_order(1.0, 1.0), in_order(float("nan"), 2.0), in_order(2.0, float("nan"))
    (True, False, True)
    """
    if a != a:  # NaN: only NaN may follow it
        return b != b
    return not b < a


def synchronize(x: Any) -> None:
    """Wait until the GPU has written ``x`` (a CuPy array); nothing for host arrays.

    Arrays about to leave the process through comms that do not order
    themselves after the kernels that wrote them must wait for them.
    """
    if is_cupy(x):
        x.device.synchronize()


def concatenate(parts: Sequence[Any], dtype: Any = None) -> Any:
    """``parts`` end to end, in ``dtype`` (default: the first part's, byte order kept).

    CuPy's own concatenation makes the byte order native and compiles a
    kernel per dtype on its first call in a process; contiguous GPU parts
    of the result's dtype are copied by the copy engine instead, which
    compiles nothing and runs at the memory's rate.

    Examples
    --------
    >>> import numpy as np
    >>> concatenate([np.array([1, 2], ">i4"), np.array([3], ">i4")]).dtype
    dtype('>i4')
    """
    if len(parts) == 1:
        return parts[0]
    xp = namespace(parts[0])
    import numpy

    dtype = numpy.dtype(parts[0].dtype if dtype is None else dtype)
    if xp is numpy or not all(p.dtype == dtype and p.flags.c_contiguous and p.shape[1:] == parts[0].shape[1:]
                              for p in parts):
        return xp.concatenate(parts, dtype=dtype)
    out = xp.empty((sum(len(p) for p in parts),) + parts[0].shape[1:], dtype)
    offset = 0
    for p in parts:
        if p.nbytes:
            (out.data + offset).copy_from_device_async(p.data, p.nbytes)
        offset += p.nbytes
    return out


def to_numpy(x: Any) -> Any:
    """``x`` in host memory; the splitter math runs there on a few keys."""
    return x.get() if is_cupy(x) else x


def every(x: Any, step: int, start: int = 0) -> Any:
    """``x[start::step]`` (NumPy or CuPy, 1-D or rows) as a contiguous host array.

    Samples for splitters: a GPU array's are gathered by the copy engine
    (:func:`gpusort.cuda.launch.every`), not by the copy kernel CuPy would
    compile for a strided view on its first use in a process.

    Examples
    --------
    >>> import numpy as np
    >>> every(np.arange(10), 4, 1)
    array([1, 5, 9])
    """
    import numpy

    if not is_cupy(x):
        return numpy.ascontiguousarray(x[start::step])
    import cupy

    from gpusort.cuda import launch

    out = numpy.empty((max(0, -(-(x.shape[0] - start) // step)),) + x.shape[1:], x.dtype)
    with x.device:  # the copy queued after the kernels that wrote x, on their device
        launch.every(x, step, start, out=out)
        cupy.cuda.get_current_stream().synchronize()
    return out
