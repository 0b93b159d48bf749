"""The NumPy backend: runs and merges on the CPU, anywhere, no GPU needed."""

from __future__ import annotations

import contextlib
from typing import Any, Literal, Sequence

import numpy as np

from gpusort.backends import SORTED_SAMPLE, Pair
from gpusort.keys import order
from gpusort.keys.composite import argsort_column, argsort_rows, take_rows


class NumpyBackend:
    name = "numpy"

    def sort_run(self, keys: np.ndarray | list[np.ndarray], values: np.ndarray | None = None, *,
                 overwrite: bool = False) -> Pair:
        if isinstance(keys, list):  # parts: joined, a temporary (unless there is one part)
            keys, overwrite = (np.concatenate(keys), True) if len(keys) > 1 else (keys[0], overwrite)
        if keys.ndim == 2:  # composite keys past 64 bits: rows compared as one integer
            order = argsort_rows(keys)
            return take_rows(keys, order), None if values is None else take_rows(values, order)
        if values is None:
            if overwrite and keys.dtype.kind != "f" and keys.flags.writeable:
                keys.sort(kind="stable" if keys.dtype.itemsize == 1 else None)  # no copy of a temporary
                return keys, None
            return _sort_keys(keys), None
        order = argsort_column(keys)
        return keys[order], take_rows(values, order)

    def merge_runs(self, runs: Sequence[Pair], *, scratch: Pair | None = None) -> Pair:
        """Stable k-way merge of the runs: a stable sort of their concatenation that finds the runs.

        NumPy has no merge primitive, but its sorts are one here.  With values,
        the stable argsort: timsort finds the P sorted runs of the concatenation
        in one linear scan and merges them pairwise, balanced, with galloping
        -- n·log2(P) comparisons, in C, ties kept in run order (for 8- and
        16-bit keys it is a linear radix pass).  Keys alone take the same
        timsort, in place on the concatenation for integer keys
        (:func:`_sort_keys` with ``runs`` for floats), several times faster
        than the SIMD quicksort, which does not see runs.  A vectorized co-rank
        merge tree (searchsorted + scatter per level) is slower still, with or
        without values.
        """
        runs = [r for r in runs if len(r[0])] or list(runs[:1])
        # concatenate would canonicalize dtypes (native byte order, structured
        # padding dropped): keep the dtypes the graph declares.  A scratch is
        # the concatenation already, given up by the caller.
        keys = scratch[0] if scratch is not None else np.concatenate([k for k, _ in runs], dtype=runs[0][0].dtype)
        if runs[0][1] is None:
            if keys.ndim == 2:
                return take_rows(keys, argsort_rows(keys, runs=True)), None
            if keys.dtype.kind != "f":  # the concatenation is ours: timsort merges it in place, no second copy
                keys.sort(kind="stable")
                return keys, None
            return _sort_keys(keys, runs=True), None
        values = scratch[1] if scratch is not None else np.concatenate([v for _, v in runs], dtype=runs[0][1].dtype)
        order = argsort_rows(keys, runs=True) if keys.ndim == 2 else np.argsort(keys, kind="stable")
        return take_rows(keys, order), take_rows(values, order)

    def is_sorted(self, keys: np.ndarray | Sequence[np.ndarray]) -> bool:
        if isinstance(keys, (list, tuple)):  # parts end to end: their ends decide first
            parts = [p for p in keys if len(p)]
            ends = np.concatenate([p[[0, -1]] for p in parts]) if parts else np.empty(0)
            return _ascending(ends) and all(self.is_sorted(p) for p in parts)
        step = max(1, len(keys) // SORTED_SAMPLE)
        return _ascending(keys[::step]) and (step == 1 or _ascending(keys))

    def run_limit(self, keys: Any, values: Any = None) -> int:
        return 2**63  # host memory: Dask's memory limits bound what a worker holds

    def searchsorted(
        self, sorted_keys: np.ndarray, needles: Any, side: Literal["left", "right"] = "left"
    ) -> np.ndarray:
        return np.searchsorted(sorted_keys, needles, side=side)

    def sort_rows(self, okeys: np.ndarray) -> np.ndarray:
        return np.sort(okeys, axis=-1)

    def lexsort_rows(self, columns: Sequence[np.ndarray]) -> np.ndarray:
        return np.lexsort(columns, axis=-1).astype(np.int64, copy=False)

    def sort_parts(self, keys: Sequence[np.ndarray], values: Any, encode: Any, decode: Any,
                   temporaries: int = 2) -> None:
        return None  # no one-step path: the host sorts the chunks as a run

    def sort_host_rows(self, blocks: Sequence[np.ndarray], sort: Any) -> None:
        return None  # host rows sort where they are, on this backend

    def beyond(self, blocks: Sequence[np.ndarray], pivot: Any, complement: bool, room: int
               ) -> tuple[int, np.ndarray | None]:
        kept = []
        for block in blocks:
            okeys = order.encode(block, False, "exact")
            kept.append(okeys[(~okeys if complement else okeys) > pivot])
        kept = np.concatenate(kept)
        return len(kept), (kept if len(kept) <= room else None)

    def scan(self, block: np.ndarray, descending: bool | None) -> tuple[int, int | None]:
        return _scan(block, descending)

    def default_budget(self) -> int:
        return 0  # host memory: Dask's memory limits bound what a worker holds

    def upload(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts)  # a new array, as the GPU's would be

    def budgeted(self, nbytes: int) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def download(self, pair: Pair, out: Pair | None = None) -> Pair:
        if out is None:
            return pair
        for dst, src in zip(out, pair):
            if src is not None:
                dst[...] = src
        return out


BACKEND = NumpyBackend()

#: Elements per slice of a chunk on the CPU.  Small enough that the slice and
#: the hash's two uint64 buffers (3 x 2 MiB) stay in cache across the passes,
#: large enough that the dozen ufunc calls per slice rarely take the GIL:
#: threads handing it over every few microseconds run slower than one.
#: Smaller slices contend for the GIL, larger ones fall out of cache; this
#: size is the fastest of a sweep (benchmarks/NOTES.md: ``verification``'s slice).
SLICE = 2**18

#: SplitMix64's constants: the increment and the finalizer's two multipliers.
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _bits(block: Any) -> Any:
    """The elements' bits as unsigned integers of their width (a view)."""
    return block.view(f"u{block.dtype.itemsize}")


def _scan(block: np.ndarray, descending: bool | None) -> tuple[int, int | None]:
    """(checksum, first local ``i`` with ``block[i + 1]`` out of order after ``block[i]``) of a NumPy chunk.

    The checksum is the sum, mod 2^64, of a 64-bit mix of every element's
    exact bits (order-independent): SplitMix64's finalizer of the bits
    zero-extended to 64, so a change of one bit in one element changes the
    sum in about half its bits and damage cannot cancel out.  The sort
    returns exactly the input's bits, so ``-0.0`` and ``0.0`` hash apart,
    and so do NaNs of other payloads; :meth:`gpusort.backends.cupy.CupyBackend.scan` gives the same sums.

    One pass over slices of :data:`SLICE` elements: each is hashed with
    in-place ufuncs into two reused buffers and, unless ``descending`` is
    None, checked for order (with the next slice's first element) while it
    is in cache.  Order keys tie ``-0.0`` with ``0.0`` and NaN with NaN.
    """
    bits, n = _bits(block), len(block)
    z = np.empty(min(n, SLICE), np.uint64)
    t = np.empty_like(z)
    total, bad = 0, None
    for a in range(0, n, SLICE):
        m = min(SLICE, n - a)
        zs, ts = z[:m], t[:m]
        np.add(bits[a: a + m], _MIX[0], out=zs)  # zero-extends narrower bits to uint64
        for shift, multiplier in ((30, _MIX[1]), (27, _MIX[2])):
            np.right_shift(zs, np.uint64(shift), out=ts)
            np.bitwise_xor(zs, ts, out=zs)
            np.multiply(zs, multiplier, out=zs)
        np.right_shift(zs, np.uint64(31), out=ts)
        np.bitwise_xor(zs, ts, out=zs)
        total += int(zs.sum(dtype=np.uint64))  # wraps mod 2^64
        if descending is not None and bad is None:
            okeys = order.encode(block[a: a + m + 1], descending, "tied")
            wrong = okeys[:-1] > okeys[1:]
            if wrong.any():
                bad = a + int(wrong.argmax())
    return total % 2**64, bad


def _ascending(keys: np.ndarray) -> bool:
    """Whether 1-D ``keys`` never descend, NaN last."""
    a, b = keys[:-1], keys[1:]
    if keys.dtype.kind == "f":
        return not ((b < a) | (np.isnan(a) & ~np.isnan(b))).any()
    return not (b < a).any()


def _sort_keys(keys: np.ndarray, runs: bool = False) -> np.ndarray:
    """Keys sorted ascending, NaN last, keys that are equal but differ in bits in input order.

    Integer keys that are equal are equal bits, so the fastest sort serves:
    the SIMD quicksort, but for 1-byte keys (and bool) the radix sort behind
    kind="stable" (far faster than the quicksort on so few values), and for
    keys that are sorted ``runs`` end to end the timsort behind it, which
    merges them.  Floats
    (order keys of scheme ``"float"``) are sorted as their exact integer
    keys -- NumPy's SIMD float16 sort misplaces ``-0.0`` and NaN on some
    CPUs -- and where the zeros or the NaNs then hold several bit patterns,
    those classes are written again in input order, as
    ``np.sort(kind="stable")`` leaves them.
    """
    kind = "stable" if runs or keys.dtype.itemsize == 1 else None
    if keys.dtype.kind != "f":
        return np.sort(keys, kind=kind)
    okeys = np.sort(order.encode(keys, False, "exact"), kind=kind)
    out = order.decode(okeys, keys.dtype, False, "exact")
    present = order.tie_keys(okeys, keys.dtype, False, np.searchsorted)
    if order.ties_differ(present, keys.dtype, False):
        zeros = np.searchsorted(out, 0.0, "left"), np.searchsorted(out, 0.0, "right")
        out[zeros[0]:zeros[1]] = keys[keys == 0]
        nans = np.searchsorted(out, np.nan, "left")
        out[nans:] = keys[np.isnan(keys)]
    return out
