"""Faults: workers killed mid-phase, chunks that fail to load, repeated sorts.

Worker kills are deterministic: :class:`Sabotage`, a worker plugin, kills its
own worker process (``os._exit``) the moment a chosen task of a chosen layer
starts executing there.  An *arm* file names the task; renaming it is atomic,
so exactly one process fires, once, and records its pid.  Every kill test
asserts that the kill happened -- a test whose fault never fired proves
nothing -- and that the result is still exactly NumPy's.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import multiprocessing
import os
import threading
import time
import tracemalloc
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
from dask.utils import key_split
from distributed import Client, LocalCluster, wait
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.scheduler import KilledWorker

import gpusort


class Sabotage(WorkerPlugin):
    """Kill this worker process as an armed task starts executing, or as an exchange reaches an armed step.

    ``arm(directory, layer, index)`` arms task ``index`` (the first key index
    after the name, ``None`` for one-task layers) of the layer whose name
    starts with ``layer`` (``runs``, ``splits``, ``merge``, ``transfer``,
    ``shuffle``, ``output``, ``sorted``, ``collective``; fused names such as ``merge-sorted``
    count as ``merge``), or, with ``index=None``, a step that is no task of its
    own (:data:`STEPS`).  ``times``
    arms that many kills of the same task.
    """

    def __init__(self, directory: str):
        self.directory = directory

    def setup(self, worker):
        self.patched = {}
        for step, (module, owner, name) in STEPS.items():
            target = _target(module, owner)
            current = getattr(target, name)
            # A plugin whose teardown never ran (its worker restarting as it was unregistered) left its
            # wrapper, which would still fire from its own arms: wrap the real function, not that.
            real = self.patched[step] = getattr(current, "sabotaged", current)
            setattr(target, name, self._armed(step, real))

    def teardown(self, worker):
        for step, real in self.patched.items():
            module, owner, name = STEPS[step]
            setattr(_target(module, owner), name, real)

    def _armed(self, step, real):
        import asyncio
        import functools

        if asyncio.iscoroutinefunction(real):
            @functools.wraps(real)
            async def wrapper(*args, **kwargs):
                self.fire(step, None, step)
                return await real(*args, **kwargs)
        else:
            @functools.wraps(real)
            def wrapper(*args, **kwargs):
                self.fire(step, None, step)
                return real(*args, **kwargs)
        wrapper.sabotaged = real
        return wrapper

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing":
            return
        layer = key_split(key).split("-")[0]
        index = key[1] if isinstance(key, tuple) and len(key) > 1 else None
        self.fire(layer, index, key)

    def fire(self, layer, index, what):
        armed = os.path.join(self.directory, f"arm-{layer}-{index}")
        for n in range(8):  # the first live arm of this task, if any
            try:
                os.rename(f"{armed}.{n}", f"{armed}.{n}.fired")
            except FileNotFoundError:
                continue
            Path(f"{armed}.{n}.fired").write_text(f"{os.getpid()} {what!r}")
            os._exit(1)


#: Steps a test can kill a worker at that are no tasks of their own: those of an exchange
#: (:class:`gpusort.engine.exchange.SortRun`), inside P2P's barrier, and those of a rank of a
#: collective sort (:mod:`gpusort.engine.collective`), as ``(module, class or None, function)``.
STEPS = {
    "exchange:runs": ("gpusort.engine.exchange", "SortRun", "_form_runs"),
    "exchange:samples": ("gpusort.engine.exchange", "SortRun", "_samples"),
    "exchange:swap": ("gpusort.engine.exchange", "SortRun", "_swap"),
    "exchange:merge": ("gpusort.engine.exchange", "SortRun", "_merge"),
    "collective:runs": ("gpusort.engine.collective", None, "_form_runs"),
    "collective:exchange": ("gpusort.engine.nccl", "NcclComm", "exchange"),
    "collective:merge": ("gpusort.engine.tasks", None, "merge_pieces"),
}


def _target(module: str, owner: str | None):
    import importlib

    found = importlib.import_module(module)
    return found if owner is None else getattr(found, owner)


def arm(directory: Path, layer: str, index: int | None, times: int = 1) -> list[Path]:
    for n in range(times):
        (directory / f"arm-{layer}-{index}.{n}").touch()
    return [directory / f"arm-{layer}-{index}.{n}.fired" for n in range(times)]


def fired_pid(marker: Path) -> int:
    assert marker.exists(), f"the fault {marker.name} never fired: this test proved nothing"
    return int(marker.read_text().split()[0])


def worker_pids(client: Client) -> set[int]:
    return set(client.run(os.getpid).values())


def wait_idle(cluster: LocalCluster, workers: int = 2, timeout: float = 90) -> None:
    """Until the scheduler's workers are exactly ``workers`` live ones, and it holds no task at all.

    A worker a test killed comes back through its nanny, and the scheduler
    learns of the death on its own time: on a loaded machine (two cores,
    another test process beside) it can still list the dead worker, beside
    no replacement yet, when the next test starts -- whose tasks then "die"
    with it.  So the scheduler's workers must be the nannies' live ones.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = {n.worker_address for n in list(cluster.workers.values()) if n.is_alive()}
        if not cluster.scheduler.tasks and set(cluster.scheduler.workers) == live and len(live) == workers:
            return
        time.sleep(0.05)
    states = sorted({ts.state for ts in cluster.scheduler.tasks.values()})
    raise AssertionError(f"cluster not idle: {len(cluster.scheduler.tasks)} tasks {states}, "
                         f"{len(cluster.scheduler.workers)} workers")


