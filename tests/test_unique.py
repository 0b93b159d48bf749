"""gpusort.unique against np.unique (NumPy's own implementation is the oracle)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import gpusort
from reference import KEY_DTYPES
from test_special_values import CHUNKINGS, specials


def assert_unique(x: np.ndarray, d: da.Array) -> None:
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    got = [a.compute() for a in gpusort.unique(d, return_index=True, return_inverse=True, return_counts=True)]
    values = got[0]
    assert values.dtype == x.dtype
    if x.dtype.kind in "mM":
        np.testing.assert_array_equal(values.view(np.int64), want[0].view(np.int64))
    else:
        np.testing.assert_array_equal(values, want[0])  # -0.0 matches 0.0: which one np.unique keeps is its sort's
    for name, g, w in zip(("index", "inverse", "counts"), got[1:], want[1:]):
        assert g.dtype == np.int64, name
        np.testing.assert_array_equal(g, w, err_msg=name)
    only = gpusort.unique(d).compute()
    assert only.dtype == x.dtype and len(only) == len(want[0])


@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_special_values_every_chunking(dtype):
    x = specials(dtype)
    for chunks in CHUNKINGS:
        assert_unique(x, da.from_array(x, chunks=(chunks,)))


@pytest.mark.parametrize("pattern", ["equal", "few", "distinct", "sorted", "reversed"])
def test_groups_across_hundreds_of_chunks_and_empty_ones(pattern):
    rng = np.random.default_rng(4)
    n = 5000
    x = {"equal": np.full(n, 7), "few": rng.integers(0, 3, n), "distinct": rng.permutation(n),
         "sorted": np.sort(rng.integers(0, 50, n)), "reversed": np.sort(rng.integers(0, 50, n))[::-1].copy()}[pattern]
    sizes = [0, 1, 0] + [17] * 290 + [n - 1 - 17 * 290 - 2, 0, 2]  # ~300 chunks, empty ones between
    assert_unique(x, da.from_array(x, chunks=(tuple(sizes),)))


def test_n_d_input_is_flattened_and_the_inverse_shaped_like_it():
    x = np.random.default_rng(5).integers(0, 6, (12, 10))
    d = da.from_array(x, chunks=(5, 4))
    values, inverse = gpusort.unique(d, return_inverse=True)
    assert inverse.shape == x.shape
    np.testing.assert_array_equal(values.compute()[inverse.compute()], x)
    assert_unique(x, d)


def test_lazy_and_flags_checked():
    x = np.array([2, 1, 2])
    y = gpusort.unique(x, return_counts=True)
    assert isinstance(y, tuple) and all(isinstance(a, da.Array) for a in y)
    with pytest.raises(TypeError, match=r"return_counts must be True or False; got 'yes'"):
        gpusort.unique(x, return_counts="yes")
    with pytest.raises(TypeError, match=r"x has dtype complex128"):
        gpusort.unique(np.ones(3, complex))


@pytest.mark.gpu
def test_cupy_chunks_group_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    x = np.concatenate([specials("float64"), np.random.default_rng(6).integers(0, 40, 3000).astype(np.float64)])
    d = da.from_array(cupy.asarray(x), chunks=250, asarray=False)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    got = gpusort.unique(d, return_index=True, return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        out = g.compute()
        assert type(out).__module__.startswith("cupy")
        np.testing.assert_array_equal(cupy.asnumpy(out), w)
