"""The same graph on a distributed cluster with worker processes."""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import gpusort


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
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
