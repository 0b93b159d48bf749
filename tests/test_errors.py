"""Bad input gets a clear error that names the argument and the fix."""

import re

import dask.array as da
import numpy as np
import pytest

import gpusort

X = da.from_array(np.arange(10), chunks=3)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: gpusort.topk(np.array(["b", "a"]), 1), TypeError, r"x has dtype <U1 \(string\).*here \(gpusort.sort"),
        (lambda: gpusort.sort(np.array([object()])), TypeError, r"x has dtype object"),
        (lambda: gpusort.sort(np.zeros(3, "i4,O")), TypeError, r"x\['f1'\] has dtype object"),
        (lambda: gpusort.sort(np.zeros(3, np.dtype([]))), TypeError, r"x has dtype \[\] \(structured\).*no bytes"),
        (lambda: gpusort.argsort(np.array(["b", None])), TypeError, r"x has dtype object.*astype\('U'\)"),
        # chunks= is the output chunk length of 1-D sorts; along an axis the output keeps x's chunks.
        (lambda: gpusort.sort(da.ones((4, 4)), axis=-1, chunks=2), ValueError, r"chunks"),
        (lambda: gpusort.argsort(da.ones((4, 4)), axis=0, chunks=2), ValueError, r"chunks"),
        (lambda: gpusort.sort(np.ones((2, 3, 4)), axis=1, chunks=1), ValueError, r"chunks"),
        (lambda: gpusort.sort(X, axis=1.0), (TypeError, ValueError), r"axis"),
        (lambda: gpusort.argsort(da.ones((4, 4)), axis="0"), (TypeError, ValueError), r"axis"),
        (lambda: gpusort.sort(da.ones((4, 4)), axis=True), (TypeError, ValueError), r"axis"),
        (lambda: gpusort.sort(X[X > 3]), ValueError, r"compute_chunk_sizes\(\)"),
        (lambda: gpusort.sort(X, chunks=0), ValueError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=-4), ValueError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=2.5), TypeError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, chunks=True), TypeError, r"chunks must be a positive int"),
        (lambda: gpusort.sort(X, backend="tpu"), ValueError, r"backend='tpu' is not known"),
        # Empty N-D keys have nothing to sort, but their arguments are checked all the same.
        (lambda: gpusort.argsort(np.zeros((0, 0), bool), axis=-2, backend="NumPy"), ValueError, r"backend"),
        (lambda: gpusort.sort(np.zeros((0, 3)), axis=0, gpu_memory_budget="x"), ValueError, r"gpu_memory_budget"),
        (lambda: gpusort.sort(X, descending="yes"), TypeError, r"descending must be True or False"),
        (lambda: gpusort.sort({1: 2}), TypeError, r"x must be a dask array"),
        (lambda: gpusort.sort_by_key(X, np.arange(9)), ValueError, r"values has length 9 but keys has length 10"),
        (lambda: gpusort.sort_by_key(X, da.ones((10, 2))), ValueError, r"values must be 1-D"),
        (lambda: gpusort.sort_by_key(X, np.array([None] * 10)), TypeError, r"values has dtype object"),
        pytest.param(lambda: gpusort.sort_by_key(X, np.array(["a"] * 10, dtype=np.dtypes.StringDType())), TypeError,
                     r"values has dtype StringDType\(\); gpusort moves fixed-width values only",
                     marks=pytest.mark.skipif(not hasattr(np.dtypes, "StringDType"), reason="NumPy 2's dtype")),
        (lambda: gpusort.sort_by_key(X, X[X > 3]), ValueError, r"values has unknown chunk sizes"),
        (lambda: gpusort.sort_by_key(da.ones((2, 5)), X), ValueError, r"keys\b.*\b(2-D|1-D)"),
        # Several key arrays: one length, 1-D, sortable dtypes, at least one.
        (lambda: gpusort.sort_by_key((X, np.arange(9)), X), ValueError, r"keys"),
        (lambda: gpusort.sort_by_key((X, da.ones((10, 2))), X), ValueError, r"keys"),
        (lambda: gpusort.sort_by_key((X, np.array(["a"] * 10, object)), X), TypeError, r"keys\[1\]"),
        (lambda: gpusort.sort_by_key((), X), ValueError, r"keys"),
        (lambda: gpusort.sort_by_key((X, X), np.arange(9)), ValueError, r"values has length 9"),
        # lexsort: a non-empty sequence of arrays of one shape, or an array of keys along its first axis.
        (lambda: gpusort.lexsort([]), ValueError, r"keys"),
        (lambda: gpusort.lexsort(()), ValueError, r"keys"),
        (lambda: gpusort.lexsort([X, np.arange(9)]), ValueError, r"keys"),
        (lambda: gpusort.lexsort([da.ones((2, 5)), da.ones((5, 2))]), ValueError, r"keys"),
        (lambda: gpusort.lexsort([X, np.array([None] * 10)]), TypeError, r"keys"),
        (lambda: gpusort.lexsort([np.array(list("abcdefghij"), object), X]), TypeError, r"keys.*astype\('U'\)"),
        (lambda: gpusort.lexsort((X, np.zeros(10, "i4,O"))), TypeError, r"keys\[.f1.\] has dtype object"),
        (lambda: gpusort.lexsort([X, X[X > 3]]), ValueError, r"compute_chunk_sizes\(\)"),
        (lambda: gpusort.lexsort([X], descending="yes"), TypeError, r"descending must be True or False"),
        (lambda: gpusort.lexsort([X], backend="tpu"), ValueError, r"backend='tpu' is not known"),
        # Complex keys sort (sort, argsort, lexsort, sort_by_key), but the rest refuses them by name.
        (lambda: gpusort.topk(da.from_array(np.array([1j, 2])), 1), TypeError, r"x has dtype complex128"),
        (lambda: gpusort.unique(np.array([1j, 2], np.complex64)), TypeError, r"x has dtype complex64"),
        (lambda: gpusort.searchsorted(np.array([1j, 2]), 1), TypeError, r"sorted_x has dtype complex128"),
        (lambda: gpusort.verify(np.array([1j, 2]), np.array([1j, 2])), TypeError, r"src has dtype complex128"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    "call, shape, axis",
    [
        (gpusort.sort, (10,), 1),
        (gpusort.sort, (10,), -2),
        (gpusort.argsort, (4, 4), 2),
        (gpusort.sort, (4, 4), -3),
        (gpusort.argsort, (2, 3, 4), 3),
        (gpusort.sort, (2, 3, 4), -4),
        (gpusort.sort, (), 0),
        (lambda x, axis: gpusort.lexsort([x, x], axis=axis), (4, 4), 2),
        (lambda x, axis: gpusort.lexsort([x, x], axis=axis), (5,), -2),
        (lambda x, axis: gpusort.lexsort(da.stack([x, x]), axis=axis), (4, 4), -3),
    ],
)
def test_axis_out_of_range_names_axis_and_the_valid_range(call, shape, axis):
    """The error says which axis was asked for and which exist: -ndim to ndim - 1 (or None)."""
    ndim = len(shape)
    with pytest.raises(ValueError) as info:
        call(da.ones(shape, chunks=2), axis=axis)
    message = str(info.value)
    assert re.search(r"(?<![\w.])axis\b", message), message
    assert str(axis) in message, message
    if ndim:  # the valid range: its ends, -ndim and ndim - 1 (or "< ndim")
        assert re.search(rf"(?<![\d])-{ndim}(?![\d])", message), message
        assert re.search(rf"(?<![\d-])({ndim - 1}|{ndim})(?![\d])", message), message


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
    # As keys of lexsort and multi-key sort_by_key too: refused by name, not computed.
    for call in (lambda: gpusort.lexsort([ddf["a"], ddf["a"]]),
                 lambda: gpusort.sort_by_key((ddf["a"], ddf["a"]), np.arange(4))):
        with pytest.raises(TypeError, match=r"keys\b.*Dask \w+.*to_dask_array\(lengths=True\)"):
            call()


