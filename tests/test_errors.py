"""Bad input gets a clear error that names the argument and the fix."""

import dask.array as da
import numpy as np
import pytest

import gpusort

X = da.from_array(np.arange(10), chunks=3)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: gpusort.sort(np.array(["b", "a"])), TypeError, r"x has dtype <U1 \(string\).*convert"),
        (lambda: gpusort.sort(da.from_array(np.array([1j]))), TypeError, r"x has dtype complex128"),
        (lambda: gpusort.sort(np.array([object()])), TypeError, r"x has dtype object"),
        (lambda: gpusort.sort(np.zeros(3, "i4,f8")), TypeError, r"structured"),
        (lambda: gpusort.sort(da.ones((4, 4))), ValueError, r"x is 2-D.*axis=None"),
        (lambda: gpusort.argsort(da.ones((4, 4)), axis=0), ValueError, r"axis=None"),
        (lambda: gpusort.sort(X, axis=1), ValueError, r"axis=1 is out of bounds"),
        (lambda: gpusort.sort(X[X > 3]), ValueError, r"compute_chunk_sizes\(\)"),
        (lambda: gpusort.sort(X, chunks=0), ValueError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=-4), ValueError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=2.5), TypeError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=True), TypeError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, backend="tpu"), ValueError, r"backend='tpu' is not known"),
        (lambda: gpusort.sort(X, descending="yes"), TypeError, r"descending must be True or False"),
        (lambda: gpusort.sort({1: 2}), TypeError, r"x must be a dask array"),
        (lambda: gpusort.sort_by_key(X, np.arange(9)), ValueError, r"values has length 9 but keys has length 10"),
        (lambda: gpusort.sort_by_key(X, da.ones((10, 2))), ValueError, r"values must be 1-D"),
        (lambda: gpusort.sort_by_key(X, np.array([None] * 10)), TypeError, r"values has dtype object"),
        (lambda: gpusort.sort_by_key(X, X[X > 3]), ValueError, r"values has unknown chunk sizes"),
        (lambda: gpusort.sort_by_key(da.ones((2, 5)), X), ValueError, r"keys is 2-D"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_cupy_backend_without_a_gpu_says_what_to_do():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount():
            pytest.skip("a GPU is present, so backend='cupy' is valid here")
    except Exception:
        pass
    with pytest.raises(ValueError, match=r"backend='cupy' needs .*backend='numpy'"):
        gpusort.sort(X, backend="cupy")


def _never(*_):
    raise AssertionError("computed while the graph was being built")


def test_dask_dataframe_columns_refused_without_computing_them():
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    ddf = dd.from_pandas(pd.DataFrame({"a": [3, 1, 2, 5]}), npartitions=2).map_partitions(
        _never, meta=pd.DataFrame({"a": np.zeros(0, np.int64)}))
    for x in (ddf["a"], ddf, ddf.index):
        with pytest.raises(TypeError, match=r"x is a Dask \w+.*to_dask_array\(lengths=True\)"):
            gpusort.sort(x)


def test_a_tuple_of_arrays_is_not_concatenated():
    import dask

    lazy = da.from_delayed(dask.delayed(_never)(), shape=(3,), dtype=np.int64)
    for x in ((lazy, lazy), [np.arange(3), np.arange(3)]):
        with pytest.raises(TypeError, match=r"x is a (tuple|list) of 2 arrays; gpusort sorts one array"):
            gpusort.sort(x)
    # Sequences of scalars, nested or not, are arrays as NumPy reads them.
    assert gpusort.sort((3, 1, 2)).compute().tolist() == [1, 2, 3]
    assert gpusort.sort([[3, 1], [2, 0]], axis=None).compute().tolist() == [0, 1, 2, 3]
