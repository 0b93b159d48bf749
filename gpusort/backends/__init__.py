"""Backends: where a run is sorted and where runs are merged.

Every backend implements the same three operations over *order keys* (see
:mod:`gpusort.keys.order`): keys that sort ascending, stably, NaN last.  The Dask
graph (:mod:`gpusort.engine.graph`) and the splitter math (:mod:`gpusort.keys.corank`) are
written once against this interface and never see a backend's arrays except
through it.

Backends are looked up by name at task run time, so a worker process imports
CuPy only when it runs a CuPy task and ``import gpusort`` works without CuPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, ContextManager, Literal, Protocol, Sequence

from gpusort.arrays import is_cupy
from gpusort.cuda.tuning import VALUE_DTYPES

BACKENDS = ("numpy", "cupy")
Pair = tuple[Any, Any]
"""``(keys, values)``; ``values`` is ``None`` for a keys-only sort."""


class Backend(Protocol):
    """What the graph needs from a backend.

    Arrays are 1-D, but for composite order keys past 64 bits, which are
    ``(n, words)`` uint64 rows compared lexicographically
    (:mod:`gpusort.keys.composite`), and values that are ``(n, bytes)`` uint8
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
        may use their memory (and return it).  Keys only, ``keys`` may be a
        list of 1-D arrays of one dtype (a task's chunks), sorted as their
        concatenation: a backend that can read them where they lie makes no
        joined copy.
        """

    def run_limit(self, keys: Any, values: Any = None) -> int:
        """The most bytes of keys and values like these that one :meth:`sort_run` should take.

        Where memory is only known to be short when a sort fails, the limit
        is unbounded and :meth:`sort_run` raises ``MemoryError``.
        """

    def merge_runs(self, runs: Sequence[Pair], *, scratch: Pair | None = None) -> Pair:
        """Stable k-way merge of sorted runs; ties keep run order.

        ``scratch``: the runs' concatenation (keys, values), of which the
        runs are consecutive slices in order, given up by the caller: the
        merge may work in it and return it, and holds one copy less.
        """

    def searchsorted(
        self, sorted_keys: Any, needles: Any, side: Literal["left", "right"] = "left"
    ) -> Any:
        """Insertion points of ``needles`` in ascending ``sorted_keys`` (NaN last)."""

    def is_sorted(self, keys: Any) -> bool:
        """Whether 1-D order keys, or a list of them end to end (a task's parts), are already ascending (NaN last).

        Checked where they live.  A sample decides first (the parts' ends,
        then each part's own): keys that are not sorted almost never pass
        it, so only sorted keys pay the full pass.
        """

    def sort_rows(self, okeys: Any) -> Any:
        """Order keys of any shape sorted along their last axis, each row on its own (N-D sorts)."""

    def lexsort_rows(self, columns: Sequence[Any]) -> Any:
        """int64 positions that sort every row of ``columns`` stably, the last column primary (``np.lexsort``'s order)."""

    def sort_parts(self, keys: Sequence[Any], values: Any, encode: Any, decode: Any, temporaries: int = 2
                   ) -> Pair | None:
        """Host key parts (and value parts, or ``(offset, n)`` for positions) as one sorted run, in one step.

        ``encode`` makes order keys of raw keys, ``decode`` raw keys of order
        keys.  ``None`` where this backend has no such step, or it does not
        fit: the caller sorts the chunks as a run.
        """

    def sort_host_rows(self, blocks: Sequence[Any], sort: Any) -> Any | None:
        """``sort(backend, blocks)`` of aligned host ``blocks``, row by row, within this backend's memory.

        ``None`` where the backend takes such blocks as they are: the caller
        sorts them on the backend of their own memory.
        """

    def beyond(self, blocks: Sequence[Any], pivot: Any, complement: bool, room: int) -> tuple[int, Any]:
        """How many keys of 1-D ``blocks`` have order keys above ``pivot``, and those order keys in no order.

        With ``complement``, the keys whose complemented order keys are
        above it (the smallest).  The order keys come back as ``None`` when
        there are more than ``room`` of them.
        """

    def scan(self, block: Any, descending: bool | None) -> tuple[int, int | None]:
        """Verification's pass over one chunk: the checksum of its exact bits and its first out-of-order position.

        The checksum is a sum mod 2^64 of a 64-bit mix of each element's
        bits, the same on every backend; the position is ``None`` where the
        chunk is in order, or where ``descending`` is ``None`` (no check).
        """

    def default_budget(self) -> int:
        """The bytes a sort step may hold on this worker by default; 0 where it has no device memory to bound."""

    def budgeted(self, nbytes: int) -> ContextManager[None]:
        """A context that holds ``nbytes`` of this backend's budget, in which this thread's new arrays come out of it.

        It waits while other steps of the worker hold the budget, and raises
        ``MemoryError`` where they hold it too long; an allocation past the
        budget raises too (a subclass of ``MemoryError``).  The host's
        backend has nothing to bound.
        """

    def upload(self, parts: Sequence[Any]) -> Any:
        """Host ``parts`` (1-D, one dtype) end to end in one new array in this backend's memory, ready to use."""

    def download(self, pair: Pair, out: Pair | None = None) -> Pair:
        """``pair`` (this backend's arrays, or ``None``) in host memory: into ``out`` (contiguous, of their sizes) where given."""


@dataclass(frozen=True)
class BackendSpec:
    """A backend name and its settings, as the Dask graph carries them to the workers.

    Small, frozen and picklable; :func:`get_backend` takes it wherever it
    takes a plain name.  ``gpu_memory_budget`` (bytes per worker, ``"cupy"``
    only) bounds the GPU memory of sorting host-resident chunks.
    """

    name: str
    gpu_memory_budget: int | None = None

    @property
    def device(self) -> bool:
        """Whether this backend sorts in GPU memory."""
        return self.name == backend_where(True)

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


def spec_of(backend: str | BackendSpec) -> BackendSpec:
    """``backend`` as a :class:`BackendSpec`, whether the graph carries it as a name or a spec."""
    return backend if isinstance(backend, BackendSpec) else BackendSpec(backend)


def backend_spec(name: str, gpu_memory_budget: int | None = None) -> str | BackendSpec:
    """What the graph carries: the plain name, or a :class:`BackendSpec` when there are settings."""
    return name if gpu_memory_budget is None else BackendSpec(name, gpu_memory_budget)


def on_device(x: Any) -> bool:
    """Whether array ``x`` (a chunk, or a Dask array's ``_meta``) lives in GPU memory: the CuPy backend's.

    The layers above ask this, not which library made an array.

    Examples
    --------
    >>> import numpy as np
    >>> on_device(np.empty(3)), backend_for(np.empty(0))
    (False, 'numpy')
    """
    return is_cupy(x)


def backend_where(device: bool) -> str:
    """The backend whose memory is the GPU's (``device``) or the host's."""
    return "cupy" if device else "numpy"


def backend_for(meta: Any) -> str:
    """The backend that matches a chunk type: chunks in GPU memory sort on the GPU."""
    return backend_where(on_device(meta))


#: Value widths (bytes) the GPU kernels move with their keys, the widths they
#: are built for; wider values are sorted by position and gathered on the host.
MOVABLE_VALUE_BYTES = tuple(VALUE_DTYPES)
#: Keys of a run that :meth:`Backend.is_sorted` reads before it reads them all.
SORTED_SAMPLE = 1024