def test_a_tuple_of_arrays_is_not_concatenated():
    import dask

    lazy = da.from_delayed(dask.delayed(_never)(), shape=(3,), dtype=np.int64)
    for x in ((lazy, lazy), [np.arange(3), np.arange(3)]):
        with pytest.raises(TypeError, match=r"x is a (tuple|list) of 2 arrays") as info:
            gpusort.sort(x)
        assert "lexsort" in str(info.value)  # the fix for several keys
    # Sequences of scalars, nested or not, are arrays as NumPy reads them.
    assert gpusort.sort((3, 1, 2)).compute().tolist() == [1, 2, 3]
    assert gpusort.sort([[3, 1], [2, 0]], axis=None).compute().tolist() == [0, 1, 2, 3]


UNSUPPORTED = {
    "object": np.array([1, "a"], dtype=object),
    "object field": np.zeros(2, "i4,O"),
    "longdouble": np.array([2, 1], np.longdouble),  # extended precision where it is wider than float64
    "clongdouble": np.array([2, 1], np.clongdouble),
}
if hasattr(np.dtypes, "StringDType"):  # NumPy 2: variable-width strings
    UNSUPPORTED["StringDType"] = np.array(["b", "a"], dtype=np.dtypes.StringDType())
# Composite keys: sort, argsort, lexsort and sort_by_key take them; the others refuse them.
COMPOSITE = {"complex64": np.array([2, 1j], np.complex64), "complex128": np.array([2, 1j]),
             "str": np.array(["b", "a"]), "bytes": np.array([b"b", b"a"]), "void": np.zeros(2, "V4"),
             "structured": np.zeros(2, "i4,f8")}
