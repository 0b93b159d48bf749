"""Scale: more than 2^31 elements, and a thousand chunks in or out.

The > 2^31 test sorts uint8 keys so that it fits a CI machine: 2.15 GB of
keys in four input chunks, output chunk boundaries beyond 2^31.  It never
holds NumPy's answer: for uint8 keys the sorted output is fixed by the
histogram, so "every output chunk is non-decreasing, chunks meet in order, and
the output histogram equals the input's" proves the output exact.
"""

from __future__ import annotations

import threading
import time

import dask.array as da
import numpy as np
import psutil
import pytest

import gpusort


def histogram(x: np.ndarray) -> np.ndarray:
    """Counts of the 256 uint8 values, in pieces: bincount widens to intp."""
    piece = 2**24
    return sum(np.bincount(x[i:i + piece], minlength=256) for i in range(0, len(x), piece))


def summary(block: np.ndarray) -> np.ndarray:
    """One output chunk as (sorted?, first, last, 256 counts), without copying it."""
    pieces = (block[i:i + 2**24 + 1] for i in range(0, len(block), 2**24))  # overlapping by one
    ordered = all(bool((p[1:] >= p[:-1]).all()) for p in pieces)
    # uint8 needles: int64 ones would make searchsorted widen the whole chunk.
    edges = np.append(np.searchsorted(block, np.arange(256, dtype=np.uint8)), len(block))
    counts = np.diff(edges) if ordered else np.zeros(256, np.int64)  # counts are valid once ordered
    return np.concatenate(([ordered, block[0], block[-1]], counts)).astype(np.int64)[None, :]


class PeakRSS:
    """The highest resident memory of this process while inside the block."""

    def __enter__(self):
        self.base = self.peak = psutil.Process().memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        proc = psutil.Process()
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_more_than_2_31_uint8_keys_no_index_overflow():
    n = 2**31 + 2**20 + 7
    in_chunk, out_chunk = 600_000_000, 2**29  # 4 runs; 5 outputs, boundaries at 2^31 and past it

    def make(block_info=None):
        (start, stop), = block_info[None]["array-location"]
        return np.random.default_rng(start).integers(0, 256, stop - start, dtype=np.uint8)

    keys = da.map_blocks(make, chunks=(da.core.normalize_chunks(in_chunk, (n,))[0],), dtype=np.uint8,
                         meta=np.empty(0, np.uint8))
    out = gpusort.sort(keys, chunks=out_chunk)
    assert out.chunks == ((2**29,) * 4 + (n - 2**31,),)
    per_chunk_in = keys.map_blocks(lambda b: histogram(b)[None, :], chunks=((1,) * keys.numblocks[0], (256,)),
                                   new_axis=1, dtype=np.int64, meta=np.empty((0, 0), np.int64))
    per_chunk_out = out.map_blocks(summary, chunks=((1,) * out.numblocks[0], (259,)), new_axis=1,
                                   dtype=np.int64, meta=np.empty((0, 0), np.int64))
    start = time.perf_counter()
    with PeakRSS() as rss:
        # Two passes, the input made twice: a chunk is dropped as soon as its
        # run exists, so the keys are held about twice, not three times.
        hist_in = per_chunk_in.sum(axis=0).compute(scheduler="threads")
        outs = per_chunk_out.compute(scheduler="threads")
    seconds = time.perf_counter() - start
    print(f"\n{n:,} uint8 keys: {seconds:.1f} s, peak RSS {rss.peak / 2**30:.2f} GiB "
          f"({(rss.peak - rss.base) / 2**30:.2f} GiB above the start)")

    assert outs[:, 0].all(), "an output chunk is out of order"
    assert (outs[1:, 1] >= outs[:-1, 2]).all(), "output chunks out of order"
    np.testing.assert_array_equal(outs[:, 3:].sum(axis=0), hist_in)
    assert hist_in.sum() == n
    assert rss.peak - rss.base < 8 * 2**30  # measured 4.9 GiB: keys ~2.3 times over


def two_values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, n).astype(np.int32)


@pytest.mark.timeout(120)
def test_a_thousand_chunks_in():
    n = 1_000 * 61
    x = two_values(n, 1)  # ties everywhere: splits fall inside runs of equal keys
    keys = da.from_array(x, chunks=61)
    assert keys.numblocks[0] == 1_000
    positions = gpusort.argsort(keys, chunks=2_048)
    assert positions.numblocks[0] == 30
    np.testing.assert_array_equal(positions.compute(scheduler="threads"), np.argsort(x, kind="stable"))


@pytest.mark.timeout(120)
def test_a_thousand_chunks_out():
    n = 30 * 3_001
    x = two_values(n, 2)
    keys = da.from_array(x, chunks=3_001)
    out = gpusort.sort(keys, descending=True, chunks=90)
    assert out.numblocks[0] == 1_001 and out.chunks[0][-1] == n - 1_000 * 90
    np.testing.assert_array_equal(out.compute(scheduler="threads"), np.sort(x)[::-1])


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_chunk_longer_than_2_31():
    """One CuPy chunk of more than 2^31 keys: 64-bit offsets in the kernels."""
    cupy = pytest.importorskip("cupy")
    n = 2**31 + 2**20 + 7
    if cupy.cuda.runtime.memGetInfo()[0] < 8 * n:
        pytest.skip(f"needs {8 * n / 2**30:.0f} GiB of free GPU memory")
    x = cupy.random.default_rng(3).integers(0, 256, n, dtype=cupy.uint8)
    hist_in = cupy.bincount(x, minlength=256)
    keys = da.from_array(x, chunks=n, asarray=False)  # one chunk, one run
    out = gpusort.sort(keys, chunks=2**30)
    assert out.chunks == ((2**30, 2**30, n - 2**31),)
    hist_out, last = cupy.zeros(256, cupy.int64), None
    for block in out.to_delayed().ravel():
        b = block.compute(scheduler="sync")
        assert isinstance(b, cupy.ndarray) and len(b) in (2**30, n - 2**31)
        assert bool((b[1:] >= b[:-1]).all()), "an output chunk is out of order"
        assert last is None or int(b[0]) >= last
        last = int(b[-1])
        hist_out += cupy.bincount(b, minlength=256)
        del b
    assert bool((hist_out == hist_in).all())