def wait_quiet(cluster: LocalCluster, timeout: float = 30) -> None:
    """Until no task runs or waits to run: whatever is in flight has ended."""
    deadline = time.monotonic() + timeout
    busy = {"processing", "queued", "waiting", "no-worker"}
    while time.monotonic() < deadline:
        if not any(ts.state in busy for ts in list(cluster.scheduler.tasks.values())):
            return
        time.sleep(0.05)
    raise AssertionError("tasks still running 30 s after the error")


@pytest.fixture
def cluster():
    # One per test: a worker that a test killed, and that its nanny has not brought back (or the
    # scheduler not yet forgotten) on a loaded machine, must not die again in the next test.
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        yield cluster


@pytest.fixture
def client(cluster, tmp_path):
    """A client on the shared cluster, with :class:`Sabotage` armed from ``tmp_path``."""
    arms = tmp_path / "arms"
    arms.mkdir()
    with Client(cluster) as client:
        client.register_plugin(Sabotage(str(arms)), name="sabotage")
        wait_idle(cluster)
        client.arms = arms
        yield client
        client.unregister_worker_plugin("sabotage")


def skewed(seed: int, n: int) -> np.ndarray:
    """Duplicates, NaN, ±0.0: ties that only a stable, exact sort gets right."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, n).astype(np.float64)
    x[rng.random(n) < 0.05] = np.nan
    x[rng.random(n) < 0.05] = -0.0
    return x


def descending_order(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.where(np.isnan(x), np.inf, -x), kind="stable")


# One task per layer, roughly half way through its phase (12 input chunks, 10
# output chunks, one chunk per task), and every step of the exchange inside
# P2P's barrier: the killed worker's chunks are lost with it and recomputed,
# and P2P restarts the exchange (transfers, the barrier, the sort on every
# worker, the output views).
KILL_POINTS = [("transfer", 6), ("shuffle", None), ("exchange:runs", None), ("exchange:samples", None),
          ("exchange:swap", None), ("exchange:merge", None), ("output", 5)]
ONE_CHUNK_PER_TASK = {"gpusort.task-bytes": 0}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("layer, index", KILL_POINTS, ids=[p[0] for p in KILL_POINTS])
def test_worker_killed_mid_phase_result_exact(client, layer, index):
    n = 120_000
    x = skewed(KILL_POINTS.index((layer, index)), n)
    keys = da.from_array(x, chunks=n // 12)
    values = da.from_array(np.arange(n, dtype=np.uint32), chunks=n // 12)
    (marker,) = arm(client.arms, layer, index)
    before = worker_pids(client)

    with dask.config.set(ONE_CHUNK_PER_TASK):
        sk, sv = client.compute(gpusort.sort_by_key(keys, values, chunks=12_500), sync=True)

    killed = fired_pid(marker)
    assert killed in before and killed not in worker_pids(client)
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(sv, want.astype(np.uint32))
    np.testing.assert_array_equal(sk, x[want])


@pytest.mark.timeout(120)
def test_worker_killed_twice_during_argsort_merges(client):
    n = 90_001
    x = skewed(7, n)
    markers = arm(client.arms, "output", 2, times=2)  # the retried task dies again
    with dask.config.set(ONE_CHUNK_PER_TASK):
        got = client.compute(gpusort.argsort(da.from_array(x, chunks=7_000), descending=True), sync=True)
    assert len({fired_pid(m) for m in markers}) == 2
    np.testing.assert_array_equal(got, descending_order(x))


def failing_loader(x: np.ndarray, chunk: int, bad: int, failure: str, calls: Path | None = None) -> da.Array:
    """``x`` in chunks of ``chunk`` whose chunk ``bad`` fails to load as ``failure`` says."""

    def load(block, block_id=None):
        i = block_id[0]
        if calls is not None:
            with open(calls / f"{i}-{os.getpid()}-{time.monotonic_ns()}", "x"):
                pass
        if i != bad:
            return block
        if failure == "raise":
            raise OSError(f"keys.bin: chunk {i} is unreadable (checksum mismatch)")
        if failure == "short":  # a truncated read
            return block[:-3]
        return block.astype(np.float32)  # a chunk stored with another dtype

    return da.from_array(x, chunks=chunk).map_blocks(load, dtype=x.dtype, meta=np.empty(0, x.dtype))


FAILURES = [
    ("raise", OSError, r"chunk 4 is unreadable"),
    ("short", ValueError, r"input chunk 4 loaded 997 keys .*declares 1000"),
    ("dtype", ValueError, r"input chunk 4 loaded 1000 keys of dtype float32.*declares 1000 of dtype float64"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("failure, error, match", FAILURES, ids=[f[0] for f in FAILURES])
@pytest.mark.parametrize("call", ["sort", "argsort"])
def test_chunk_that_fails_to_load_is_one_clear_error(failure, error, match, call):
    x = skewed(3, 10_000)
    keys = failing_loader(x, 1_000, 4, failure)
    with dask.config.set(scheduler="threads"), pytest.raises(error, match=match):
        getattr(gpusort, call)(keys, chunks=700).compute()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("failure, error, match", FAILURES, ids=[f[0] for f in FAILURES])
def test_chunk_that_fails_to_load_on_workers_is_not_retried_nor_left_behind(client, tmp_path, failure, error, match):
    calls = tmp_path / "calls"
    calls.mkdir()
    x = skewed(4, 10_000)
    keys = failing_loader(x, 1_000, 4, failure, calls)
    before = worker_pids(client)
    futures = client.compute(gpusort.sort_by_key(keys, keys, chunks=1_500))
    wait(futures, timeout=30)  # ends, with an error: no hang
    with pytest.raises(error, match=match):
        client.gather(futures)
    wait_quiet(client.cluster)  # nothing left running
    assert worker_pids(client) == before  # an error in a task kills no worker
    assert len(list(calls.glob("4-*"))) == 1  # a task error is final: not retried


@pytest.mark.timeout(60)
def test_lying_values_chunk_is_named():
    x = skewed(5, 4_000)
    values = failing_loader(np.arange(4_000.0), 500, 2, "short")
    with pytest.raises(ValueError, match=r"input chunk 2 loaded 497 values"):
        dask.compute(gpusort.sort_by_key(da.from_array(x, chunks=500), values), scheduler="threads")


def rss_bytes() -> int:
    """Resident memory after returning freed heap pages to the system (glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return psutil.Process().memory_info().rss


def _growth_over_20_sorts() -> tuple[int, int]:
    """(traced bytes, RSS bytes) that 20 sorts of 2^20 float64 add, after 3 that reach a steady state."""
    n = 2**20

    def one(seed):
        x = np.random.default_rng(seed).standard_normal(n)
        x[::97] = np.nan
        k = da.from_array(x, chunks=n // 16)
        s, (kk, vv) = dask.compute(gpusort.argsort(k, chunks=n // 10),
                                   gpusort.sort_by_key(k, k, descending=True), scheduler="threads")
        assert s[0] == np.nanargmin(x) and kk[0] == vv[0] == np.nanmax(x)

    for seed in range(3):  # thread pools, imports, caches: steady state first
        one(seed)
    gc.collect()
    tracemalloc.start()
    try:
        traced0, rss0 = tracemalloc.get_traced_memory()[0], rss_bytes()
        for seed in range(3, 23):
            one(seed)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - traced0, rss_bytes() - rss0
    finally:
        tracemalloc.stop()


@pytest.mark.timeout(180)
def test_repeated_sorts_do_not_leak_host_memory():
    """20 sorts in one process: traced allocations and RSS stay flat.

    NumPy reports its buffers to ``tracemalloc``, so its count is exact where
    RSS is noisy; leaking one input per sort would add 20 x 8 MiB.  Dask's
    own bounded caches (``key_split``, ``cached_cumsum``) grow ~10 KiB a sort.
    The sorts run in a fresh process: ``tracemalloc`` counts every thread's
    allocations, and in this one the module's cluster (its scheduler, a
    restarted worker's registration) allocates beside them.
    """
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        traced, rss = pool.submit(_growth_over_20_sorts).result(timeout=170)
    print(f"\n20 sorts of 2^20 float64: traced growth {traced / 2**10:.0f} KiB, RSS growth {rss / 2**20:.1f} MiB")
    assert traced < 2 * 2**20, f"traced allocations grew {traced / 2**20:.1f} MiB over 20 sorts"
    assert rss < 64 * 2**20, f"RSS grew {rss / 2**20:.1f} MiB over 20 sorts"


# ---------------------------------------------------------------- sort_zarr


def make_src(path: Path, x: np.ndarray, chunk: int):
    import zarr

    z = zarr.create_array(str(path), shape=x.shape, chunks=(chunk,), dtype=x.dtype)
    z[:] = x
    return path


def tree_digest(path: Path) -> str:
    """Names and bytes of every file under ``path``: equal digests, untouched store."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def leftovers(directory: Path, *keep: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def zarr_source(tmp_path: Path, seed: int) -> tuple[np.ndarray, Path, str]:
    """Skewed keys in a Zarr source of 10 chunks, and the source's digest."""
    x = skewed(seed, 40_000)
    src = make_src(tmp_path / "keys.zarr", x, 4_000)
    return x, src, tree_digest(src)


# The disk path's layers, and the exchange's where the runs stay in memory.
ZARR_KILL_POINTS = [("disk", "runs", 5), ("disk", "merge", 3), ("memory", "transfer", 5), ("memory", "output", 3)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runs, layer, index", ZARR_KILL_POINTS)
def test_sort_zarr_survives_a_killed_worker(client, tmp_path, runs, layer, index):
    import zarr

    x, src, digest = zarr_source(tmp_path, seed=9)
    (marker,) = arm(client.arms, layer, index)

    with dask.config.set(ONE_CHUNK_PER_TASK):
        gpusort.sort_zarr(src, tmp_path / "sorted.zarr", chunks=6_000, argsort_dst=tmp_path / "order.zarr",
                          runs=runs)

    fired_pid(marker)
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "order.zarr"))[:], want)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "sorted.zarr"))[:], x[want])
    assert tree_digest(src) == digest
    assert leftovers(tmp_path, "arms", "keys.zarr", "sorted.zarr", "order.zarr") == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runs, layer, index", ZARR_KILL_POINTS)