# (call, the argument its message names, whether it takes composite keys)
ENTRY_POINTS = {
    "sort": (lambda a: gpusort.sort(a), "x", True),
    "argsort": (lambda a: gpusort.argsort(a), "x", True),
    "lexsort": (lambda a: gpusort.lexsort([np.arange(len(a)), a]), "keys", True),
    "sort_by_key": (lambda a: gpusort.sort_by_key(a, np.arange(len(a))), "keys", True),
    "topk": (lambda a: gpusort.topk(a, 1), "x", False),
    "searchsorted": (lambda a: gpusort.searchsorted(a, a[:1]), "sorted_x", False),
    "unique": (lambda a: gpusort.unique(a), "x", False),
    "verify": (lambda a: gpusort.verify(a, a), "src", False),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_unsupported_key_dtypes_get_gpusorts_message(entry):
    """Every unsupported key dtype: a TypeError naming the argument, the dtype and what this entry point takes."""
    call, argname, composite_ok = ENTRY_POINTS[entry]
    taken = ("bool, int8-64, uint8-64, float16/32/64, complex64/128, fixed-width bytes (S), str (U), void (V), "
             "structured (of these), datetime64 and timedelta64" if composite_ok
             else "bool, int8-64, uint8-64, float16/32/64, datetime64 and timedelta64")
    cases = {**UNSUPPORTED, **({} if composite_ok else COMPOSITE)}
    if np.dtype(np.longdouble).itemsize <= 8:  # longdouble is float64 here: a key like any other
        del cases["longdouble"], cases["clongdouble"]
    for name, a in cases.items():
        with pytest.raises(TypeError) as info:
            call(a)
        message = str(info.value)
        argnames = (argname, f"{argname}['f1']")  # a structured key's bad field is named as such
        assert message.startswith(tuple(f"{n} has dtype " for n in argnames)), (name, message)
        assert f"supported key dtypes are {taken} (convert first" in message, (name, message)
    if composite_ok:  # and the composite keys it takes, it sorts
        for a in COMPOSITE.values():
            call(a)
