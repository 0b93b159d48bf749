"""GPU end to end: the three-phase graph with backend="cupy" on dask-cuda's LocalCUDACluster.

Every result is compared exactly with NumPy's stable sort.  Host (NumPy)
chunks take the out-of-core path within a GPU memory budget, whose measured
high-water mark (``gpusort.backends.cupy.memory_stats`` on the workers) must
stay within it; CuPy chunks stay on the GPU.  A worker killed mid-sort is
replaced and the result is still exact.  Multi-GPU tests carry ``multi_gpu``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
dask_cuda = pytest.importorskip("dask_cuda")

from dask.utils import key_split  # noqa: E402
from distributed import Client, wait  # noqa: E402
from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

import gpusort  # noqa: E402
from gpusort.memory.plan import parse_budget  # noqa: E402
from gpusort.memory.staging import PINNED_BYTES  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def client():
    cluster = dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES="0", threads_per_worker=2,
                                         protocol="tcp", dashboard_address=":0")
    with cluster, Client(cluster) as c:
        yield c


def worker_stats(client, reset=False) -> list[dict]:
    from gpusort.backends.cupy import memory_stats

    return [s for s in client.run(memory_stats, reset).values() if s]


def stable(x: np.ndarray, descending: bool = False) -> np.ndarray:
    """NumPy's stable order of ``x``, NaN last in both directions."""
    if not descending:
        return np.argsort(x, kind="stable")
    keys = np.where(np.isnan(x), np.inf, -x) if x.dtype.kind == "f" else ~x
    return np.argsort(keys, kind="stable")


def run_pools() -> list:
    """The run pool of every GPU this process sees: a threaded sort spreads its steps over them all."""
    from gpusort.memory import staging

    pools = []
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            pools.append(staging.run_pool())
    return pools


def thread_pool():
    """The run pool of the GPU that this thread's out-of-core steps run on."""
    from gpusort.backends.cupy import thread_device
    from gpusort.memory import staging

    with cupy.cuda.Device(thread_device()):
        return staging.run_pool()


def assert_balanced(y: da.Array, chunk: int) -> None:
    sizes = y.chunks[0]
    assert all(c == chunk for c in sizes[:-1]) and 0 < sizes[-1] <= chunk


@pytest.mark.parametrize("chunk_type", ["numpy", "cupy"])
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_all_public_functions_exact(client, chunk_type, dtype):
    rng = np.random.default_rng(7)
    n = 1_000_003
    x = (rng.standard_normal(n) * 100).astype(dtype) if dtype.startswith("f") else \
        rng.integers(0, 5000, n).astype(dtype)
    if dtype.startswith("f"):
        x[rng.random(n) < 0.01] = np.nan
    values = np.arange(n, dtype=np.uint32)[::-1].copy()
    keys, vals = da.from_array(x, chunks=70_001), da.from_array(values, chunks=70_001)
    if chunk_type == "cupy":
        keys, vals = keys.map_blocks(cupy.asarray), vals.map_blocks(cupy.asarray)
    backend = "cupy" if chunk_type == "numpy" else None
    s, i, (k, v), sd = dask.compute(
        gpusort.sort(keys, chunks=100_000, backend=backend),
        gpusort.argsort(keys, backend=backend),
        gpusort.sort_by_key(keys, vals, descending=True, backend=backend),
        gpusort.sort(keys, descending=True, backend=backend),
    )
    host = cupy.asnumpy if chunk_type == "cupy" else np.asarray
    for out in (s, i, k, v, sd):
        assert isinstance(out, cupy.ndarray if chunk_type == "cupy" else np.ndarray)
    asc, desc = stable(x), stable(x, descending=True)
    np.testing.assert_array_equal(host(s), x[asc])
    np.testing.assert_array_equal(host(i), asc)
    np.testing.assert_array_equal(host(k), x[desc])
    np.testing.assert_array_equal(host(v), values[desc])
    np.testing.assert_array_equal(host(sd), x[desc])
    assert_balanced(gpusort.sort(keys, chunks=100_000, backend=backend), 100_000)


