"""The collective engine on one GPU: ranks are threads of one process, their transport host memory.

The code a rank runs on its GPU worker -- runs sorted on the GPU, host
chunks taken up once and the block brought down once, splitters, the swap
into receive buffers on the GPU, the merge in place, output views -- over
:mod:`hostcomms` instead of NCCL, so a machine of one GPU checks it.  Results
exact against NumPy, bit for bit.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from distributed import Client, LocalCluster  # noqa: E402

import gpusort  # noqa: E402
import hostcomms  # noqa: E402
from reference import assert_host_sorts_exact, assert_sorts_exact, keys_and_positions, make_keys, sorts_of  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def client():
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no GPU")
    with LocalCluster(n_workers=3, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            hostcomms.install(c)
            with dask.config.set({"gpusort.exchange": "collective"}):
                yield c


def launched(y) -> int:
    return sum(1 for key in dict(y.__dask_graph__()) if isinstance(key, tuple) and key[0].startswith("launch-"))


CASES = [("int64", "random"), ("float64", "nan"), ("int32", "few"), ("uint8", "sorted")]


@pytest.mark.parametrize("memory", ["host", "gpu"])
@pytest.mark.parametrize("dtype, pattern", CASES, ids=[f"{d}-{p}" for d, p in CASES])
def test_ranks_on_one_gpu_exact(client, rng, dtype, pattern, memory):
    x = make_keys(rng, dtype, 300_007, pattern)
    chunks = (90_000, 0, 1, 60_000, 150_006)
    keys = da.from_array(x, chunks=(chunks,))
    values = da.from_array(np.arange(x.size, dtype=np.int32), chunks=(chunks,))
    if memory == "gpu":
        keys, values = (a.map_blocks(cupy.asarray, meta=cupy.empty(0, a.dtype)) for a in (keys, values))
    graphs = sorts_of(keys, values, 70_000, backend="cupy")
    assert launched(graphs[0]) == 3
    s, p, (k, v), sd = dask.compute(*graphs)
    out = [cupy.asnumpy(a) for a in (s, p, k, v, sd)]
    assert all(type(a) is (np.ndarray if memory == "host" else cupy.ndarray) for a in (s, p, k, v, sd))
    assert_sorts_exact(x, *out)


@pytest.mark.parametrize("dtype, pattern", CASES[:3], ids=[f"{d}-{p}" for d, p in CASES[:3]])
def test_host_chunks_in_rounds_on_one_gpu_exact(client, rng, dtype, pattern):
    """Runs sorted out of core into host memory, then exchanged and merged through the GPU a sub-block at a time."""
    x = make_keys(rng, dtype, 300_007, pattern)
    with dask.config.set({"gpusort.collective-rounds": 3}):
        graphs = sorts_of(*keys_and_positions(x, (90_000, 0, 1, 60_000, 150_006)), 70_000, backend="cupy",
                          gpu_memory_budget="16MiB")
        assert launched(graphs[0]) == 3
        assert_host_sorts_exact(x, graphs)


@pytest.mark.parametrize("dtype, pattern", CASES[:2], ids=[f"{d}-{p}" for d, p in CASES[:2]])
def test_merge_on_ranks_on_one_gpu_exact(client, rng, dtype, pattern):
    """merge_by_key of sorted CuPy inputs as the ranks' runs: ties from a first, exact bits."""
    a, b = (np.sort(make_keys(rng, dtype, n, pattern), kind="stable") for n in (200_003, 90_001))
    va, vb = np.arange(a.size, dtype=np.int64), np.arange(a.size, a.size + b.size, dtype=np.int64)
    gpu = [da.from_array(x, chunks=40_000).map_blocks(cupy.asarray, meta=cupy.empty(0, x.dtype)) for x in (a, va, b, vb)]
    k, v = gpusort.merge_by_key(*gpu, chunks=50_000)
    assert launched(k) == 3
    both = np.concatenate([a, b])
    stable = np.argsort(both, kind="stable")
    k, v = dask.compute(k, v)
    np.testing.assert_array_equal(cupy.asnumpy(k).view(np.uint8), both[stable].view(np.uint8))
    np.testing.assert_array_equal(cupy.asnumpy(v), np.concatenate([va, vb])[stable])
