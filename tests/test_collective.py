"""The sort across workers on collectives (gpusort.engine.collective), on host communicators between threads.

The engine that GPU workers run over NCCL, with its transport replaced by
:mod:`hostcomms` (a rendezvous of the workers' threads): every rank's runs,
splitters, exchange and merge, the graph's placement of chunks and output,
and the turn and agreement of the communicators, checked against NumPy.
"""

import threading
import time
import uuid

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

import gpusort
import hostcomms
from gpusort.engine import collective, comms, nccl
from gpusort.keys import corank, order
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


def test_graph_is_two_tasks_per_worker_and_a_view_per_chunk(client):
    x = da.random.default_rng(1).integers(0, 2**40, 200_000, chunks=1_000)
    y = gpusort.sort(x, chunks=2_000)
    counts = tasks_of(y)
    assert counts["launch"] == 3 and counts["collective"] == 3 and counts["output"] == 100
    assert y.chunks == ((2_000,) * 100,)
    # Nothing crosses workers after the sort: a view awaits its own rank's block alone, on its worker's event loop.
    graph = dict(y.__dask_graph__())
    for key in y.__dask_keys__():
        (dep,) = graph[key].dependencies
        assert dep[0].startswith("collective-") and graph[dep].worker == graph[key].worker
        assert graph[key].is_coro and graph[dep].is_coro
    # Every rank's collective task reads every rank's launch task: any part of the result starts them all.
    collectives = [k for k in graph if k[0].startswith("collective-")]
    for k in collectives:
        assert sorted(d[1] for d in graph[k].dependencies) == [0, 1, 2]
        assert all(d[0].startswith("launch-") for d in graph[k].dependencies)


def test_output_chunks_stay_on_the_worker_that_merged_them(client):
    """Each view is pinned to its rank's worker: the result is three runs of consecutive chunks, in rank order."""
    x = da.random.default_rng(2).integers(0, 2**40, 120_000, chunks=1_000)
    y = gpusort.sort(x, chunks=2_000).persist()
    wait(y)
    where = client.who_has(y)
    holders = [where[k] for k in y.__dask_keys__()]
    assert all(len(h) == 1 for h in holders)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    ranks = [workers.index(h[0]) for h in holders]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}
    pinned = client.run_on_scheduler(lambda keys, dask_scheduler=None: [
        sorted(dask_scheduler.tasks[k].worker_restrictions or ()) for k in keys], y.__dask_keys__())
    assert pinned == [[h[0]] for h in holders]  # pinned there, not merely put there
    np.testing.assert_array_equal(y.compute(), np.sort(x.compute()))


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
    """A slice of the output needs only its rank's block, but a rank alone would wait for the others.

    The blocks no task reads are let go of: none is left behind in the workers.
    """
    x = np.random.default_rng(3).permutation(90_000)
    y = gpusort.sort(da.from_array(x, chunks=9_000), chunks=1_000)
    np.testing.assert_array_equal(y[:10].compute(), np.arange(10))
    np.testing.assert_array_equal(y[-5:].compute(), np.arange(89_995, 90_000))
    deadline = time.monotonic() + 10
    while collective._launched:
        assert time.monotonic() < deadline, f"blocks left behind: {sorted(collective._launched)}"
        time.sleep(0.01)


_GATE = threading.Event()  # module-level: the graph's functions are pickled, an Event is not


def _held(block, block_info=None):
    """Chunk 0 comes only when the gate opens: until then its rank cannot start."""
    if block_info[0]["chunk-location"] == (0,):
        _GATE.wait(60)
    return block


