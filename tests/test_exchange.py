"""The exchange between workers (gpusort.engine.exchange) on CPU clusters.

Machines with 4 and 8 GPUs are not at hand: 8 single-threaded CPU workers
stand in for them, with the NumPy backend, checking exactness, the number of
tasks and the number of messages between workers.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import deserialize, serialize, to_serialize

import gpusort
from gpusort.engine import exchange
from gpusort.memory import spill
from reference import assert_same_keys, parts_in_order_or_not, ref_argsort, ref_in_order

ONE_CHUNK_PER_TASK = {"gpusort.task-bytes": 0}


def test_messages_serialize_array_by_array():
    """A message's arrays travel as frames: distributed must not pickle it whole (a GPU slice would go via host)."""
    keys, values = np.arange(100), np.arange(100.0)
    slabs = exchange.Header("slabs", 0, 1, exchange.Slabs([(0, 2)], False))
    message = [(exchange._framed([keys[10:60], values[10:60]]), slabs)]
    header, frames = serialize(to_serialize(message), serializers=("dask", "pickle"))
    flat = str(header)
    assert "'serializer': 'dask'" in flat and flat.count("'type': 'numpy.ndarray'") >= 2, flat[:400]
    ((_, got),) = deserialize(header, frames)
    assert got == slabs and got.about.where == [(0, 2)]  # the header arrives as the record it left as
    assert exchange._framed([])[0].size == 0  # a message without arrays still leads with one


def test_consecutive_parts_and_one_run_per_worker():
    assert exchange.consecutive([0, 1, 3, 4, 5, 9]) == [[0, 1], [3, 4, 5], [9]]
    assert exchange.one_run_per_worker(stable=False)
    assert not exchange.one_run_per_worker(stable=True)


def test_contiguous_ranges_of_output_chunks():
    assert exchange.contiguous_ranges({0: "a", 1: "a", 2: "b", 3: "b", 4: "a"}) == {"a": [(0, 2), (4, 5)],
                                                                                   "b": [(2, 4)]}


