"""Prove that one array is the sorted permutation of another, chunk by chunk.

:func:`verify` never holds either array in memory.  One task per chunk
reduces it to a few numbers -- its length, an order-independent checksum of
its elements (of their bits; all zeros count as one value, all NaNs too)
and, for the sorted side, its first out-of-order position and its end keys
-- and the boundaries between chunks are checked from those.
Equal lengths, equal checksums and order everywhere mean ``dst`` is ``src``
sorted, up to a checksum collision (odds about 2^-64 for accidental damage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from gpusort import order
from gpusort.backends import namespace
from gpusort.zarr_io import as_dask_array, compute

_MOD = 2**64


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


def verify(src: Any, dst: Any, *, descending: bool = False, progress: bool = False) -> VerifyReport:
    """Check that ``dst`` is ``src`` sorted, streaming over the chunks with Dask.

    Parameters
    ----------
    src, dst : path, zarr.Array or dask.array.Array
        1-D arrays of one key dtype: Zarr arrays by path or opened, or Dask
        arrays with NumPy or CuPy chunks.  Any chunking on either side.
    descending : bool
        Check for largest first.  Either way NaN (and NaT) must come last and
        ``-0.0`` ties with ``0.0``.
    progress : bool
        Show a progress bar (see :func:`gpusort.zarr_io.compute`).

    Returns
    -------
    VerifyReport
        True when ``dst`` is a sorted permutation of ``src``: equal lengths,
        equal order-independent checksums of the elements' bits, and every
        adjacent pair of ``dst`` in order, across chunk boundaries too.

    Examples
    --------
    >>> import dask.array as da
    >>> from gpusort.verify import verify
    >>> src = da.from_array([3.0, float("nan"), -0.0, 1.0], chunks=2)
    >>> bool(verify(src, da.from_array([-0.0, 1.0, 3.0, float("nan")], chunks=3)))
    True
    >>> print(verify(src, da.from_array([1.0, -0.0, 3.0, float("nan")], chunks=3)))
    FAILED:
      - dst is not sorted ascending: dst[0] = 1.0 comes before dst[1] = -0.0
    """
    x, y = check_pair(src, dst)
    src_facts = [dask.delayed(_count_and_checksum)(block) for block in x.to_delayed().ravel()]
    dst_facts = [dask.delayed(_chunk_facts)(block, bool(descending)) for block in y.to_delayed().ravel()]
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
    ends: tuple[Any, Any] | None  # order keys of the first and last element
    end_values: tuple[str, str] | None  # the same two elements, as the user sees them


def _checksum(block: Any) -> int:
    """Sum, mod 2^64, of a 64-bit mix of every element's bits (order-independent).

    The mix is SplitMix64's finalizer: a change of one bit in one element
    changes the sum in about half its bits, so damage cannot cancel out.
    """
    if block.dtype.kind == "f":
        # Values, not bits: np.sort itself turns some 0.0 into -0.0 and
        # (float16) rewrites NaN payloads, so all zeros hash alike, all NaNs too.
        xp = namespace(block)
        zero, nan = block.dtype.type(0), block.dtype.type("nan")
        block = xp.where(block == zero, zero, xp.where(xp.isnan(block), nan, block))
    z = block.view(f"u{block.dtype.itemsize}").astype(np.uint64)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return int(z.sum(dtype=np.uint64))


def _count_and_checksum(block: Any) -> tuple[int, int]:
    return len(block), _checksum(block)


def _out_of_order(a: Any, b: Any) -> Any:
    """Where order key ``b`` may not follow ``a``: ascending, NaN last, ``-0.0 == 0.0``."""
    return ~((a <= b) | (b != b))  # b != b: b is NaN, which may follow anything


def _chunk_facts(block: Any, descending: bool) -> _ChunkFacts:
    okeys = order.encode(block, descending)
    n = len(block)
    bad = None
    if n > 1:
        wrong = _out_of_order(okeys[:-1], okeys[1:])
        if bool(wrong.any()):
            bad = int(wrong.argmax())
    return _ChunkFacts(
        n=n,
        checksum=_checksum(block),
        bad=bad,
        bad_pair=None if bad is None else (str(block[bad]), str(block[bad + 1])),
        ends=(okeys[0].item(), okeys[-1].item()) if n else None,
        end_values=(str(block[0]), str(block[-1])) if n else None,
    )


def _first_unsorted(facts: list[_ChunkFacts]) -> tuple[int | None, tuple[str, str] | None]:
    """The first out-of-order position over all chunks and their boundaries, with its pair."""
    offset = 0
    previous = None  # (position, order key, value) of the last element so far
    for f in facts:
        if f.n:
            if previous is not None and bool(_out_of_order(np.asarray(previous[1]), np.asarray(f.ends[0]))):
                return previous[0], (previous[2], f.end_values[0])
            if f.bad is not None:
                return offset + f.bad, f.bad_pair
            previous = (offset + f.n - 1, f.ends[1], f.end_values[1])
        offset += f.n
    return None, None
