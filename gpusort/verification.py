"""Prove that one array is the sorted permutation of another, chunk by chunk.

:func:`verify` never holds either array in memory.  One task per chunk
reduces it to a few numbers -- its length, an order-independent checksum of
its elements' exact bits and, for the sorted side, its first out-of-order
position and its end keys -- and the boundaries between chunks are checked
from those.  Equal lengths, equal checksums and order everywhere mean
``dst`` holds exactly the bits of ``src`` (``-0.0`` is not ``0.0``, a NaN's
payload counts), sorted, up to a checksum collision (odds about 2^-64 for
accidental damage).

It runs at memory speed, on the GPU where the worker has one
(``device="auto"``): CuPy chunks are checked where they are, NumPy chunks
stream up through :mod:`gpusort.memory.staging`'s pinned slots in pieces (the host
link outruns the CPU's hash), and one pass of gpusort's own kernel hashes
each piece and checks its order (:meth:`gpusort.backends.cupy.CupyBackend.scan`).
On the CPU the chunks go in parallel (Dask's threads; NumPy releases the
GIL), each in one pass over cache-sized slices that hashes and checks the
order while the slice is in cache.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from gpusort.arrays import to_numpy
from gpusort.backends import backend_where, get_backend, on_device
from gpusort.front.api import check_flag
from gpusort.keys import order
from gpusort.zarr_io import as_dask_array, compute

_MOD = 2**64  # the checksums' modulus: a backend's scan sums mod 2^64
DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found; true when ``dst`` is ``src`` sorted.

    ``first_unsorted`` is the first position ``i`` of ``dst`` with
    ``dst[i + 1]`` out of order after ``dst[i]`` (``None`` when in order);
    ``problems`` says in words what failed and where.
    """

    n_src: int
    n_dst: int
    checksum_src: int
    checksum_dst: int
    first_unsorted: int | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return (f"OK: dst is src sorted ({self.n_dst} elements, checksum "
                    f"{self.checksum_dst:016x})")
        return "FAILED:\n" + "\n".join(f"  - {p}" for p in self.problems)


def verify(src: Any, dst: Any, *, descending: bool = False, device: str = "auto",
           progress: bool = False) -> VerifyReport:
    """Check that ``dst`` is ``src`` sorted, streaming over the chunks with Dask.

    Parameters
    ----------
    src, dst : path, zarr.Array, dask.array.Array or array-like
        1-D arrays of one key dtype: Zarr arrays by path or opened, Dask
        arrays with NumPy or CuPy chunks, or NumPy or CuPy arrays (wrapped as
        :func:`gpusort.sort` wraps them).  Any chunking on either side.
    descending : bool
        Check for largest first.  Either way NaN (and NaT) must come last;
        ``-0.0`` and ``0.0`` tie (either order passes), and NaNs tie.
    device : {"auto", "cpu", "gpu"}
        Where NumPy chunks are checked: ``"auto"`` on a GPU of the worker
        when CuPy sees one, else on its CPUs.  CuPy chunks are always
        checked on their GPU.  Either way the report is the same.
    progress : bool
        Show a progress bar (see :func:`gpusort.zarr_io.compute`).

    Returns
    -------
    VerifyReport
        True when ``dst`` is a sorted permutation of ``src``: equal lengths,
        equal order-independent checksums of the elements' exact bits, and
        every adjacent pair of ``dst`` in order, across chunk boundaries too.

    Raises
    ------
    FileNotFoundError, TypeError, ValueError
        As :func:`check_pair`; ``descending`` not a bool is a TypeError.

    Examples
    --------
    >>> import numpy as np, gpusort
    >>> src = np.array([3.0, np.nan, -0.0, 1.0])
    >>> bool(gpusort.verify(src, [-0.0, 1.0, 3.0, np.nan]))
    True
    >>> print(gpusort.verify(src, [0.0, 1.0, 3.0, np.nan]))  # a zero of the other sign
    FAILED:
      - checksums differ (src 1011966d85fd6c43, dst aa137e04ee714617): an element of src is missing from dst, or changed (a checksum cannot say which)
    >>> print(gpusort.verify(src, [1.0, -0.0, 3.0, np.nan]))
    FAILED:
      - dst is not sorted ascending: dst[0] = 1.0 comes before dst[1] = -0.0
    """
    check_flag(descending, "descending")
    if device not in DEVICES:
        raise ValueError(f"device={device!r}; use 'auto', 'cpu' or 'gpu'")
    x, y = check_pair(src, dst)
    src_facts = [dask.delayed(_count_and_checksum)(block, device) for block in x.to_delayed().ravel()]
    dst_facts = [dask.delayed(_chunk_facts)(block, bool(descending), device) for block in y.to_delayed().ravel()]
    results = compute(*src_facts, *dst_facts, progress=progress)
    src_facts, dst_facts = results[: len(src_facts)], results[len(src_facts):]

    # Elements counted, not the lengths the arrays declare.
    n_src, n_dst = sum(n for n, _ in src_facts), sum(f.n for f in dst_facts)
    checksum_src = sum(c for _, c in src_facts) % _MOD
    checksum_dst = sum(f.checksum for f in dst_facts) % _MOD
    first_unsorted, pair = _first_unsorted(dst_facts)
    problems = []
    if n_src != n_dst:
        problems.append(f"dst has {n_dst} elements but src has {n_src}")
    if checksum_src != checksum_dst:
        problems.append(
            f"checksums differ (src {checksum_src:016x}, dst {checksum_dst:016x}): an element "
            "of src is missing from dst, or changed (a checksum cannot say which)"
        )
    if first_unsorted is not None:
        i = first_unsorted
        direction = "descending" if descending else "ascending"
        problems.append(
            f"dst is not sorted {direction}: dst[{i}] = {pair[0]} comes before dst[{i + 1}] = {pair[1]}"
        )
    return VerifyReport(n_src, n_dst, checksum_src, checksum_dst, first_unsorted, tuple(problems))