def test_sort_zarr_that_cannot_finish_leaves_no_partial_destination(client, tmp_path, runs, layer, index):
    _, src, digest = zarr_source(tmp_path, seed=10)
    scheduler = client.cluster.scheduler
    allowed, scheduler.allowed_failures = scheduler.allowed_failures, 0  # one death is fatal
    (marker,) = arm(client.arms, layer, index)
    try:
        with pytest.raises(Exception) as failed, dask.config.set(ONE_CHUNK_PER_TASK):
            gpusort.sort_zarr(src, tmp_path / "sorted.zarr", chunks=6_000, argsort_dst=tmp_path / "order.zarr",
                              runs=runs)
    finally:
        scheduler.allowed_failures = allowed
    # The death surfaces as KilledWorker, or, where an output task on the
    # surviving worker first asks for the exchange that the death tore down,
    # as P2P's error for that exchange (distributed's own unpack raises it
    # too): the sort failed for the kill either way.
    assert isinstance(failed.value, KilledWorker) or "No active shuffle" in str(failed.value), repr(failed.value)
    fired_pid(marker)
    wait_quiet(client.cluster)  # tasks still in flight when the error surfaced have ended
    assert leftovers(tmp_path, "arms", "keys.zarr") == []
    assert tree_digest(src) == digest