@pytest.mark.parametrize("runs", ["memory", "disk"])
def test_sort_zarr_on_the_gpu_exact_with_runs_in_memory_or_on_disk(client, tmp_path, runs):
    """Disk to disk with ``backend="cupy"``: floats with NaN and signed zeros, positions, both places for runs."""
    import zarr

    rng = np.random.default_rng(11)
    n = 400_009
    x = rng.standard_normal(n)
    x[rng.random(n) < 0.02], x[rng.random(n) < 0.02] = np.nan, -0.0
    zarr.create_array(str(tmp_path / "keys.zarr"), data=x, chunks=(30_000,))
    gpusort.sort_zarr(tmp_path / "keys.zarr", tmp_path / "sorted.zarr", argsort_dst=tmp_path / "order.zarr",
                      backend="cupy", runs=runs, gpu_memory_budget="8MiB", chunks=50_000)
    want = stable(x)
    got = zarr.open_array(str(tmp_path / "sorted.zarr"))[:]
    np.testing.assert_array_equal(got.view(np.uint64), x[want].view(np.uint64))  # the exact bits
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "order.zarr"))[:], want)
    assert not [p.name for p in tmp_path.iterdir() if "gpusort-tmp" in p.name]


def test_wide_values_and_bytes_values_out_of_core(client):
    rng = np.random.default_rng(3)
    n = 300_000
    x = rng.integers(0, 100, n)
    for values in (np.array([b"abc", b"de", b"f"])[rng.integers(0, 3, n)],  # S3: moved by position
                   (rng.random(n) + 1j * rng.random(n)).astype(np.complex128),  # 16 bytes
                   rng.integers(0, 2**63, n).astype("M8[ns]")):  # 8 bytes, not a number type
        k, v = dask.compute(*gpusort.sort_by_key(da.from_array(x, chunks=40_000),
                                                 da.from_array(values, chunks=40_000), backend="cupy"))
        order = stable(x)
        np.testing.assert_array_equal(k, x[order])
        np.testing.assert_array_equal(v, values[order])


@pytest.mark.parametrize("budget", ["48MiB", 2**26])
def test_data_several_times_the_budget_and_measured_peak_within_it(client, budget):
    n = 2**25  # 256 MiB of int64 keys, chunks of 64 MiB: bigger than a whole sort step may hold
    x = da.random.default_rng(11).integers(-(2**62), 2**62, n, chunks=2**23).persist()
    wait(x)
    limit = parse_budget(budget)
    assert x.nbytes >= 4 * limit
    worker_stats(client, reset=True)
    y = gpusort.sort(x, backend="cupy", gpu_memory_budget=budget, chunks=2**23 + 12345)
    i = gpusort.argsort(x, backend="cupy", gpu_memory_budget=budget)
    ys, iy = dask.compute(y, i)
    stats = worker_stats(client)
    xs = x.compute()
    order = stable(xs)
    np.testing.assert_array_equal(ys, xs[order])
    np.testing.assert_array_equal(iy, order)
    assert_balanced(y, 2**23 + 12345)
    assert stats, "the out-of-core path never ran on a worker"
    for s in stats:
        assert s["budget_bytes"] == limit
        assert 0 < s["peak_bytes"] <= limit, s
        assert 0 < s["pinned_bytes"] <= PINNED_BYTES, s  # a few slots, not the data


def test_staged_parts_go_up_packed_and_come_back_bit_for_bit():
    """Host parts of every size (empty, tiny, across slot edges, pinned) land end to end on the GPU, and come back."""
    from gpusort.memory import staging

    rng = np.random.default_rng(8)
    sizes = [0, 1, 7, 3 * 2**20 + 5, 0] + rng.integers(0, 200_000, 300).tolist() + [11 * 2**20 + 3, 2]
    parts = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    pinned = np.frombuffer(cupy.cuda.alloc_pinned_memory(4099), np.uint8, 4099)
    pinned[:] = rng.integers(0, 256, 4099, dtype=np.uint8)
    for chosen in (parts, parts[3:4], [pinned], parts[:40] + [pinned]):
        want = np.concatenate(chosen)
        on_gpu = cupy.empty(len(want), np.uint8)
        staging.to_device(chosen, on_gpu)
        staging.streams().work.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(on_gpu), want)
        back = np.empty_like(want)
        staging.to_host(on_gpu, back)
        np.testing.assert_array_equal(back, want)
    with pytest.raises(ValueError, match="bytes of parts"):
        staging.to_device(parts[:3], cupy.empty(1, np.uint8))