def check_pair(src: Any, dst: Any) -> tuple[Any, Any]:
    """``src`` and ``dst`` as 1-D Dask arrays of one sortable key dtype, or the error that says why not.

    Raises ``FileNotFoundError``, ``TypeError`` or ``ValueError`` naming the
    argument; :func:`verify` calls it first, and ``gpusort verify`` before it
    starts a cluster.

    Examples
    --------
    >>> check_pair([3, 1, 2], [1.0, 2.0, 3.0])
    Traceback (most recent call last):
    TypeError: dst has dtype float64 but src has dtype int64; a sort keeps the dtype
    """
    x, y = as_dask_array(src, "src"), as_dask_array(dst, "dst")
    order.check_key_dtype(x.dtype, "src")
    if x.dtype != y.dtype:
        raise TypeError(f"dst has dtype {y.dtype} but src has dtype {x.dtype}; a sort keeps the dtype")
    return x, y


@dataclass(frozen=True)
class _ChunkFacts:
    """One sorted-side chunk in a few numbers."""

    n: int
    checksum: int
    bad: int | None  # first local i with chunk[i + 1] out of order after chunk[i]
    bad_pair: tuple[str, str] | None  # the two elements as the user sees them
    ends: tuple[Any, Any] | None  # order keys (scheme "tied") of the first and last element
    end_values: tuple[str, str] | None  # the same two elements, as the user sees them


def _scan_chunk(block: Any, descending: bool | None, device: str) -> tuple[int, int | None]:
    """A backend's ``scan`` of ``block`` wherever ``device`` puts it: its GPU, a GPU of this worker, or the CPU."""
    if on_device(block):
        return get_backend(backend_where(True)).scan(block, descending)  # on its own GPU
    # CuPy has neither datetimes nor byte-swapped dtypes: those stay on the CPU.
    movable = block.dtype.isnative and block.dtype.kind not in "mM"
    if device == "gpu" and not _gpu_here():
        from gpusort import runtime

        raise ValueError(f"device='gpu' checks on a GPU, and this worker has none: {runtime.gpus()[1]}; "
                         "use device='auto' (a GPU where there is one) or device='cpu'")
    on_gpu = movable and (device == "gpu" or (device == "auto" and _gpu_here()))
    return get_backend(backend_where(on_gpu)).scan(block, descending)


@functools.cache
def _gpu_here() -> bool:
    from gpusort import runtime

    return bool(runtime.gpus()[0])


def _count_and_checksum(block: Any, device: str) -> tuple[int, int]:
    return len(block), _scan_chunk(block, None, device)[0]


def _chunk_facts(block: Any, descending: bool, device: str) -> _ChunkFacts:
    n = len(block)
    checksum, bad = _scan_chunk(block, descending, device)
    # A few elements to the host by copies (slices), not by CuPy kernels that
    # a first call would compile.
    ends = to_numpy(block[:1]), to_numpy(block[n - 1:])
    pair = None if bad is None else to_numpy(block[bad:bad + 2])
    okeys = order.encode(np.concatenate(ends), descending, "tied") if n else None
    return _ChunkFacts(
        n=n,
        checksum=checksum,
        bad=bad,
        bad_pair=None if bad is None else (str(pair[0]), str(pair[1])),
        ends=(okeys[0].item(), okeys[1].item()) if n else None,
        end_values=(str(ends[0][0]), str(ends[1][0])) if n else None,
    )


def _first_unsorted(facts: list[_ChunkFacts]) -> tuple[int | None, tuple[str, str] | None]:
    """The first out-of-order position over all chunks and their boundaries, with its pair."""
    offset = 0
    previous = None  # (position, order key, value) of the last element so far
    for f in facts:
        if f.n:
            if previous is not None and previous[1] > f.ends[0]:
                return previous[0], (previous[2], f.end_values[0])
            if f.bad is not None:
                return offset + f.bad, f.bad_pair
            previous = (offset + f.n - 1, f.ends[1], f.end_values[1])
        offset += f.n
    return None, None

