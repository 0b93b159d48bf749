"""gpusort.searchsorted against np.searchsorted on the whole sorted array (the oracle)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import gpusort
from reference import KEY_DTYPES, ref_argsort
from test_special_values import CHUNKINGS, specials


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_every_dtype_every_chunking(dtype, side):
    x = specials(dtype)
    s = x[ref_argsort(x)]  # NumPy's order, NaN (NaT) last
    needles = np.concatenate([x, x[:5][::-1]])  # every key, ties, NaN and the extremes
    want = np.searchsorted(s, needles, side=side)
    for chunks in CHUNKINGS:
        got = gpusort.searchsorted(da.from_array(s, chunks=(chunks,)), da.from_array(needles, chunks=4), side=side)
        np.testing.assert_array_equal(got.compute(), want, err_msg=f"chunks={chunks}")


def test_hundreds_of_chunks_needles_of_any_shape_and_lazy():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 1000, 20_000)
    s = gpusort.sort(da.from_array(x, chunks=71))  # 282 chunks, straight from gpusort.sort
    v = rng.integers(-5, 1005, (30, 40))
    got = gpusort.searchsorted(s, da.from_array(v, chunks=(7, 11)), side="right")
    assert got.shape == v.shape and got.chunks == ((7, 7, 7, 7, 2), (11, 11, 11, 7)) and got.dtype == np.int64
    np.testing.assert_array_equal(got.compute(), np.searchsorted(np.sort(x), v, side="right"))
    assert gpusort.searchsorted(s, 500).compute() == np.searchsorted(np.sort(x), 500)
    assert gpusort.searchsorted(np.array([], np.int64), [3, 4]).compute().tolist() == [0, 0]


def test_sorter_and_side_as_numpy_takes_them():
    rng = np.random.default_rng(4)
    x = np.where(rng.random(3000) < 0.05, np.nan, rng.integers(0, 50, 3000).astype(np.float64))
    sorter = np.argsort(x, kind="stable")  # the oracle's, not gpusort's
    needles = np.concatenate([np.arange(-1, 52, 0.5), [np.nan]])
    d = da.from_array(x, chunks=(250,))
    for side in ("left", "right"):
        want = np.searchsorted(x, needles, side, sorter)
        for given in (da.from_array(sorter, chunks=(700,)), sorter, gpusort.argsort(d)):
            got = gpusort.searchsorted(d, da.from_array(needles, chunks=17), side, given)
            np.testing.assert_array_equal(got.compute(), want)
    np.testing.assert_array_equal(x[sorter], np.sort(x))  # nothing the user passed is modified


@pytest.mark.parametrize("sorter_chunks", [None, 97, 1000])
def test_a_dask_sorter_costs_a_sort_not_a_gather(sorter_chunks):
    """Hundreds of chunks: the graph grows with the chunks (no chunk-by-chunk gather), NumPy's answer."""
    rng = np.random.default_rng(8)
    x = rng.integers(-50, 50, 40_000).astype(np.float64)  # ties
    x[rng.random(x.size) < 0.05] = np.nan
    x[rng.random(x.size) < 0.05] = -0.0
    d = da.from_array(x, chunks=100)  # 400 chunks
    sorter = gpusort.argsort(d) if sorter_chunks is None else \
        da.from_array(np.argsort(x, kind="stable"), chunks=sorter_chunks)
    needles = da.from_array(np.concatenate([np.arange(-52, 52, 0.5), [np.nan, -0.0, 0.0]]), chunks=50)
    for side in ("left", "right"):
        got = gpusort.searchsorted(d, needles, side, sorter)
        assert len(got.__dask_graph__()) <= 8 * d.numblocks[0], len(got.__dask_graph__())
        want = np.searchsorted(x, needles.compute(), side, sorter=np.argsort(x, kind="stable"))
        np.testing.assert_array_equal(got.compute(), want)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"sorter is 1-D float64 .* it must hold the integer positions"):
        gpusort.searchsorted(np.arange(3), 1, sorter=np.ones(3))
    with pytest.raises(ValueError, match=r"sorter is 1-D int64 of shape \(2,\).*\(3 of them"):
        gpusort.searchsorted(np.arange(3), 1, sorter=np.arange(2))
    with pytest.raises(ValueError, match=r"side='middle'; use 'left' or 'right'"):
        gpusort.searchsorted(np.arange(3), 1, side="middle")
    with pytest.raises(ValueError, match=r"sorted_x is 2-D"):
        gpusort.searchsorted(np.ones((2, 2)), 1)
    with pytest.raises(TypeError, match=r"sorted_x has dtype complex128"):
        gpusort.searchsorted(np.ones(3, complex), 1)


@pytest.mark.gpu
def test_cupy_chunks_search_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    x = np.sort(np.random.default_rng(1).standard_normal(5000))
    v = np.random.default_rng(2).standard_normal(300)
    got = gpusort.searchsorted(da.from_array(cupy.asarray(x), chunks=333, asarray=False),
                               da.from_array(cupy.asarray(v), chunks=100, asarray=False))
    out = got.compute()
    assert type(out).__module__.startswith("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(out), np.searchsorted(x, v))
    # Needles in the other memory, and a scalar: moved to where the chunks are searched.
    on_gpu = da.from_array(cupy.asarray(x), chunks=333, asarray=False)
    np.testing.assert_array_equal(cupy.asnumpy(gpusort.searchsorted(on_gpu, v).compute()), np.searchsorted(x, v))
    assert int(gpusort.searchsorted(on_gpu, x[17], side="right").compute()) == np.searchsorted(x, x[17], "right")
    on_host = da.from_array(x, chunks=333)
    got = gpusort.searchsorted(on_host, da.from_array(cupy.asarray(v), chunks=100, asarray=False)).compute()
    np.testing.assert_array_equal(got, np.searchsorted(x, v))