def test_runs_from_the_run_pool_are_exact_and_go_back_to_it():
    """With ``gpusort.run-pool-bytes`` set, out-of-core runs live in the pinned pool, and leave it when dropped."""
    from gpusort.backends import BackendSpec, get_backend
    from gpusort.memory import staging

    x = np.random.default_rng(9).integers(-2**62, 2**62, 3_000_000)
    with dask.config.set({"gpusort.run-pool-bytes": "64MiB"}):
        pool = thread_pool()
        assert pool is not None and pool.nbytes == 64 * 2**20
        run, _ = get_backend(BackendSpec("cupy", parse_budget("16MiB"))).sort_run(x)  # sub-runs, then a merge
        np.testing.assert_array_equal(run, np.sort(x))
        assert staging.is_pinned(run) and pool.leased_bytes() >= run.nbytes
        del run
        assert pool.leased_bytes() == 0
        y = gpusort.sort(da.from_array(x, chunks=250_000), backend="cupy", gpu_memory_budget="16MiB")
        np.testing.assert_array_equal(y.compute(scheduler="threads"), np.sort(x))
        assert pool.leased_bytes() == 0 and staging.pinned_bytes() >= 64 * 2**20
    assert staging.run_pool() is None  # the default: no pool
    assert pool.release() and pool.held_bytes() == 0


def test_merged_chunks_of_a_graph_come_from_the_run_pool_where_it_has_room():
    """A pool that holds the runs and the output: every chunk the graph hands back is a lease of it, exact to the bit."""
    from gpusort.memory import staging

    x = np.random.default_rng(11).normal(size=3_000_000)  # 24 MB of runs, then 24 MB of output
    x[::997], x[1::991], x[2::983] = np.nan, -0.0, 0.0
    original = x.copy()
    with dask.config.set({"gpusort.run-pool-bytes": "64MiB"}):
        pools = run_pools()
        y = gpusort.sort(da.from_array(x, chunks=250_000), backend="cupy", gpu_memory_budget="16MiB")
        chunks = dask.compute(*y.to_delayed().ravel(), scheduler="threads")
        assert all(staging.is_pinned(c) for c in chunks) and sum(p.leased_bytes() for p in pools) >= x.nbytes
        want = x[stable(x)]  # -0.0 and 0.0 tie: the input's order, its bits
        np.testing.assert_array_equal(np.concatenate(chunks).view(np.uint64), want.view(np.uint64))
        np.testing.assert_array_equal(x.view(np.uint64), original.view(np.uint64))
        del chunks
        assert sum(p.leased_bytes() for p in pools) == 0
    for pool in pools:
        pool.release()
        assert pool.held_bytes() == 0


@pytest.mark.parametrize("pool_bytes, output_pinned", [("96MiB", True), ("48MiB", False)])
def test_a_merge_takes_the_run_pool_for_its_output_only_where_the_runs_leave_room(pool_bytes, output_pinned):
    """Runs first: a merge whose output does not fit beside them writes it to ordinary memory, just as exactly."""
    from gpusort.backends import BackendSpec, get_backend
    from gpusort.memory import staging

    backend = get_backend(BackendSpec("cupy", parse_budget("64MiB")))
    rng = np.random.default_rng(12)
    parts = [rng.normal(size=2_000_000) for _ in range(2)]  # two runs of 16 MB, one step each
    for p in parts:
        p[::499], p[1::503], p[2::509] = np.nan, -0.0, 0.0
    with dask.config.set({"gpusort.run-pool-bytes": pool_bytes}):
        pool = thread_pool()
        runs = [backend.sort_run(p) for p in parts]
        assert all(staging.is_pinned(k) for k, _ in runs)
        merged, _ = backend.merge_runs(runs)
        assert staging.is_pinned(merged) is output_pinned
        both = np.concatenate([k for k, _ in runs])  # the first run's keys first on ties
        np.testing.assert_array_equal(merged.view(np.uint64), both[stable(both)].view(np.uint64))
        del runs, merged
        assert pool.leased_bytes() == 0
    assert pool.release()


