"""The sort across GPU workers on NCCL (gpusort.engine.collective, gpusort.engine.comms), exact against NumPy.

A dask-cuda ``LocalCUDACluster`` of every GPU; CuPy chunks sort with one
task per worker that talks over NCCL.  Each result is compared bit for bit
with NumPy's stable sort; the graph must be the collective one.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
dask_cuda = pytest.importorskip("dask_cuda")

from distributed import Client, wait  # noqa: E402

import gpusort  # noqa: E402
from gpusort.engine import nccl  # noqa: E402
from reference import assert_host_sorts_exact, assert_sorts_exact, keys_and_positions, make_keys, sorts_of  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def client():
    gpus = cupy.cuda.runtime.getDeviceCount()
    with dask_cuda.LocalCUDACluster(n_workers=gpus, threads_per_worker=2, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            yield c


def on_gpu(x: np.ndarray, chunks) -> da.Array:
    return da.from_array(x, chunks=(chunks,)).map_blocks(cupy.asarray, meta=cupy.empty(0, x.dtype))


def collective_tasks(y) -> int:
    return sum(1 for key in dict(y.__dask_graph__()) if isinstance(key, tuple) and key[0].startswith("collective-"))


PATTERNS = [("int64", "random"), ("int64", "few"), ("int32", "sorted"), ("uint8", "reversed"),
            ("float64", "nan"), ("float32", "extremes"), ("float64", "equal"), ("int16", "random")]


@pytest.mark.parametrize("dtype, pattern", PATTERNS, ids=[f"{d}-{p}" for d, p in PATTERNS])
def test_sort_argsort_and_pairs_exact_across_gpus(client, rng, dtype, pattern):
    x = make_keys(rng, dtype, 1_000_003, pattern)
    chunks = (300_000, 0, 1, 200_000, 500_002)
    keys = on_gpu(x, chunks)
    values = on_gpu(np.arange(x.size, dtype=np.int32), chunks)
    graphs = sorts_of(keys, values, 250_000)
    assert collective_tasks(graphs[0]) == len(client.scheduler_info()["workers"])
    s, p, (k, v), sd = dask.compute(*graphs)
    assert_sorts_exact(x, *(cupy.asnumpy(a) for a in (s, p, k, v, sd)))


HOST_CHUNKS = (300_000, 0, 1, 200_000, 500_002)


@pytest.mark.parametrize("dtype, pattern", PATTERNS[:4], ids=[f"{d}-{p}" for d, p in PATTERNS[:4]])
def test_host_chunks_go_up_once_and_sort_across_gpus(client, rng, dtype, pattern):
    """Host chunks with backend="cupy" whose shares fit the GPUs: the collective path, NumPy chunks out, exact."""
    x = make_keys(rng, dtype, 1_000_003, pattern)
    graphs = sorts_of(*keys_and_positions(x, HOST_CHUNKS), 250_000, backend="cupy")
    firsts = [g[0] if isinstance(g, tuple) else g for g in graphs]  # sort_by_key gives keys and values
    assert all(collective_tasks(g) == len(client.scheduler_info()["workers"]) for g in firsts)
    assert_host_sorts_exact(x, graphs)


@pytest.mark.parametrize("dtype, pattern", PATTERNS[:2], ids=[f"{d}-{p}" for d, p in PATTERNS[:2]])
def test_host_chunks_past_the_gpus_budget_sort_in_rounds(client, rng, dtype, pattern):
    """A budget that no rank's share fits: runs out of core on each GPU, the exchange and merges in rounds; exact."""
    x = make_keys(rng, dtype, 1_000_003, pattern)
    graphs = sorts_of(*keys_and_positions(x, HOST_CHUNKS), 250_000, backend="cupy", gpu_memory_budget="8MiB")
    launches = [t for key, t in dict(graphs[1].__dask_graph__()).items() if key[0].startswith("launch-")]
    assert launches and all(t.args[0].rounds > 1 for t in launches)
    assert_host_sorts_exact(x, graphs)


def test_merge_of_sorted_gpu_arrays_on_the_ranks(client, rng):
    a, b = (np.sort(make_keys(rng, "float64", n, "nan"), kind="stable") for n in (1_000_003, 700_001))
    m = gpusort.merge(on_gpu(a, 300_000), on_gpu(b, 200_000))
    assert collective_tasks(m) == len(client.scheduler_info()["workers"])
    both = np.concatenate([a, b])
    np.testing.assert_array_equal(cupy.asnumpy(m.compute()).view(np.uint8),
                                  both[np.argsort(both, kind="stable")].view(np.uint8))


def test_p2p_asked_for_is_p2p(client):
    x = np.random.default_rng(11).permutation(2**18).astype(np.int64)
    with dask.config.set({"gpusort.exchange": "p2p"}):
        y = gpusort.sort(on_gpu(x, 2**15))
    assert collective_tasks(y) == 0
    np.testing.assert_array_equal(cupy.asnumpy(y.compute()), np.arange(2**18))


def test_persisted_chunks_sort_in_place_five_times(client):
    """Fresh persisted keys, sorted five times in a row: exact each time, one communicator throughout."""
    keys = []
    for seed in range(5):
        x = da.random.default_rng(seed).integers(-2**40, 2**40, 2**23, chunks=2**19)
        x = x.map_blocks(cupy.asarray, meta=cupy.empty(0, np.int64)).persist()
        wait(x)
        y = gpusort.sort(x).persist()
        wait(y)
        assert gpusort.verify(x, y).ok
        keys.append(nccl.ensure(client).key)
        del x, y
    assert len(set(keys)) == 1, "communicators are made once and kept"


def test_part_of_the_result_and_one_output_chunk(client):
    x = np.random.default_rng(7).permutation(2**20).astype(np.int64)
    y = gpusort.sort(on_gpu(x, 2**16), chunks=2**14)
    np.testing.assert_array_equal(cupy.asnumpy(y[:100].compute()), np.arange(100))
    z = gpusort.sort(on_gpu(x, 2**16), chunks=2**20)
    np.testing.assert_array_equal(cupy.asnumpy(z.compute()), np.arange(2**20))


def test_a_chunk_that_lies_fails_every_rank_at_once(client):
    x = on_gpu(np.arange(2**20, dtype=np.int64), 2**18)
    short = x.map_blocks(lambda b, block_info=None: b[:-1] if block_info[0]["chunk-location"] == (1,) else b,
                         dtype=x.dtype, meta=cupy.empty(0, np.int64))
    with pytest.raises(Exception, match="input chunk 1 loaded|rank .* failed"):
        gpusort.sort(short).compute()
    np.testing.assert_array_equal(cupy.asnumpy(gpusort.sort(x[::-1]).compute()), np.arange(2**20))
