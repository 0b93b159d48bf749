"""The sort across workers on collectives (gpusort.engine.collective), on host communicators between threads.

The engine that GPU workers run over NCCL, with its transport replaced by
:mod:`hostcomms` (a rendezvous of the workers' threads): every rank's runs,
splitters, exchange and merge, the graph's placement of chunks and output,
and the turn and agreement of the communicators, checked against NumPy.
"""

import hashlib
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

import gpusort
import hostcomms
from gpusort.engine import collective, comms
from gpusort.keys import corank
from reference import assert_sorts_exact, make_keys, sorts_of


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=3, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            hostcomms.install(c)
            with dask.config.set({"gpusort.exchange": "collective"}):
                yield c


def tasks_of(y) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in dict(y.__dask_graph__()):
        prefix = (key[0] if isinstance(key, tuple) else key).split("-")[0]
        counts[prefix] = counts.get(prefix, 0) + 1
    return counts


CASES = [(d, p) for d in ("int64", "float32", "uint8")
         for p in ("random", "few", "equal", "sorted", "reversed", "extremes") + (("nan",) if d[0] == "f" else ())]


@pytest.mark.parametrize("dtype, pattern", CASES, ids=[f"{d}-{p}" for d, p in CASES])
def test_sort_argsort_and_pairs_exact(client, rng, dtype, pattern):
    x = make_keys(rng, dtype, 30_011, pattern)
    chunks = (7_000, 0, 1, 5_000, 18_010)
    keys = da.from_array(x, chunks=(chunks,))
    values = da.from_array(np.arange(x.size, dtype=np.int32), chunks=(chunks,))
    s, p, (k, v), sd = dask.compute(*sorts_of(keys, values, 4_000))
    assert_sorts_exact(x, s, p, k, v, sd)


def test_graph_is_a_task_per_worker_and_a_view_per_chunk(client):
    x = da.random.default_rng(1).integers(0, 2**40, 200_000, chunks=1_000)
    y = gpusort.sort(x, chunks=2_000)
    counts = tasks_of(y)
    assert counts["collective"] == 3 and counts["ranked"] == 3 and counts["sorted"] == 100
    assert y.chunks == ((2_000,) * 100,)


def test_persisted_chunks_are_sorted_where_they_are(client):
    x = da.random.default_rng(2).integers(-50, 50, 300_000, chunks=10_000).persist()
    wait(x)
    before = {c.rank: c.moved for c in comms._registry.values() if isinstance(c, hostcomms.HostComm)}
    y = gpusort.sort(x).persist()
    wait(y)
    got = y.compute()
    np.testing.assert_array_equal(got, np.sort(x.compute()))
    assert [len(c) for c in y.chunks] == [30]
    # A rank receives what other ranks merge of its keys: at most two thirds of them, never a chunk beforehand.
    moved = sum(c.moved - before[c.rank] for c in comms._registry.values() if isinstance(c, hostcomms.HostComm))
    assert moved <= x.nbytes * 2 / 3 * 1.2


def test_part_of_the_result_runs_every_rank(client):
    """A slice of the output needs only its rank's block, but a rank alone would wait for the others."""
    x = np.random.default_rng(3).permutation(90_000)
    y = gpusort.sort(da.from_array(x, chunks=9_000), chunks=1_000)
    np.testing.assert_array_equal(y[:10].compute(), np.arange(10))
    np.testing.assert_array_equal(y[-5:].compute(), np.arange(89_995, 90_000))


def test_output_chunks_fewer_than_workers(client):
    x = np.random.default_rng(4).integers(0, 9, 10_000)
    y = gpusort.sort(da.from_array(x, chunks=1_000), chunks=10_000)
    assert y.chunks == ((10_000,),)
    np.testing.assert_array_equal(y.compute(), np.sort(x))


def test_hundreds_of_tiny_chunks(client):
    x = np.random.default_rng(5).normal(size=3_001)
    p = gpusort.argsort(da.from_array(x, chunks=7), chunks=100)
    np.testing.assert_array_equal(p.compute(), np.argsort(x, kind="stable"))


def test_two_sorts_at_once_take_turns(client):
    """Ranks that meet in different sorts step aside for one of them, then run the other: both exact."""
    rng = np.random.default_rng(6)
    xs = [rng.integers(0, 2**30, 120_000) for _ in range(3)]
    ys = [gpusort.sort(da.from_array(x, chunks=8_000), chunks=10_000) for x in xs]
    futures = [client.compute(y) for y in ys]
    for x, f in zip(xs, futures):
        np.testing.assert_array_equal(f.result(timeout=120), np.sort(x))