def test_ranks_of_a_sort_let_go_of_stop_waiting(client, monkeypatch):
    """A rank whose peer's input never comes stops waiting once the graph lets go of the sort: no thread is left."""
    monkeypatch.setattr(comms, "RENDEZVOUS_POLL", 0.1)
    gate = _GATE
    gate.clear()

    def ranks() -> list:
        return [t for t in threading.enumerate() if t.name.startswith("gpusort-rank-")]

    x = da.from_array(np.arange(30_000)[::-1].copy(), chunks=10_000).map_blocks(_held, dtype=np.int64)
    try:
        future = client.compute(gpusort.sort(x))
        deadline = time.monotonic() + 30
        while not ranks() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ranks(), "no rank started"
        del future  # the graph lets go of the sort
        deadline = time.monotonic() + 30
        while ranks() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not ranks(), "ranks still wait for a sort nobody wants"
    finally:
        gate.set()
    np.testing.assert_array_equal(gpusort.sort(x).compute(), np.arange(30_000))  # the communicators are well


def test_a_rank_whose_worker_left_fails_the_sort_instead_of_waiting_for_it(monkeypatch):
    """A task pinned to a worker that left can run nowhere: the sort fails with a clear error, never hangs."""
    monkeypatch.setattr(comms, "RENDEZVOUS_POLL", 0.1)
    _GATE.clear()
    x = da.from_array(np.arange(30_000)[::-1].copy(), chunks=10_000).map_blocks(_held, dtype=np.int64)
    # Two threads a worker: the gate holds one, wherever the scheduler put chunk 0.
    with LocalCluster(n_workers=3, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c, dask.config.set({"gpusort.exchange": "collective"}):
            group = hostcomms.install(c)
            future = c.compute(gpusort.sort(x))  # rank 0 sorts chunk 0, which waits at the gate
            deadline = time.monotonic() + 30
            while len([t for t in threading.enumerate() if t.name.startswith("gpusort-rank-")]) < 2:
                assert time.monotonic() < deadline, "ranks 1 and 2 did not start"
                time.sleep(0.01)
            (gone,) = [w for w in cluster.workers.values() if w.address == group.workers[0]]
            threading.Timer(0.5, _GATE.set).start()  # the input comes once rank 0's worker has gone
            try:
                cluster.sync(gone.close)
                with pytest.raises(Exception, match="left the cluster"):
                    future.result(timeout=30)
            finally:
                _GATE.set()


ROUNDS = [("int64", "random", 2), ("float32", "nan", 3), ("uint8", "few", 5), ("int64", "equal", 2)]


@pytest.mark.parametrize("dtype, pattern, rounds", ROUNDS, ids=[f"{d}-{p}-{r}" for d, p, r in ROUNDS])
def test_sorts_in_rounds_exact(client, rng, dtype, pattern, rounds):
    """Runs kept where the ranks formed them, exchanged and merged a sub-block of every block at a time."""
    x = make_keys(rng, dtype, 30_011, pattern)
    chunks = (7_000, 0, 1, 5_000, 18_010)
    keys = da.from_array(x, chunks=(chunks,))
    values = da.from_array(np.arange(x.size, dtype=np.int32), chunks=(chunks,))
    with dask.config.set({"gpusort.collective-rounds": rounds}):
        sorts = sorts_of(keys, values, 4_000)
        assert all(tasks_of(y)["launch"] == 3 for y in sorts[:2])
        launches = [t for key, t in dict(sorts[1].__dask_graph__()).items() if key[0].startswith("launch-")]
        assert {t.args[0].rounds for t in launches} == {rounds}
        s, p, (k, v), sd = dask.compute(*sorts)
    assert_sorts_exact(x, s, p, k, v, sd)


def test_rounds_keep_every_rank_s_sends_within_a_round_s_share(client, monkeypatch):
    """Rank 0 holds the first third of every rank's block: a round of equal pieces would take all its keys at once."""
    n, block = 60_000, 20_000
    first = np.concatenate([np.arange(p * block, p * block + block // 3) for p in range(3)])
    rest = np.setdiff1d(np.arange(n), first)
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.permutation(first), rng.permutation(rest)])  # chunks 0-1 go to rank 0
    assert len(first) <= block
    upload, sizes = collective._upload, []

    def counted(backend, parts):
        sizes.append(sum(len(p) for p in parts))
        return upload(backend, parts)

    monkeypatch.setattr(collective, "_upload", counted)
    with dask.config.set({"gpusort.collective-rounds": 2}):
        got = gpusort.sort(da.from_array(x, chunks=10_000)).compute()
    np.testing.assert_array_equal(got, np.arange(n))
    cap = -(-9 * block // (8 * 2))  # a round's share of the largest rank's keys, an eighth to spare
    assert max(sizes) <= cap, f"a round took up {max(sizes)} keys, past {cap}"


def test_rounds_setting_is_checked(client):
    with dask.config.set({"gpusort.collective-rounds": 0}), pytest.raises(ValueError, match="collective-rounds=0"):
        gpusort.sort(da.arange(10, chunks=5))


MERGES = [("int64", "few"), ("float64", "nan"), ("uint8", "random"), ("float32", "extremes"), ("int32", "equal")]


@pytest.mark.parametrize("dtype, pattern", MERGES, ids=[f"{d}-{p}" for d, p in MERGES])
def test_merges_run_on_the_ranks_exact(client, rng, dtype, pattern):
    """merge and merge_by_key of sorted inputs as the ranks' runs: nothing sorted, ties from a first, exact bits."""
    a, b = (np.sort(make_keys(rng, dtype, n, pattern), kind="stable") for n in (40_001, 23_007))
    va, vb = np.arange(a.size, dtype=np.int32), np.arange(a.size, a.size + b.size, dtype=np.int32)
    A, B = da.from_array(a, chunks=6_000), da.from_array(b, chunks=((5_000, 0, 1, 18_006),))
    merged = gpusort.merge(A, B, chunks=7_000)
    assert tasks_of(merged)["launch"] == 3 and "runs" not in tasks_of(merged)
    both = np.concatenate([a, b])
    stable = np.argsort(both, kind="stable")  # a's ties first: a comes first
    keys, values = dask.compute(merged, gpusort.merge_by_key(A, da.from_array(va, chunks=6_000), B,
                                                             da.from_array(vb, chunks=((5_000, 0, 1, 18_006),))))
    np.testing.assert_array_equal(keys.view(np.uint8), both[stable].view(np.uint8))
    np.testing.assert_array_equal(values[1], np.concatenate([va, vb])[stable])
    if dtype[0] != "f":  # descending inputs, NaN-free
        down = gpusort.merge(A[::-1], B[::-1], descending=True).compute()
        np.testing.assert_array_equal(down, np.sort(both, kind="stable")[::-1])


def test_a_merge_input_out_of_order_where_ranks_meet_is_named(client):
    """Each chunk sorted, but not where one rank's chunks end and the next rank's begin: the position is named."""
    a = np.concatenate([np.arange(10_000, 20_000), np.arange(0, 10_000), np.arange(20_000, 30_000)])
    merged = gpusort.merge(da.from_array(a, chunks=10_000), da.from_array(np.arange(3), chunks=3))
    with pytest.raises(ValueError, match=r"a is not sorted .*a\[10000\] = 0 comes after a\[9999\] = 19999"):
        merged.compute()


def test_a_merge_input_out_of_order_inside_a_later_rank_s_chunk_is_named(client):
    """The rank that finds it is not rank 0: every rank raises its ValueError, whichever the client hears from."""
    a = np.arange(30_000)
    a[25_000] = -5
    merged = gpusort.merge(da.from_array(a, chunks=10_000), da.from_array(np.arange(3), chunks=3))
    with pytest.raises(ValueError, match=r"a is not sorted .*a\[25000\] = -5 comes after a\[24999\] = 24999"):
        merged.compute()


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
    monkeypatch.setattr(comms, "TURN_TIMEOUT", 30.0)  # a deadlock fails the test instead of hanging it
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


def test_a_rank_failing_inside_a_round_fails_the_sort_everywhere(client, monkeypatch):
    """A rank whose second round's merge fails (out of memory, say): every rank stops at the next agreement."""
    merge, calls = collective.tasks.merge_pieces, []

    def failing(*args, **kwargs):
        if threading.current_thread().name.startswith("gpusort-rank-1-"):
            calls.append(1)
            if len(calls) == 2:
                raise MemoryError("out of memory in round 2")
        return merge(*args, **kwargs)

    monkeypatch.setattr(collective.tasks, "merge_pieces", failing)
    x = da.from_array(np.random.default_rng(6).permutation(60_000), chunks=10_000)
    start = time.monotonic()
    with dask.config.set({"gpusort.collective-rounds": 3}), pytest.raises(Exception, match="out of memory in round 2"):
        gpusort.sort(x).compute()
    assert time.monotonic() - start < comms.TIMEOUT / 3, "the peers waited for a timeout"
    monkeypatch.setattr(collective.tasks, "merge_pieces", merge)
    with dask.config.set({"gpusort.collective-rounds": 3}):  # the communicators are still well
        np.testing.assert_array_equal(gpusort.sort(x).compute(), np.arange(60_000))


def test_every_view_of_a_failed_rank_raises_its_error_with_the_rank_s_traceback():
    """Views share the rank's exception: each raise must not lengthen its traceback (quadratic in the views)."""
    import asyncio
    import concurrent.futures
    import traceback

    future = concurrent.futures.Future()
    try:
        raise ValueError("a is not sorted")
    except ValueError as exc:
        future.set_exception(exc)
    block = collective.Block(future)

    async def depth() -> int:
        try:
            await collective.view(block, 0, 0, 1)
        except ValueError as exc:
            return len(traceback.extract_tb(exc.__traceback__))
        raise AssertionError("the view did not raise")

    depths = [asyncio.run(depth()) for _ in range(20)]
    assert len(set(depths)) == 1, depths


def test_communicators_of_the_cluster_are_found_again(client):
    group = nccl.ensure(client)
    assert group is not None and group.kind == "host" and len(group.workers) == 3


def _abort_here(key):
    from distributed import get_worker

    comms._registry[get_worker().address].abort("aborted by a test")


def test_an_aborted_communicator_is_forgotten_by_the_scheduler():
    """The scheduler answers ensure() alone while the communicators are well; a rank's abort makes it ask again."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            group = hostcomms.install(c)
            assert nccl.ensure(c) == group
            c.submit(_abort_here, group.key, workers=[group.workers[1]], pure=False).result()
            deadline = time.monotonic() + 10
            while c.run_on_scheduler(comms._known)["group"] is not None:
                assert time.monotonic() < deadline, "the scheduler still holds the aborted communicators"
                time.sleep(0.01)
            assert nccl.ensure(c) is None  # asked again: host workers have no NCCL to make new ones with


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


def _pair() -> list[hostcomms.HostComm]:
    """Two ranks of a new host communicator, for threads outside a worker."""
    key = uuid.uuid4().hex
    table = hostcomms._Table()
    return [hostcomms.HostComm(table, ("a", "b"), r, key) for r in range(2)]


def test_a_sort_whose_rank_is_yet_to_come_does_not_hold_up_a_sort_that_is_ready(monkeypatch):
    """Rank 1 starts sort ``late`` only once sort ``ready`` has ended there (as a sort of another sort's
    output would): ``ready`` must run first on both ranks, though rank 0 asked for ``late`` first."""
    monkeypatch.setattr(comms, "TURN_TIMEOUT", 10.0)  # a deadlock fails the test instead of hanging it
    late, ready = "late", "ready"
    ranks = _pair()
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


def test_sorts_that_reach_the_ranks_in_different_orders_run_in_one_order():
    """Two ranks in threads, each in two sorts, started in opposite orders: both sorts run, in one order on both."""
    ranks = _pair()
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


def test_no_collective_call_before_every_rank_of_the_sort_has_started():
    """A rank whose peer's task has not started yet posts nothing to the transport: on a GPU, an NCCL
    kernel spinning for that peer could block the work that the peer's input still needs."""
    ranks = _pair()
    started = threading.Event()
    early: list[int] = []
    gathered: dict[int, list[int]] = {}
    swap = hostcomms.HostComm._swap

    def recorded(self, payload, timeout):
        if not started.is_set():
            early.append(self.rank)
        return swap(self, payload, timeout)

    def one(rank: int) -> None:
        if rank == 1:
            time.sleep(0.3)
            started.set()
        with ranks[rank].turn("t"):
            gathered[rank] = [int(g[0]) for g in ranks[rank].all_gather(np.array([rank], np.uint8), [1, 1])]

    hostcomms.HostComm._swap = recorded
    try:
        threads = [threading.Thread(target=one, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        hostcomms.HostComm._swap = swap
    assert gathered == {0: [0, 1], 1: [0, 1]}
    assert early == []
    assert ranks[0].table.posts == {}  # both ranks gathered: nothing left behind


def test_a_rank_waiting_for_its_peers_stops_once_its_communicator_is_aborted(monkeypatch):
    monkeypatch.setattr(comms, "RENDEZVOUS_POLL", 0.05)
    rank = _pair()[0]
    threading.Timer(0.2, rank.abort, args=("replaced by new communicators",)).start()
    start = time.monotonic()
    with pytest.raises(comms.CommError, match="aborted \\(replaced by new communicators\\) before sort"):
        with rank.turn("alone"):
            pass
    assert time.monotonic() - start < 5


def test_a_rank_that_cannot_reach_the_scheduler_fails_and_aborts(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("connection closed")

    monkeypatch.setattr(comms, "arrive", unreachable)
    rank = _pair()[0]
    with pytest.raises(comms.CommError, match="the scheduler did not answer"):
        with rank.turn("t"):
            pass
    assert rank.broken  # its peers may hold the ticket: they must not wait for it


def test_turns_from_a_restarted_scheduler_abort_the_communicator(monkeypatch):
    ranks = _pair()
    outcome: dict[tuple[int, str], str] = {}

    def both(token: str) -> None:
        def one(r: int) -> None:
            try:
                with ranks[r].turn(token):
                    ranks[r].all_gather(np.array([r], np.uint8), [1, 1])
                outcome[r, token] = "ran"
            except comms.CommError as exc:
                outcome[r, token] = str(exc)
        threads = [threading.Thread(target=one, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    both("first")
    monkeypatch.setattr(comms, "_local_turns", comms.Turns())  # a new table: its tickets count from 0 again
    both("second")
    assert outcome[0, "first"] == outcome[1, "first"] == "ran"
    assert all("scheduler restarted" in outcome[r, "second"] for r in range(2))


def test_a_rank_that_leaves_the_rendezvous_is_waited_for_again():
    turns = comms.Turns()
    assert turns.arrive("k", "s", 0, 2) is None
    assert turns.arrive("k", "s", 0, 2, leave=True) is None  # rank 0 gave up before rank 1 came
    assert turns.arrive("k", "s", 1, 2) is None
    assert turns.arrive("k", "s", 0, 2) == 0 and turns.arrive("k", "s", 1, 2) == 0
    assert turns.arrive("k", "s2", 1, 2) is None and turns.arrive("k", "s2", 0, 2) == 1
    assert turns.arrive("k", "s2", 1, 2, leave=True) == 1  # too late to leave: its sort has begun


def test_the_host_backend_finds_the_keys_beyond_a_pivot_as_the_gpu_pass_does():
    """NumPy's ``beyond``: order keys above the pivot (complements above it, for the smallest), ``None`` past room."""
    from gpusort.backends import numpy as numpy_backend

    x = np.array([5, -3, 9, 0, 9, -7], np.int64)
    okeys = order.encode(x, False, "exact")
    pivot = okeys[0]
    count, kept = numpy_backend.BACKEND.beyond([x[:3], x[3:]], pivot, False, 8)
    assert count == 2 and sorted(kept.tolist()) == sorted(okeys[okeys > pivot].tolist())
    count, kept = numpy_backend.BACKEND.beyond([x], ~okeys[1], True, 8)
    assert count == 1 and kept.tolist() == okeys[x == -7].tolist()
    assert numpy_backend.BACKEND.beyond([x], pivot, False, 1) == (2, None)
