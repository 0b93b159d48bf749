"""The exchange between workers (gpusort.exchange) on CPU clusters.

Machines with 4 and 8 GPUs are not at hand: 8 single-threaded CPU workers
stand in for them, with the NumPy backend, checking exactness, the number of
tasks and the number of messages between workers.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.protocol import serialize, to_serialize

import gpusort
from gpusort import exchange
from reference import ref_argsort

ONE_CHUNK_PER_TASK = {"gpusort.task-bytes": 0}


def test_messages_serialize_array_by_array():
    """A message's arrays travel as frames: distributed must not pickle it whole (a GPU slice would go via host)."""
    keys, values = np.arange(100), np.arange(100.0)
    message = [(exchange._framed([keys[10:60], values[10:60]]), ("slabs", 0, 1, [(0, 2)], False))]
    header, frames = serialize(to_serialize(message), serializers=("dask", "pickle"))
    flat = str(header)
    assert "'serializer': 'dask'" in flat and flat.count("'type': 'numpy.ndarray'") >= 2, flat[:400]
    assert exchange._framed([])[0].size == 0  # a message without arrays still leads with one


def test_consecutive_parts_and_one_run_per_worker():
    assert exchange.consecutive([0, 1, 3, 4, 5, 9]) == [[0, 1], [3, 4, 5], [9]]
    assert exchange.one_run_per_worker(np.dtype(np.int64), stable=False)
    assert not exchange.one_run_per_worker(np.dtype(np.int64), stable=True)


def test_contiguous_ranges_of_output_chunks():
    assert exchange.contiguous_ranges({0: "a", 1: "a", 2: "b", 3: "b", 4: "a"}) == {"a": [(0, 2), (4, 5)],
                                                                                   "b": [(2, 4)]}


@pytest.fixture(scope="module")
def eight_workers():
    with LocalCluster(n_workers=8, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
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
