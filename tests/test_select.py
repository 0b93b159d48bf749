"""gpusort.topk against an independent oracle: the reference sort, sliced.

NaN (and NaT) are the largest keys, as in NumPy's order and
``dask.array.topk``; the selected elements must be input elements, bit for
bit, and in order of value.
"""

from __future__ import annotations

import collections

import dask
import dask.array as da
import numpy as np
import pytest

import gpusort
from reference import CUPY_DTYPES, KEY_DTYPES, ref_argsort
from test_special_values import CHUNKINGS, specials


def bits(a: np.ndarray) -> list[int]:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}").tolist()


def assert_topk(got: np.ndarray, x: np.ndarray, k: int) -> None:
    ascending = x[ref_argsort(x)]
    want = ascending[::-1][:k] if k > 0 else ascending[:-k]
    assert got.dtype == x.dtype and got.shape == want.shape
    if x.dtype.kind in "mM":
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    else:
        np.testing.assert_array_equal(got, want)  # values in order; NaN matches NaN, -0.0 matches 0.0
    # Every element is an input element, each at most as often as in the input.
    assert not collections.Counter(bits(got)) - collections.Counter(bits(x))


@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_special_values_every_k_every_chunking(dtype):
    x = specials(dtype)
    for chunks in CHUNKINGS:
        for k in (1, 2, 5, 23, 24, -1, -3, -24):
            assert_topk(gpusort.topk(da.from_array(x, chunks=(chunks,)), k).compute(), x, k)


@pytest.mark.parametrize("pattern", ["random", "equal", "few", "sorted", "reversed"])
def test_hundreds_of_chunks_and_a_narrow_tree(pattern):
    rng = np.random.default_rng(7)
    x = rng.integers(-(2**62), 2**62, 30_000)
    x = {"random": x, "equal": np.full_like(x, 5), "few": rng.choice(x[:3], x.size),
         "sorted": np.sort(x), "reversed": np.sort(x)[::-1].copy()}[pattern]
    d = da.from_array(x, chunks=97)  # 310 chunks
    for k in (1, 100, 1000, -100):
        assert_topk(gpusort.topk(d, k, split_every=2).compute(), x, k)
    with dask.config.set({"gpusort.task-bytes": 0}):  # a task per chunk: the tree's every level runs
        for k, split_every in ((1, 2), (1000, 2), (-100, 3), (100, None)):
            y = gpusort.topk(d, k, split_every=split_every)
            assert_topk(y.compute(), x, k)
        assert len(y.dask) > 310  # one task per chunk, then the tree
    # The same keys as dask.array.topk, a peer on NaN-free data.
    np.testing.assert_array_equal(gpusort.topk(d, 50).compute(), da.topk(d, 50).compute())


SELECT_PATTERNS = ["random", "equal", "few", "sorted", "reversed", "two-level", "extremes", "misleading"]