def test_a_sorts_freed_runs_and_chunks_serve_the_next_sort_exactly():
    """Out-of-core results come from the host cache: one sort's freed buffers take the next sort's, bit for bit."""
    from gpusort.backends import BackendSpec, get_backend
    from gpusort.memory import staging

    backend = get_backend(BackendSpec("cupy", parse_budget("16MiB")))
    rng = np.random.default_rng(10)
    x, y = rng.integers(-2**62, 2**62, 3_000_000), rng.normal(size=3_000_000)
    y[::1000] = np.nan
    with dask.config.set({"gpusort.host-cache-bytes": "256MiB"}):
        cache = staging.host_cache()
        assert cache is not None and cache.nbytes == 256 * 2**20
        run, _ = backend.sort_run(x)  # sub-runs, then a merge into the run
        np.testing.assert_array_equal(run, np.sort(x))
        at = run.ctypes.data
        del run
        assert cache.kept_bytes() >= x.nbytes  # the run's buffer and the sub-runs'
        again, _ = backend.sort_run(y)  # the same size: the freed run's buffer, new contents
        assert again.ctypes.data == at
        np.testing.assert_array_equal(again.view(np.uint64), np.sort(y).view(np.uint64))
        del again
        z = gpusort.sort(da.from_array(x, chunks=250_000), backend="cupy", gpu_memory_budget="16MiB")
        np.testing.assert_array_equal(z.compute(scheduler="threads"), np.sort(x))
        cache.release()
        assert cache.kept_bytes() == 0
    assert staging.host_cache_bytes_setting() > 0  # the default keeps some
    with dask.config.set({"gpusort.host-cache-bytes": 0}):
        assert staging.host_cache() is None
        run, _ = backend.sort_run(x)
        np.testing.assert_array_equal(run, np.sort(x))


def test_a_registered_block_is_pinned_until_it_is_freed():
    """The run pool's block: zeroed, page-locked for DMA in one registration, unregistered as it is freed."""
    import gc

    from gpusort.memory import staging

    block = staging.registered_block(8 * 2**20 + 5)
    assert staging.is_pinned(block) and staging.is_pinned(block[4097:]) and not block.any()
    dev = cupy.arange(len(block), dtype=np.uint8)
    dev.get(out=block)
    np.testing.assert_array_equal(block, cupy.asnumpy(dev))
    at = block.ctypes.data
    del block
    gc.collect()
    try:
        kind = cupy.cuda.runtime.pointerGetAttributes(at).type
    except cupy.cuda.runtime.CUDARuntimeError:  # an address CUDA does not know at all
        kind = 0
    assert kind != 1  # no longer registered host memory