@pytest.mark.parametrize("spilling", ["both", "one"])
def test_workers_past_their_share_of_memory_keep_arrays_in_files(tmp_path, spilling):
    """Past ``gpusort.spill-share`` of a worker's memory, its inputs, runs, slices and blocks go to files.

    Ten of twelve chunks on the first worker: with ``spilling="one"`` only
    it passes its share, and the other keeps its arrays in memory but
    merges a partition at a time as well.  Float keys with zeros and NaNs
    of several bits: a keys-only sort forms its runs again by ranges of
    neighbouring chunks.  Exact either way, and no file is left while the
    results still map them.
    """
    rng = np.random.default_rng(5)
    n = 600_000
    x = rng.integers(-40, 40, n).astype(np.float64)
    x[rng.integers(0, n, 900)] = -0.0
    x[rng.integers(0, n, 900)] = np.nan
    x[rng.integers(0, n, 900)] = -np.float64(np.nan)  # another NaN's bits
    v = np.arange(n, dtype=np.int64)
    limit = 2**30
    # "one": the first worker holds 3.8 MiB of keys (7.6 with values), the second 0.8 (1.5)
    share = 1e-4 if spilling == "both" else 3 * 2**20 / limit

    def spill_files(dask_worker):
        from pathlib import Path

        return [str(p) for p in Path(dask_worker.local_directory).glob("gpusort-exchange-*/*")]

    # A transfer task a chunk, and no work stealing: each chunk is handed over where it was placed.
    with dask.config.set({"gpusort.spill-share": share, "distributed.scheduler.work-stealing": False,
                          **ONE_CHUNK_PER_TASK}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                         memory_limit=limit, local_directory=str(tmp_path)) as cluster, Client(cluster) as client:
        first, second = sorted(client.scheduler_info()["workers"])
        chunk = n // 12

        def placed(a):
            return da.concatenate([da.from_array(a[i * chunk:(i + 1) * chunk], chunks=chunk)
                                   .persist(workers=[first if i < 10 else second]) for i in range(12)])

        keys, values = placed(x), placed(v)
        results = client.persist([*gpusort.sort_by_key(keys, values, chunks=50_000), gpusort.sort(keys, chunks=50_000)])
        wait(results)
        left = client.run(spill_files)  # the results still map them
        sk, sv, got = client.compute(results, sync=True)
        written = client.run(spill.written)
    assert left == {w: [] for w in left}
    if spilling == "both":
        assert all(w > n * 8 // 12 for w in written.values()), written
    else:
        assert written[second] == 0 and written[first] > n * 8, written
    want = ref_argsort(x)
    np.testing.assert_array_equal(sv, want)
    assert_same_keys(sk, x[want], bits="exact")
    assert_same_keys(got, np.sort(x, kind="stable"), bits="exact")


def test_spill_share_setting_is_checked():
    for bad in ("half", 1.5, -0.1):
        with dask.config.set({"gpusort.spill-share": bad}), pytest.raises(ValueError, match="gpusort.spill-share"):
            spill.share_setting()


@pytest.fixture(scope="module")
def eight_workers():
    with LocalCluster(n_workers=8, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            yield client


def sent(client) -> dict[str, int]:
    totals = {"bytes": 0, "messages": 0}
    for counts in client.run(exchange.sent).values():
        for k in totals:
            totals[k] += counts[k]
    return totals


@pytest.mark.timeout(300)
def test_eight_workers_exact_with_bulk_messages(eight_workers):
    client = eight_workers
    rng = np.random.default_rng(8)
    n, p, j = 200_000, 40, 25
    x = rng.integers(-300, 300, n).astype(np.float32)
    x[rng.random(n) < 0.02] = np.nan
    keys = da.from_array(x, chunks=n // p).persist()
    values = da.from_array(np.arange(n, dtype=np.int64), chunks=n // p).persist()
    before = sent(client)
    with dask.config.set(ONE_CHUNK_PER_TASK):
        k, v = gpusort.sort_by_key(keys, values, descending=True, chunks=n // j)
        tasks = len(dict(v.__dask_graph__()))
        k, v = client.compute([k, v], sync=True)
    after = sent(client)
    want = ref_argsort(x, descending=True)
    np.testing.assert_array_equal(v, want)
    np.testing.assert_array_equal(k.view(np.uint32), x[want].view(np.uint32))
    # O(P + J + W) tasks: no term in P x J.
    assert tasks <= 3 * (p + j) + 8 + 10, tasks
    # Three rounds between the W = 8 workers, each one message per ordered pair:
    # samples, window keys, slices.  O(W^2), whatever P and J.
    messages = after["messages"] - before["messages"]
    assert messages == 3 * 8 * 7, messages
    # Only what other workers merge travels: about 7/8 of the data, never more than all of it.
    moved = after["bytes"] - before["bytes"]
    assert 0.5 * (x.nbytes + 8 * n) <= moved <= x.nbytes + 8 * n, moved


@pytest.mark.timeout(300)
def test_eight_workers_hundreds_of_chunks_argsort(eight_workers):
    rng = np.random.default_rng(9)
    x = rng.integers(0, 50, 60_000)
    keys = da.from_array(x, chunks=211)  # 285 chunks in, 300 out
    got = eight_workers.compute(gpusort.argsort(keys, chunks=200), sync=True)
    np.testing.assert_array_equal(got, np.argsort(x, kind="stable"))


def test_built_for_a_cluster_computed_elsewhere_says_how_to_fix(eight_workers):
    keys = da.from_array(np.arange(1000)[::-1], chunks=100)
    with dask.config.set(ONE_CHUNK_PER_TASK):
        y = gpusort.sort(keys)  # built while the 8-worker client is current: an exchange
    with pytest.raises(RuntimeError, match="gpusort.exchange"):
        y.compute(scheduler="sync")
    with dask.config.set({"gpusort.exchange": "local"}):
        np.testing.assert_array_equal(gpusort.sort(keys).compute(scheduler="sync"), np.arange(1000))


class FailingMerge(WorkerPlugin):
    """Every owner's merge fails, as a GPU out of memory would, after the barrier task has ended."""

    def setup(self, worker):
        from gpusort.engine.exchange import SortRun

        self.real = SortRun._merge

        def out_of_memory(run, pieces, scheme):
            raise MemoryError("merge: out of memory (injected by the test)")

        SortRun._merge = out_of_memory

    def teardown(self, worker):
        from gpusort.engine.exchange import SortRun

        SortRun._merge = self.real


@pytest.mark.timeout(120)
def test_a_failure_inside_the_exchange_reaches_the_caller(eight_workers):
    client = eight_workers
    keys = da.from_array(np.arange(10_000)[::-1], chunks=500)
    client.register_plugin(FailingMerge(), name="failing-merge")
    try:
        with dask.config.set(ONE_CHUNK_PER_TASK), pytest.raises(Exception) as info:
            client.compute(gpusort.sort(keys, chunks=400), sync=True)
    finally:
        client.unregister_worker_plugin("failing-merge")
    causes = []
    error = info.value
    while error is not None:
        causes.append(error)
        error = error.__cause__
    assert any(isinstance(e, MemoryError) and "injected by the test" in str(e) for e in causes), causes
    again = da.from_array(np.arange(10_000)[::-1] * 2, chunks=500)  # new keys: the failed ones stay failed
    with dask.config.set(ONE_CHUNK_PER_TASK):  # nothing waits on the failed exchange any more
        np.testing.assert_array_equal(client.compute(gpusort.sort(again, chunks=400), sync=True),
                                      np.arange(10_000) * 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["sorted", "reversed", "chunks-sorted", "nearly-sorted"])
def test_sorted_input_takes_the_short_way_and_stays_exact(eight_workers, kind):
    """Runs that follow one another need no windows and no merge; parts sorted already need no sort."""
    rng = np.random.default_rng(11)
    n = 40_000
    x = np.sort(rng.integers(-500, 500, n)).astype(np.float64)
    x[-300:] = np.nan
    x[(x == 0)[:n // 2].nonzero()[0]] = -0.0  # both zeros: their input order must survive
    if kind == "reversed":
        x = x[::-1].copy()
    elif kind == "chunks-sorted":
        x = np.concatenate([np.sort(c) for c in np.split(rng.permutation(x), 20)])
    elif kind == "nearly-sorted":
        x = x[np.argsort(np.arange(n) + rng.integers(0, 2_000, n), kind="stable")]
    keys = da.from_array(x, chunks=2_000).persist()
    got, positions = eight_workers.compute([gpusort.sort(keys, chunks=3_000), gpusort.argsort(keys)], sync=True)
    want = np.argsort(x, kind="stable")
    np.testing.assert_array_equal(positions, want)
    np.testing.assert_array_equal(got.view(np.uint64), x[want].view(np.uint64))


def test_runs_that_tie_on_label_and_length_are_ordered_alike_on_every_owner():
    """Round 1's runs are ordered by (label, length), then sender: never by their sample arrays."""

    def message(sender, labels, samples):
        described = exchange.Described(labels, [10] * len(labels), set(), [None] * len(labels), False)
        return samples, exchange.Header("samples", 0, sender, described)

    described = [message(1, [3], [np.array([5, 9])]), message(0, [3, 7], [np.array([1, 4]), np.array([2, 8])]),
                 message(2, [0], [np.array([0, 6])])]
    want = [(0, 10, [0, 6]), (3, 10, [1, 4]), (3, 10, [5, 9]), (7, 10, [2, 8])]
    for order in (described, described[::-1]):  # each owner gets its own message first
        got = exchange._every_run(order)
        assert [(label, length, sample.tolist()) for label, length, sample, _ in got] == want


def test_disjoint_pieces_are_concatenated_not_merged():
    from gpusort.engine import tasks

    assert tasks.disjoint([np.array([1.0, 2.0]), np.array([2.0, np.nan])])
    assert not tasks.disjoint([np.array([1.0, np.nan]), np.array([2.0])])
    assert not tasks.disjoint([np.array([1, 5]), np.array([4, 6])])
    pieces = [(np.array([-0.0, 1.0]), None), (np.array([1.0, 3.0]), None)]
    keys, _ = tasks.merge_pieces("numpy", np.dtype(np.float64), False, "float", pieces)
    np.testing.assert_array_equal(keys, [-0.0, 1.0, 1.0, 3.0])


@pytest.mark.parametrize("dtype", ["int64", "uint16", "float32", "float64"])
def test_is_sorted_reads_parts_end_to_end(dtype):
    from gpusort.backends import get_backend

    cases = parts_in_order_or_not(dtype)
    assert {ref_in_order(parts) for parts in cases} == {True, False}
    for parts in cases:
        assert get_backend("numpy").is_sorted(parts) == ref_in_order(parts), [len(p) for p in parts]


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_is_sorted_samples_first_then_reads_all(dtype):
    from gpusort.backends import get_backend

    host = get_backend("numpy")
    x = np.arange(10_000).astype(dtype)
    assert host.is_sorted(x)
    y = x.copy()
    y[5_001], y[5_002] = y[5_002], y[5_001]  # between two samples: only the full pass sees it
    assert not host.is_sorted(y)
    assert not host.is_sorted(x[::-1])
    if dtype.startswith("f"):
        z = x.copy()
        z[100] = np.nan  # a NaN before numbers is out of order
        assert not host.is_sorted(z)
        z[-10:] = np.nan
        z[100] = 100
        assert host.is_sorted(z)