def select_keys(pattern: str, n: int, dtype, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if pattern == "equal":
        return np.full(n, x[0])
    if pattern == "few":
        return rng.choice(x[:3], n)
    if pattern == "sorted":
        return np.sort(x)
    if pattern == "reversed":
        return np.sort(x)[::-1].copy()
    if pattern == "two-level":  # a block of ties just above most keys: pivots land in it
        return np.where(rng.random(n) < 0.3, info.max - 1, x % 100).astype(dtype)
    if pattern == "misleading":  # what a strided sample of 16 sees is the largest key: pivots land too high
        x[:: max(1, n // 16)] = info.max
        return x
    if pattern == "extremes":
        return rng.choice(np.array([info.min, info.max, 0], dtype=dtype), n)
    return x


@pytest.mark.parametrize("pattern", SELECT_PATTERNS)
@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int8])
def test_sample_select_every_branch(pattern, dtype, monkeypatch):
    # Selection all the way down (no "small" cut-off) and a tiny sample, so
    # pivots mislead and every branch of the three-way partition runs.
    from gpusort.engine import select

    monkeypatch.setattr(select, "SAMPLE", 16)
    rng = np.random.default_rng(11)
    x = select_keys(pattern, 5000, dtype, rng)
    before = x.copy()
    for k in (1, 2, 17, 100, 2500, 4999, 5000):
        got = np.sort(select.largest(x, k, small=0))
        np.testing.assert_array_equal(got, np.sort(x)[len(x) - k:])
        smallest = np.sort(select.survivors(x, -k)) if k < len(x) else np.sort(x)
        np.testing.assert_array_equal(smallest, np.sort(x)[:k])
    np.testing.assert_array_equal(x, before)


def test_topk_selects_within_chunks(monkeypatch):
    # Chunks past select.SMALL, so the chunk and combine steps select rather than sort.
    from gpusort.engine import select

    monkeypatch.setattr(select, "SMALL", 64)
    rng = np.random.default_rng(5)
    for pattern in SELECT_PATTERNS:
        x = select_keys(pattern, 20_000, np.int64, rng)
        for k in (1, 100, -100, 3000):
            assert_topk(gpusort.topk(da.from_array(x, chunks=4000), k, split_every=2).compute(), x, k)
    f = np.where(rng.random(20_000) < 0.5, np.nan, rng.standard_normal(20_000)).astype(np.float32)
    f[::7] = -0.0
    f[::11] = 0.0
    for k in (100, -100, 15_000):
        assert_topk(gpusort.topk(da.from_array(f, chunks=3000), k).compute(), f, k)


def test_lazy_and_nothing_modified():
    x = np.array([3.0, np.nan, -0.0, 1.0])
    before = x.copy()
    y = gpusort.topk(x, 2)
    assert isinstance(y, da.Array) and y.shape == (2,) and y.dtype == x.dtype
    assert_topk(y.compute(), x, 2)
    np.testing.assert_array_equal(x.view(np.uint64), before.view(np.uint64))
    big_endian = np.arange(10).astype(">i4")
    got = gpusort.topk(big_endian, 3)
    assert got.dtype == big_endian.dtype and got.compute().dtype == big_endian.dtype
    assert got.compute().tolist() == [9, 8, 7]


@pytest.mark.parametrize("k", [1.5, True, "3", None])
def test_bad_k_is_named(k):
    with pytest.raises(TypeError, match=r"k must be an int \(k > 0: largest, k < 0: smallest\); got"):
        gpusort.topk(np.arange(10), k)


@pytest.mark.parametrize("shape, axis", [((9,), -1), ((0,), 0), ((6, 4), 0), ((6, 4), 1), ((0, 5), 1), ((3, 0), 0)],
                         ids=str)
def test_k_past_the_axis_or_zero_as_dask_topk(shape, axis):
    """|k| past the axis: every key, in order; k = 0: none.  As dask.array.topk computes them."""
    rng = np.random.default_rng(5)
    x = np.where(rng.random(shape) < 0.2, np.nan, rng.integers(-3, 4, shape).astype(np.float64))
    d = da.from_array(x, chunks=2)
    n = x.shape[axis]
    for k in (n + 3, -(n + 3), n, -n, 0, np.int64(n + 1)):
        got = gpusort.topk(d, k, axis=axis)
        computed = got.compute()
        peer = da.topk(d, k, axis=axis).compute()  # its values; its declared shape says |k|, not n
        assert got.shape == computed.shape == peer.shape, (k, got.shape, computed.shape, peer.shape)
        np.testing.assert_array_equal(computed, peer)
        ends = np.sort(x, axis=axis)  # NumPy's order, NaN last: the smallest first, the largest last
        want = np.take(np.flip(ends, axis) if k > 0 else ends, np.arange(min(abs(k), n)), axis=axis)
        np.testing.assert_array_equal(computed, want)


def topk_oracle(x: np.ndarray, k: int, axis: int) -> np.ndarray:
    """dask.array.topk's answer from the reference argsort, row by row."""
    rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    out = np.stack([row[ref_argsort(row)] for row in rows]) if rows.size else rows
    out = out[:, ::-1][:, :k] if k > 0 else out[:, :-k]
    return np.moveaxis(out.reshape(*np.moveaxis(x, axis, -1).shape[:-1], abs(k)), -1, axis)


def assert_rows(got: np.ndarray, want: np.ndarray, x: np.ndarray, axis: int) -> None:
    """Values as the oracle's (NaN matches NaN, -0.0 matches 0.0), and every row's elements the input row's, bit for bit."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    for row, source in zip(np.moveaxis(got, axis, -1).reshape(-1, got.shape[axis]),
                           np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])):
        assert not collections.Counter(bits(row)) - collections.Counter(bits(source))


N_D_CHUNKINGS = [(4, 8, 8), (10, 20, 30), (1, 3, 7), ((3, 0, 7), (20,), (29, 1))]


@pytest.mark.parametrize("chunks", N_D_CHUNKINGS, ids=str)
def test_n_d_along_every_axis(chunks):
    rng = np.random.default_rng(17)
    x = np.resize(specials("float64"), (10, 20, 30))
    x = np.where(rng.random(x.shape) < 0.6, rng.standard_normal(x.shape).round(1), x)
    d = da.from_array(x, chunks=chunks)
    for axis in (0, 1, 2, -1):
        for k in (1, 5, -5, x.shape[axis], -x.shape[axis]):
            for split_every in (None, 2):
                got = gpusort.topk(d, k, axis=axis, split_every=split_every)
                assert got.chunks[axis] == (abs(k),)
                assert_rows(got.compute(), topk_oracle(x, k, axis % 3), x, axis % 3)
    assert_rows(gpusort.topk(d, 7, None).compute(), topk_oracle(x.ravel(), 7, 0), x.ravel(), 0)


def test_bad_axis_and_split_every_are_named():
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"axis=2 is out of bounds for 2-D x"):
        gpusort.topk(x, 1, axis=2)
    with pytest.raises(ValueError, match=r"split_every=1; use an int of at least 2"):
        gpusort.topk(np.arange(5), 1, split_every=1)
    with pytest.raises(ValueError, match=r"out of bounds for 0-d x; use axis=None"):
        gpusort.topk(np.float64(3.0), 1)
    assert gpusort.topk(np.float64(3.0), 1, axis=None).compute().tolist() == [3.0]


@pytest.mark.gpu
def test_cupy_chunks_select_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    x = specials("float32")
    x = np.concatenate([x, np.random.default_rng(3).standard_normal(10_000).astype(np.float32)])
    d = da.from_array(cupy.asarray(x), chunks=1000, asarray=False)
    for k in (7, -7, 500):
        got = gpusort.topk(d, k).compute()
        assert type(got).__module__.startswith("cupy")
        assert_topk(cupy.asnumpy(got), x, k)
    # Chunks large enough that the selection runs on the GPU, every pattern.
    rng = np.random.default_rng(9)
    for pattern in SELECT_PATTERNS:
        x = select_keys(pattern, 300_000, np.int64, rng)
        d = da.from_array(cupy.asarray(x), chunks=60_000, asarray=False)
        for k in (1, 100, -100, 5000):
            assert_topk(cupy.asnumpy(gpusort.topk(d, k).compute()), x, k)


@pytest.mark.gpu
def test_cupy_chunks_n_d_along_every_axis():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(19)
    x = np.where(rng.random((10, 20, 30)) < 0.1, np.nan, rng.standard_normal((10, 20, 30))).astype(np.float32)
    x[:, :, ::7] = -0.0
    for chunks in N_D_CHUNKINGS:
        d = da.from_array(cupy.asarray(x), chunks=chunks, asarray=False)
        for axis in (0, 1, 2):
            for k in (1, 5, -5):
                got = gpusort.topk(d, k, axis=axis).compute()
                assert type(got).__module__.startswith("cupy")
                assert_rows(cupy.asnumpy(got), topk_oracle(x, k, axis), x, axis)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [d for d in CUPY_DTYPES if d in KEY_DTYPES])
def test_cupy_chunks_select_from_raw_keys(dtype):
    # Chunks past SMALL and 2|k|, so the first round encodes in the fused pass
    # (select._encoded_beyond): every real dtype CuPy holds, special values
    # spread through random keys and packed together in one chunk.
    cupy = pytest.importorskip("cupy")
    from gpusort.engine import select

    rng = np.random.default_rng(13)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        noise = (rng.standard_normal(60_000) * 1000).astype(dt)
    elif dt.kind == "b":
        noise = rng.random(60_000) < 0.5
    else:
        info = np.iinfo(dt)
        noise = rng.integers(info.min, info.max, 60_000, dtype=dt, endpoint=True)
    x = noise.copy()
    x[rng.choice(x.size, 2000, replace=False)] = np.resize(specials(dtype), 2000)
    x[:10_000] = np.resize(specials(dtype), 10_000)
    d = da.from_array(cupy.asarray(x), chunks=10_000, asarray=False)
    for k in (1, 100, -100, 2000, -2000):
        assert_topk(cupy.asnumpy(gpusort.topk(d, k).compute()), x, k)
    if dt.itemsize >= 2 and dt.kind != "b":  # keys distinct enough that the fused pass decides, with no fallback
        # One block, and a batch of blocks of uneven lengths (an empty one, a
        # tiny one) that share one pivot, one buffer and one count.
        for cut in ([0, 20_000], [0, 7, 7, 9_000, 20_000]):
            blocks = [cupy.asarray(noise[a:b]) for a, b in zip(cut, cut[1:])]
            okeys = gpusort.keys.order.encode(noise[:20_000], False, "exact")
            for k in (100, -100):
                got = select._encoded_beyond(blocks, k)
                assert got is not None and len(got) >= abs(k)
                want = np.sort(okeys)[-k:] if k > 0 else np.sort(okeys)[:-k]
                got = np.sort(cupy.asnumpy(select.survivors(got, k)))
                np.testing.assert_array_equal(got, want)