@pytest.mark.timeout(60)
def test_sort_zarr_with_an_unreadable_chunk_cleans_up(tmp_path):
    x = skewed(11, 20_000)
    src = make_src(tmp_path / "keys.zarr", x, 2_000)
    (src / "c" / "3").write_bytes(b"not a zstd frame")  # chunk 3 no longer decodes
    digest = tree_digest(src)
    with dask.config.set(scheduler="threads"), pytest.raises(Exception, match="(?i)decompress|decod|chunk"):
        gpusort.sort_zarr(src, tmp_path / "sorted.zarr", argsort_dst=tmp_path / "order.zarr")
    time.sleep(0.5)  # a task still running when the error surfaced must not recreate the store
    assert leftovers(tmp_path, "keys.zarr") == []
    assert tree_digest(src) == digest


@pytest.mark.timeout(60)
def test_sort_zarr_unreadable_chunk_error_names_the_chunk(tmp_path):
    x = skewed(12, 20_000)
    src = make_src(tmp_path / "keys.zarr", x, 2_000)
    (src / "c" / "3").write_bytes(b"not a zstd frame")
    with dask.config.set(scheduler="threads"), pytest.raises(Exception, match=r"chunk 3\b"):
        gpusort.sort_zarr(src, tmp_path / "sorted.zarr")


