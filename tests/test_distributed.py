"""The same graph on a distributed cluster with worker processes.

The cluster starts once for the module: the N-D, lexsort and complex-key
features share it in one test, so that they cost no second start-up.
"""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import gpusort
from reference import make_keys, ref_argsort_along, ref_lexsort


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            yield c


def test_all_public_functions_exact_on_worker_processes(client):
    rng = np.random.default_rng(11)
    x = rng.integers(-1000, 1000, 200_003).astype(np.float64)
    x[rng.random(x.size) < 0.01] = np.nan
    keys = da.from_array(x, chunks=9_001)
    values = da.from_array(np.arange(x.size, dtype=np.uint32), chunks=9_001)
    k, positions, (kk, vv), kd = dask.compute(
        gpusort.sort(keys, chunks=20_000),
        gpusort.argsort(keys),
        gpusort.sort_by_key(keys, values, descending=True),
        gpusort.sort(keys, descending=True),
    )
    stable = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(k, x[stable])
    np.testing.assert_array_equal(positions, stable)
    desc = np.argsort(np.where(np.isnan(x), np.inf, -x), kind="stable")
    np.testing.assert_array_equal(vv, desc.astype(np.uint32))
    np.testing.assert_array_equal(kd, x[desc])


def test_persist_then_compute_on_the_cluster(client):
    x = da.random.default_rng(5).integers(0, 2**40, 300_000, chunks=20_000).persist()
    y = gpusort.sort(x).persist()
    np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))


def test_axis_sorts_lexsort_and_complex_keys_on_worker_processes(client):
    """Along an axis, lexsort, multi-key sort_by_key and complex keys: exact across two workers."""
    rng = np.random.default_rng(12)
    x = make_keys(rng, "float32", 6 * 30_000, "nan").reshape(6, 30_000)
    keys = da.from_array(x, chunks=(4, 7_000))
    a = rng.integers(0, 5, 60_000).astype(np.int16)
    b = make_keys(rng, "complex128", 60_000, "nan")
    da_a, da_b = da.from_array(a, chunks=9_000), da.from_array(b, chunks=(5_000, 0, 55_000))
    values = da.from_array(np.arange(60_000, dtype=np.int32), chunks=12_000)
    s1, p0, p1d, lex, lexd, ((ka, kb), v), pb = dask.compute(
        gpusort.sort(keys, axis=1),
        gpusort.argsort(keys, axis=0),
        gpusort.argsort(keys, axis=-1, descending=True),
        gpusort.lexsort([da_b, da_a]),
        gpusort.lexsort((da_b, da_a), descending=True),
        gpusort.sort_by_key((da_a, da_b), values, descending=True),
        gpusort.argsort(da_b),
    )
    want1 = np.argsort(x, axis=1, kind="stable")
    np.testing.assert_array_equal(s1, np.take_along_axis(x, want1, 1))
    np.testing.assert_array_equal(p0, np.argsort(x, axis=0, kind="stable"))
    np.testing.assert_array_equal(p1d, ref_argsort_along(x, -1, descending=True))
    np.testing.assert_array_equal(lex, np.lexsort([b, a]))
    desc = ref_lexsort([b, a], descending=True)
    np.testing.assert_array_equal(lexd, desc)
    np.testing.assert_array_equal(v, desc.astype(np.int32))  # a primary, then b: lexsort([b, a])'s order
    np.testing.assert_array_equal(ka, a[desc])
    np.testing.assert_array_equal(kb.view(np.uint64), b[desc].view(np.uint64))
    np.testing.assert_array_equal(pb, np.argsort(b, kind="stable"))