def test_many_sorts_at_once_on_workers_of_one_thread(monkeypatch):
    """Ranks that wait for their peers, or for other sorts, hold none of a worker's threads.

    Four sorts whose inputs are computed in the same graph, on workers of one
    thread (dask-cuda's default): a rank that held its thread while it waited
    would leave no thread for the inputs of the ranks it waits for.
    """
    monkeypatch.setattr(comms, "HANDSHAKE_TIMEOUT", 30.0)  # a deadlock fails the test instead of hanging it
    rng = np.random.default_rng(8)
    xs = [rng.integers(0, 1_000, 60_000) for _ in range(4)]

    def slow(block):  # inputs that take a moment, so that some ranks start before their peers' inputs exist
        time.sleep(0.005)
        return block

    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c, dask.config.set({"gpusort.exchange": "collective"}):
            hostcomms.install(c)
            ys = [gpusort.sort(da.from_array(x, chunks=5_000).map_blocks(slow, dtype=x.dtype)) for x in xs]
            got = dask.compute(*ys)
    for x, y in zip(xs, got):
        np.testing.assert_array_equal(y, np.sort(x))


def test_a_failing_rank_fails_the_sort_everywhere(client):
    """A chunk that loads other than it declares stops its rank; the others learn it at once, not by a timeout."""
    x = da.from_array(np.arange(40_000), chunks=10_000)
    short = x.map_blocks(lambda b, block_info=None: b[:-1] if block_info[0]["chunk-location"] == (2,) else b,
                         dtype=x.dtype)
    with pytest.raises(Exception, match="input chunk 2 loaded 9999 keys|rank .* failed"):
        gpusort.sort(short).compute()
    # The communicators are still well: the next sort runs.
    np.testing.assert_array_equal(gpusort.sort(x[::-1]).compute(), np.arange(40_000))


def test_communicators_of_the_cluster_are_found_again(client):
    group = comms.ensure(client)
    assert group is not None and group.kind == "host" and len(group.workers) == 3


@pytest.mark.parametrize("n, chunk, nranks", [(100, 10, 4), (10, 10, 3), (7, 1, 2), (1_000, 999, 4)])
def test_output_blocks_cover_every_chunk_once_in_order(n, chunk, nranks):
    ranks = corank.output_ranks(n, chunk)
    blocks = collective.output_blocks(ranks, nranks)
    assert blocks[0][0] == 0 and blocks[-1][1] == len(ranks) - 1
    assert all(a <= b == c for (a, b), (c, _) in zip(blocks, blocks[1:]))


def test_place_keeps_chunks_where_they_are_within_a_share():
    lengths = [100] * 12
    owner = collective.place(lengths, 8, [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0], 3)
    assert owner[:9] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    loads = np.bincount(owner, minlength=3)
    assert loads.max() <= 5  # 4 a rank, and an eighth to spare
    assert collective.place(lengths, 8, [None] * 12, 3) == [0] * 4 + [1] * 4 + [2] * 4


def test_a_sort_whose_rank_is_yet_to_come_does_not_hold_up_a_sort_that_is_ready(monkeypatch):
    """Rank 1 starts sort ``late`` only once sort ``ready`` has ended there (as a sort of another sort's
    output would): ``ready`` must run first on both ranks, though ``late`` is the least token."""
    monkeypatch.setattr(comms, "HANDSHAKE_TIMEOUT", 10.0)  # a deadlock fails the test instead of hanging it

    def digest(token: str) -> bytes:
        return hashlib.blake2b(token.encode(), digest_size=16).digest()

    late, ready = sorted(["p", "q"], key=digest)
    table = hostcomms._Table()
    ranks = [hostcomms.HostComm(table, ("a", "b"), r, "k") for r in range(2)]
    order: list[tuple[int, str]] = []
    ended = threading.Event()

    def one(rank: int, token: str, after: threading.Event | None = None) -> None:
        if after is not None:
            after.wait(30)
        with ranks[rank].turn(token):
            order.append((rank, token))
            got = ranks[rank].all_gather(np.array([rank], np.uint8), [1, 1])
            assert [int(g[0]) for g in got] == [0, 1]
        if (rank, token) == (1, ready):
            ended.set()

    threads = [threading.Thread(target=one, args=args)
               for args in [(0, late), (0, ready), (1, ready), (1, late, ended)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(order) == sorted([(0, late), (0, ready), (1, ready), (1, late)])
    assert [t for r, t in order if r == 0] == [t for r, t in order if r == 1] == [ready, late]


def test_turn_handshake_is_the_first_call_and_ends_with_the_sort():
    """Two ranks in threads: a different token on each first steps aside, then both sorts run in turn."""
    table = hostcomms._Table()
    workers = ("a", "b")
    ranks = [hostcomms.HostComm(table, workers, r, "k") for r in range(2)]
    order: list[tuple[int, str]] = []

    def run(rank: int, tokens: list[str]) -> None:
        threads = []
        for token in tokens:
            def one(token=token):
                with ranks[rank].turn(token):
                    order.append((rank, token))
                    got = ranks[rank].all_gather(np.array([rank], np.uint8), [1, 1])
                    assert [int(g[0]) for g in got] == [0, 1]
            threads.append(threading.Thread(target=one))
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    a = threading.Thread(target=run, args=(0, ["x", "y"]))
    b = threading.Thread(target=run, args=(1, ["y", "x"]))
    a.start(); b.start(); a.join(60); b.join(60)
    assert sorted(order) == [(0, "x"), (0, "y"), (1, "x"), (1, "y")]
    # Every sort ran on both ranks together: their orders agree.
    assert [t for r, t in order if r == 0] == [t for r, t in order if r == 1]