# ---------------------------------------------------------------------- GPU


def _sort_on_cuda_cluster(client, cupy, seed: int, host: bool = False):
    """A sort_by_key of CuPy chunks; ``host``: of NumPy chunks past a small GPU budget (the collectives' rounds)."""
    n = 2_000_000
    x = skewed(seed, n)
    keys = da.from_array(x, chunks=n // 8)
    values = da.from_array(np.arange(n, dtype=np.int64), chunks=n // 8)
    options = {"backend": "cupy", "gpu_memory_budget": "16MiB"} if host else {}
    if not host:
        keys, values = keys.map_blocks(cupy.asarray), values.map_blocks(cupy.asarray)
    want = np.argsort(x, kind="stable")

    def run():
        with dask.config.set(ONE_CHUNK_PER_TASK):
            return client.compute(gpusort.sort_by_key(keys, values, chunks=n // 6, **options), sync=True)

    return run, x, want


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("layer, index", [("runs", 3), ("splits", None), ("merge", 2)])
def test_worker_killed_on_a_one_gpu_cluster(tmp_path, layer, index):
    """One GPU worker runs the graph of one process; killed mid-phase, the result is still exact."""
    cupy = pytest.importorskip("cupy")
    dask_cuda = pytest.importorskip("dask_cuda")
    with dask_cuda.LocalCUDACluster(n_workers=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        client.register_plugin(Sabotage(str(tmp_path)), name="sabotage")
        run, x, want = _sort_on_cuda_cluster(client, cupy, 12)
        (marker,) = arm(tmp_path, layer, index)
        sk, sv = run()
        fired_pid(marker)
        np.testing.assert_array_equal(cupy.asnumpy(sv), want)
        np.testing.assert_array_equal(cupy.asnumpy(sk), x[want])


@pytest.mark.gpu
@pytest.mark.multi_gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("layer, index, host", [("launch", 1, False), ("collective", 1, False),
                                                ("collective:runs", None, False), ("collective:exchange", None, False),
                                                ("collective:merge", None, False), ("output", 0, False),
                                                ("collective:exchange", None, True)])
def test_worker_killed_in_a_collective_sort_fails_clearly_then_sorts_again(tmp_path, layer, index, host):
    """A GPU worker killed as its rank starts or is collected, forms its runs, swaps (in rounds too, for host
    chunks past the GPUs' budget), merges, or cuts an output chunk: a clear error within a minute, never a hang;
    then the next sort makes new communicators and is exact."""
    cupy = pytest.importorskip("cupy")
    dask_cuda = pytest.importorskip("dask_cuda")
    from gpusort.engine import nccl

    gpus = cupy.cuda.runtime.getDeviceCount()
    with dask_cuda.LocalCUDACluster(n_workers=gpus, dashboard_address=":0") as cluster, Client(cluster) as client:
        client.register_plugin(Sabotage(str(tmp_path)), name="sabotage")
        run, x, want = _sort_on_cuda_cluster(client, cupy, 13, host)
        first = nccl.ensure(client)
        assert first is not None and first.kind == "nccl", "NCCL communicators between the GPU workers"
        (marker,) = arm(tmp_path, layer, index)
        start = time.monotonic()
        with pytest.raises(Exception, match="left the cluster|did not answer|failed|cancelled"):
            run()
        assert time.monotonic() - start < 60, "a lost rank must fail the sort within a minute"
        fired_pid(marker)
        client.wait_for_workers(gpus, timeout=120)
        sk, sv = _sort_on_cuda_cluster(client, cupy, 13, host)[0]()
        assert nccl.ensure(client).key != first.key, "new communicators after the loss"
        np.testing.assert_array_equal(cupy.asnumpy(sv), want)
        np.testing.assert_array_equal(cupy.asnumpy(sk), x[want])


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_repeated_gpu_sorts_do_not_leak_gpu_memory():
    """20 sorts of CuPy chunks: no array outlives its sort, and the pool's cache stays bounded.

    The pool's total once grew over 20 sorts (350 -> 451 MB on the H200) and
    looked like a leak.  Measured (H200, 2026-11-23): live bytes come back to
    zero after every sort, while the pool keeps ~4x the peak of live bytes as
    free blocks -- fragmentation of CuPy's caching pool under concurrent
    tasks, whose interleaving now and then needs a new size class.  So what is
    asserted is no leak, and a cache bounded by the live peak.
    """
    cupy = pytest.importorskip("cupy")
    pool = cupy.get_default_memory_pool()
    n = 2**22

    class LivePeak(cupy.cuda.MemoryHook):
        name = "live-peak"

        def __init__(self):
            self.live, self.peak, self.sizes, self.lock = 0, 0, {}, threading.Lock()

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            with self.lock:
                self.sizes[mem_ptr] = mem_size
                self.live += mem_size
                self.peak = max(self.peak, self.live)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            with self.lock:
                self.live -= self.sizes.pop(mem_ptr, mem_size)

    def one(seed):
        x = cupy.random.default_rng(seed).standard_normal(n)
        k = da.from_array(x, chunks=n // 8, asarray=False)
        s, p = dask.compute(gpusort.sort(k), gpusort.argsort(k, descending=True), scheduler="threads")
        assert bool((s[1:] >= s[:-1]).all()) and int(p[0]) == int(cupy.argmax(x))

    one(0)  # kernels compiled, pool warmed
    gc.collect()
    used0, peak = pool.used_bytes(), LivePeak()
    with peak:
        for seed in range(1, 21):
            one(seed)
            gc.collect()
            assert pool.used_bytes() == used0, f"sort {seed} left {pool.used_bytes() - used0} bytes in use"
    assert pool.total_bytes() <= 8 * peak.peak, (pool.total_bytes(), peak.peak)
