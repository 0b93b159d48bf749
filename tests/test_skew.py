"""Skewed keys and skewed chunks: output chunks stay exactly balanced, splitting stays cheap.

Sample-based splitters that pick *key values* (Dask DataFrame's ``sort_values``,
dask/dask#8939) cannot cut a run of equal keys, so on these inputs their
partitions skew or the sort fails.  gpusort splits by rank in the strict order
``(key, run, position)``: every output chunk gets exactly its length whatever
the keys, and the splitting moves at most ``corank.split_cost`` keys -- which
is measured here from the tasks' real results.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

import gpusort
from gpusort.keys import corank, order

N = 2**18


def skewed_keys(name: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if name == "all-equal":
        return np.full(n, 7, dtype=np.int64)
    if name == "two-values":
        return rng.integers(0, 2, n).astype(np.int64) * 10**12
    if name == "zipf-1.1":
        return rng.zipf(1.1, n).astype(np.int64)  # half the keys are 1, a tail to ~2^62
    if name == "99%-one-value":
        x = np.full(n, 5, dtype=np.int64)
        hit = rng.random(n) < 0.01
        x[hit] = rng.integers(-(2**40), 2**40, int(hit.sum()))
        return x
    if name == "sorted":
        return np.sort(rng.integers(-(2**40), 2**40, n))
    if name == "reverse-sorted":
        return np.sort(rng.integers(-(2**40), 2**40, n))[::-1].copy()
    if name == "99%-nan":
        x = np.full(n, np.nan)
        hit = rng.random(n) < 0.01
        x[hit] = rng.standard_normal(int(hit.sum()))
        return x
    raise ValueError(name)


@pytest.fixture(autouse=True)
def one_chunk_per_task():
    """These tests are about the splitters: keep them splitting every chunk, unbatched."""
    with dask.config.set({"gpusort.task-bytes": 0}):
        yield


DISTRIBUTIONS = ["all-equal", "two-values", "zipf-1.1", "99%-one-value", "sorted", "reverse-sorted", "99%-nan"]


class SplitBytes:
    """Bytes that the splitters really take off the runs: every sample and window key cut.

    The splitters run inside one task (``splits-``), so what they cut is
    counted where they cut it, in :mod:`gpusort.keys.corank`.
    """

    def __init__(self):
        self.bytes = {"samples": 0, "windows": 0}

    def __enter__(self):
        self.patch = pytest.MonkeyPatch()
        for name, cut in (("samples", corank.samples), ("windows", corank.window_keys)):
            def counted(*args, _cut=cut, _name=name):
                out = _cut(*args)
                self.bytes[_name] += out.nbytes
                return out
            self.patch.setattr(corank, cut.__name__, counted)
        return self

    def __exit__(self, *exc):
        self.patch.undo()


def split_bound(x_chunks, n, out_chunk, dtype) -> int:
    """``corank.split_cost`` in bytes for this sort: the promise to check."""
    nbounds = len(corank.output_ranks(n, out_chunk)) - 2
    g = corank.sample_stride(n, len(x_chunks), nbounds)
    return corank.split_cost(x_chunks, nbounds, g) * order.order_dtype(dtype).itemsize


def block_lengths(arr: da.Array) -> list[int]:
    """Lengths of the computed blocks, not the declared ones."""
    return [len(b) for b in dask.compute(*arr.to_delayed().ravel())]


def balanced(n: int, chunk: int) -> list[int]:
    return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_skewed_keys_exact_balanced_and_cheap_to_split(name, descending):
    x = skewed_keys(name, N)
    in_chunk, out_chunk = N // 16, 20_000  # 16 runs; 13 output chunks, the last 2,144 long
    keys = da.from_array(x, chunks=in_chunk)
    positions = gpusort.argsort(keys, descending=descending, chunks=out_chunk)
    sorted_keys = gpusort.sort(keys, descending=descending, chunks=out_chunk)

    want_lengths = balanced(N, out_chunk)
    assert list(positions.chunks[0]) == want_lengths == list(sorted_keys.chunks[0])
    spy = SplitBytes()
    with spy, dask.config.set(scheduler="threads"):
        assert block_lengths(positions) == want_lengths
        got_positions, got_keys = dask.compute(positions, sorted_keys)

    if descending:
        want = np.argsort(np.where(np.isnan(x), np.inf, -x) if x.dtype.kind == "f" else ~x, kind="stable")
    else:
        want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(got_positions, want)
    np.testing.assert_array_equal(got_keys, x[want])

    # Three computes above (block lengths, argsort, sort), each splitting once.
    bound = split_bound(keys.chunks[0], N, out_chunk, x.dtype)
    moved = sum(spy.bytes.values())
    assert 0 < moved <= 3 * bound, (spy.bytes, bound)
    assert bound <= 0.1 * x.nbytes  # splitting moves a small fraction of the data


def test_all_equal_keys_in_hundreds_of_chunks_keep_input_order():
    """Stability is the whole order here: argsort must be 0, 1, 2, ..."""
    n = 150_001
    keys = da.from_array(np.zeros(n, dtype=np.float32), chunks=997)
    got = gpusort.argsort(keys, chunks=1_003)
    assert len(got.chunks[0]) == 150 and set(got.chunks[0][:-1]) == {1_003}
    np.testing.assert_array_equal(got.compute(scheduler="threads"), np.arange(n))


def test_skewed_chunk_lengths():
    """One huge run beside many tiny and empty ones: still exact and balanced."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, 50_000).astype(np.int16)
    chunks = (1, 0, 2, 3, 0, 1, 49_000, 993)
    keys = da.from_array(x, chunks=(chunks,))
    spy = SplitBytes()
    with spy:
        values = da.from_array(np.arange(50_000), chunks=(chunks,))
        k, v = dask.compute(*gpusort.sort_by_key(keys, values, chunks=4_999), scheduler="threads")
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(v, want)
    np.testing.assert_array_equal(k, x[want])
    assert sum(spy.bytes.values()) <= split_bound(chunks, 50_000, 4_999, x.dtype)
