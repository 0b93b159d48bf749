"""The same graph on a distributed cluster with worker processes.

The cluster starts once for the module: the N-D, lexsort and complex-key
features share it in one test, so that they cost no second start-up.
"""

import operator

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


def _queued(dask_scheduler=None):
    """Keys the scheduler has queued as root-ish since its transition log began."""
    return {entry[0] for entry in dask_scheduler.transition_log if entry[2] == "queued"}


def _views_of_one_task(name: str, n: int) -> da.Array:
    """``n`` chunks that each cut one task's result, as plain Dask tasks: the shape of a sort's output."""
    from dask._task_spec import Task, TaskRef
    from dask.highlevelgraph import HighLevelGraph

    whole = {(f"{name}-whole", 0): Task((f"{name}-whole", 0), np.arange, 10 * n)}
    views = {(name, i): Task((name, i), operator.getitem, TaskRef((f"{name}-whole", 0)), slice(10 * i, 10 * i + 10))
             for i in range(n)}
    graph = HighLevelGraph({f"{name}-whole": whole, name: views}, {f"{name}-whole": set(), name: {f"{name}-whole"}})
    return da.Array(graph, name, ((10,) * n,), dtype=np.int64)


@pytest.mark.parametrize("workers", [1, 2])
def test_output_chunks_are_never_queued(workers):
    """A sort's output chunks (views of one run, or of a few merged blocks) run as soon as their block is there.

    The scheduler queues a large group of tasks that read few tasks as
    root-ish and hands them out a few at a time, a round trip each; the
    same graph shape built of plain tasks shows it does here.
    """
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        control = _views_of_one_task("plain-views", 40)
        np.testing.assert_array_equal(control.compute(), np.arange(400))
        assert {k for k in c.run_on_scheduler(_queued) if k[0] == "plain-views"}, "the scheduler queued no views"
        x = da.random.default_rng(3).integers(0, 2**40, 40_000, chunks=1_000).persist()
        y = gpusort.sort(x)
        np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))
        assert not {k for k in c.run_on_scheduler(_queued) if k[0] == y.name}
        # Views the caller restricts keep the caller's restriction, strict.
        first = sorted(c.scheduler_info()["workers"])[0]
        z = gpusort.sort(x, descending=True).persist(workers=[first])
        np.testing.assert_array_equal(z.compute(), np.sort(x.compute())[::-1])
        assert c.run_on_scheduler(_restrictions, z.name) == {(frozenset([first]), None, False)}


def _restrictions(name, dask_scheduler=None):
    """The (workers, hosts, loose) restrictions of the tasks of layer ``name``."""
    return {(frozenset(ts.worker_restrictions or ()), ts.host_restrictions and frozenset(ts.host_restrictions),
             ts.loose_restrictions)
            for key, ts in dask_scheduler.tasks.items() if isinstance(key, tuple) and key[0] == name}