def test_pinned_staging_is_the_setting_however_much_data():
    """A fresh process with ``gpusort.pinned-bytes`` of 4 MiB sorts 128 MiB of host keys through 4 MiB a GPU.

    The setting is per GPU: threads of one process spread over every GPU it sees.
    """
    code = (
        "import dask.array as da, numpy as np, gpusort\n"
        "from gpusort.backends.cupy import memory_stats\n"
        "x = np.random.default_rng(3).integers(-2**62, 2**62, 2**24)\n"
        "y = gpusort.sort(da.from_array(x, chunks=2**21), backend='cupy', gpu_memory_budget='64MiB')\n"
        "assert (y.compute(scheduler='threads') == np.sort(x)).all()\n"
        "stats = memory_stats()\n"
        "gpus = {device for device, _ in stats['pools']}\n"
        "assert stats['pinned_bytes'] == 4 * 2**20 * len(gpus), stats\n"
    )
    env = {**os.environ, "DASK_GPUSORT__PINNED_BYTES": "4MiB"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


def test_gpu_clusters_load_the_common_kernels_as_workers_start():
    """runtime.cluster's GPU workers load the common kernel sets in the background; the first sort is exact."""
    from gpusort import runtime

    def warmed(dask_worker):
        plugin = dask_worker.plugins["gpusort-warm-kernels"]
        return plugin.done.wait(120), repr(plugin.error)

    with runtime.cluster("cuda", gpus=1, threads=2) as client:
        assert client.run(warmed) == {w: (True, "None") for w in client.scheduler_info()["workers"]}
        x = da.random.default_rng(5).integers(-(2**62), 2**62, 2**20, chunks=2**17).map_blocks(cupy.asarray)
        np.testing.assert_array_equal(gpusort.sort(x).compute().get(), np.sort(x.compute().get()))


def test_graphs_see_the_gpus_default_budget(client):
    """The budget a large host sort without one is planned against is the workers' own default."""
    from gpusort.backends import cupy as gpu_backend
    from gpusort.engine import graph

    (answer,) = client.run(gpu_backend.default_budget).values()
    assert graph.default_budget_seen() == answer > 0
    assert graph._default_budget_here() == gpu_backend.default_budget() > 0  # a local scheduler: this process's GPU


def test_concurrent_sorts_with_different_budgets_keep_their_own_limits(client):
    """Two budgets in one graph: their steps interleave on one worker, each pool within its own budget."""
    x = da.random.default_rng(5).integers(0, 2**62, 2**24, chunks=2**22).persist()
    wait(x)
    worker_stats(client, reset=True)
    small = gpusort.sort(x, backend="cupy", gpu_memory_budget="48MiB")
    large = gpusort.sort(x, backend="cupy", gpu_memory_budget="96MiB")
    a, b = dask.compute(small, large)
    xs = np.sort(x.compute())
    np.testing.assert_array_equal(a, xs)
    np.testing.assert_array_equal(b, xs)
    pools = {budget: p for s in worker_stats(client) for (_, budget), p in s["pools"].items()}
    assert {48 * 2**20, 96 * 2**20} <= set(pools), pools
    for budget, p in pools.items():
        assert p["budget_bytes"] == budget and 0 < p["peak_bytes"] <= budget, (budget, p)


def test_budget_must_be_sensible(client):
    x = da.arange(10, chunks=5)
    with pytest.raises(ValueError, match="gpu_memory_budget"):
        gpusort.sort(x, backend="cupy", gpu_memory_budget="1kB")
    with pytest.raises(ValueError, match="backend='cupy'"):
        gpusort.sort(x, gpu_memory_budget="1GiB")  # NumPy chunks pick the NumPy backend


class KillOnce(WorkerPlugin):
    """Kill this worker (``os._exit``) as the first task of ``layer`` starts, once per marker file."""

    def __init__(self, marker: str, layer: str):
        self.marker, self.layer = marker, layer

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing" and key_split(key).split("-")[0] == self.layer:
            try:
                os.rename(self.marker, self.marker + ".fired")
            except FileNotFoundError:
                return
            os._exit(1)


@pytest.mark.parametrize("layer", ["merge", "runs"])
def test_worker_killed_mid_sort_result_still_exact(client, layer):
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "armed"
        marker.touch()
        client.register_plugin(KillOnce(str(marker), layer), name=f"kill-{layer}")
        try:
            rng = np.random.default_rng(5)
            x = rng.integers(0, 1000, 400_000)
            keys = da.from_array(x, chunks=50_000)
            with dask.config.set({"gpusort.task-bytes": "1MiB"}):  # several runs: one run is not merged
                k, v = dask.compute(*gpusort.sort_by_key(keys, keys, backend="cupy", gpu_memory_budget="64MiB"))
            assert Path(str(marker) + ".fired").exists(), "the worker was never killed: nothing proved"
        finally:
            client.unregister_worker_plugin(f"kill-{layer}")
    np.testing.assert_array_equal(k, np.sort(x, kind="stable"))
    np.testing.assert_array_equal(v, np.sort(x, kind="stable"))


@pytest.mark.multi_gpu
@pytest.mark.parametrize("protocol", ["tcp", "ucx"])
def test_two_gpus_exact_with_both_chunk_types(protocol):
    if protocol == "ucx":
        pytest.importorskip("distributed_ucxx")
    n_gpus = cupy.cuda.runtime.getDeviceCount()
    cluster = dask_cuda.LocalCUDACluster(n_workers=n_gpus, threads_per_worker=2, protocol=protocol,
                                         dashboard_address=":0")
    with cluster, Client(cluster) as c:
        assert len(c.scheduler_info()["workers"]) == n_gpus
        # Half the chunks made on each worker: where the scheduler puts them is its choice, and
        # a worker that holds none may own no out-of-core step.
        workers = sorted(c.scheduler_info()["workers"])
        x = da.concatenate([da.random.default_rng(2 + i).integers(0, 2**40, 2**23 // n_gpus, chunks=2**19)
                            .persist(workers=[w]) for i, w in enumerate(workers)])
        wait(x)
        xs = x.compute()
        with dask.config.set({"gpusort.exchange": "p2p"}):  # host chunks out of core, not up to the GPUs at once
            y = gpusort.sort(x, backend="cupy", gpu_memory_budget="256MiB").persist()
        yc = gpusort.sort(x.map_blocks(cupy.asarray)).persist()
        wait([y, yc])
        np.testing.assert_array_equal(y.compute(), np.sort(xs))
        np.testing.assert_array_equal(cupy.asnumpy(yc.compute()), np.sort(xs))
        ran = set(c.run(lambda: bool(__import__("gpusort.backends.cupy", fromlist=["x"]).memory_stats())).values())
        assert ran == {True}, "both GPUs should have run out-of-core steps"
