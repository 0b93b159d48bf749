"""Every dtype's special values through every chunking, checked bit for bit.

These run the backends' own sorts on this machine's CPU (NumPy dispatches its
sorts by CPU feature: AVX-512, AVX2, SVE, ...), so a path that misorders
``-0.0`` or rewrites a NaN here fails here.  The oracle is
:mod:`reference` (Python's ``sorted``), never ``np.sort``, which is what
misordered float16 ``-0.0`` on AVX512-ICL machines.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import gpusort
from gpusort.backends import get_backend
from gpusort.keys import order
from reference import KEY_DTYPES, assert_same_keys, ref_argsort

# Chunkings of a 24-element input: one chunk, single elements, empty and tiny
# chunks mixed with larger ones, uneven tails.
CHUNKINGS = [(24,), (1,) * 24, (0, 5, 0, 1, 7, 11, 0), (3,) * 8, (2, 9, 13), (13, 11)]
OUTPUT_CHUNKS = [None, 1, 5, 24]


def specials(dtype: str) -> np.ndarray:
    """24 keys of ``dtype``: its special values, repeated so that ties meet across chunks."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        u = np.dtype(f"u{dt.itemsize}")
        nan = int(np.array(np.nan, dt).view(u))
        sign = 1 << (8 * dt.itemsize - 1)
        odd_nans = np.array([nan | 1, nan | sign, (nan | sign) + 3, nan + 1], u).view(dt)  # payloads, -NaN
        info = np.finfo(dt)
        values = np.array([-0.0, 0.0, np.inf, -np.inf, info.max, info.min, info.smallest_subnormal,
                           -info.smallest_subnormal, 1.0, -1.0], dt)
        base = np.concatenate([values, odd_nans])
    elif dt.kind in "mM":
        base = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0, 1,
                         np.iinfo(np.int64).min + 1], np.int64).view(dt)
    elif dt.kind == "b":
        base = np.array([True, False])
    else:
        info = np.iinfo(dt)
        base = np.array([info.min, info.max, 0, 1, info.min + 1, info.max - 1], dt)
    rng = np.random.default_rng(len(base))
    return rng.choice(base, 24)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_special_values_through_every_chunking(dtype, descending):
    x = specials(dtype)
    before = x.copy()
    want = ref_argsort(x, descending)
    for chunks in CHUNKINGS:
        keys = da.from_array(x, chunks=(chunks,))
        for out in OUTPUT_CHUNKS:
            where = f"chunks={chunks} out={out}"
            got = gpusort.sort(keys, descending=descending, chunks=out).compute()
            assert_same_keys(got, x[want])  # the input's bit patterns, in order
            positions = gpusort.argsort(keys, descending=descending, chunks=out).compute()
            np.testing.assert_array_equal(positions, want, err_msg=where)
            k, v = gpusort.sort_by_key(keys, da.arange(24, chunks=(chunks,)), descending=descending, chunks=out)
            k, v = k.compute(), v.compute()
            assert_same_keys(k, x[want], bits="exact")  # stable: every element's own bits
            np.testing.assert_array_equal(v, want, err_msg=where)
    np.testing.assert_array_equal(x.view(np.uint8), before.view(np.uint8))


def test_float16_zeros_among_negatives_stay_sorted():
    """The reproducer: NumPy's SIMD float16 sort misordered these on AVX512-ICL CPUs."""
    a = np.random.default_rng(2).choice(np.array([-2.0, -1.0, -0.0, 0.0], np.float16), 5000)
    got = gpusort.sort(da.from_array(a, chunks=5000), chunks=500).compute()
    assert_same_keys(got, a[ref_argsort(a)])
    nonneg = np.abs(a)
    got = gpusort.sort(da.from_array(nonneg, chunks=700), descending=True, chunks=500).compute()
    assert_same_keys(got, nonneg[ref_argsort(nonneg, descending=True)])


@pytest.mark.parametrize("descending", [False, True])
def test_descending_sort_keeps_every_nan_bit_pattern(descending):
    for dtype in ("float16", "float32", "float64"):
        dt = np.dtype(dtype)
        u = np.dtype(f"u{dt.itemsize}")
        nan, sign = int(np.array(np.nan, dt).view(u)), 1 << (8 * dt.itemsize - 1)
        bits = np.array([nan, nan | sign, nan | 1, nan | sign | 5, nan + 2], u)
        x = np.tile(np.concatenate([bits.view(dt), np.array([1.0, -0.0, 0.0], dt)]), 40)
        for chunks in (7, 13, 64, 320):
            got = gpusort.sort(da.from_array(x, chunks=chunks), descending=descending).compute()
            np.testing.assert_array_equal(np.sort(got.view(u)), np.sort(x.view(u)), err_msg=f"{dtype} {chunks}")


@pytest.mark.parametrize("scheme", order.SCHEMES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_numpy_backend_runs_are_sorted_on_this_cpu(dtype, scheme):
    """Runs straight from the backend: the order keys' sort itself, before any merge."""
    rng = np.random.default_rng(5)
    x = rng.choice(specials(dtype), 50_000)
    for descending in (False, True):
        okeys = order.encode(x, descending, scheme)
        values = None if scheme == "exact" else np.arange(len(x))
        keys, values = get_backend("numpy").sort_run(okeys, values)
        got = order.decode(keys, x.dtype, descending, scheme)
        want = ref_argsort(x, descending)
        if values is None:
            assert_same_keys(got, x[want])
        else:
            np.testing.assert_array_equal(values, want)
