"""The sort across GPU workers on collectives: one task per worker sorts, splits, swaps and merges.

Where every worker of a cluster holds a communicator (:mod:`gpusort.engine.comms`:
NCCL between dask-cuda's GPU workers), the multi-GPU phase of a sort is
one task per worker, rank ``r`` pinned to worker ``r``:

1. **Runs.**  Rank ``r`` sorts the input chunks the graph gave it (those
   it holds already, where the input is in the cluster's memory) into
   runs: one run of them all where ties cannot be told apart (keys only,
   integers), else one run per range of consecutive chunks, so that run
   order is input order and ties keep it (the strict order ``(key, run,
   position)`` of :mod:`gpusort.keys.corank`).  Every rank knows every run's
   label and length from the graph alone.
2. **Splitters.**  Each rank all-gathers its runs' samples (every ``g``-th
   key), plans the same windows (:func:`gpusort.keys.corank.plan_windows`),
   all-gathers its window keys, and computes the same exact split vectors
   (:func:`gpusort.keys.corank.split_vectors`) at the edges of every rank's
   output ranks: a few MiB of host bytes in two rounds.
3. **Exchange.**  One grouped send/receive between every pair of ranks
   (NCCL's all-to-all) moves each slice of each run to the rank that merges
   it, GPU to GPU, into one buffer per rank laid out in run order.
4. **Merge.**  Each rank merges its pieces, in run order, into its block of
   output ranks: exactly balanced, stable, deterministic.

Each all-gather also carries whether its rank is well
(:meth:`gpusort.engine.comms.Collectives.all_gather`), so a rank that fails (out of memory, a
chunk that is not what it declares) fails the sort on every rank at once
instead of leaving the others waiting.

The graph (:func:`rank_graph`) has two tasks per rank and one view per
output chunk.  Rank ``r``'s ``launch-`` task starts its part of the sort in a
thread of its own and ends at once; its ``collective-`` task reads every
rank's ``launch-`` task and hands on the rank's :class:`Block` to come;
output chunk ``j`` is a view of its rank's block, a coroutine on its
worker's event loop that awaits the block.  Computing any part of the
result so starts every rank (a rank alone would wait for the others), and
the views reach their workers while the ranks sort: once a rank's block is
there its views cost no round trip to the scheduler and no hop to a thread
of the pool, which is most of what a Dask task costs (on a 2×H200 host, 64
views of blocks that come 0.1 s later took 57 ms past them as thread tasks
after the block, 41 ms as waiting coroutines; 256 views 185 and 103 ms).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import dask.array as da
import numpy as np
from dask._task_spec import List, TaskRef
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort.arrays import module, synchronize, to_numpy
from gpusort.backends import Pair, get_backend, on_device, spec_of
from gpusort.engine import comms, exchange, tasks
from gpusort.keys import corank, order


@dataclass(frozen=True)
class Plan:
    """One collective sort, as every rank's task carries it.

    ``owned[r]`` are the input chunks rank ``r`` sorts, ascending;
    ``edges[r]:edges[r+1]`` the output ranks it merges.
    """

    token: str
    group: comms.Group
    owned: tuple[tuple[int, ...], ...]
    declared: tuple[tasks.Declared, ...]  # every input chunk's
    edges: tuple[int, ...]
    positions: bool  # argsort: the values are the keys' positions
    merge_all: bool  # keys whose ties are equal bits: one run a rank
    scheme: order.Scheme
    backend: Any
    key_dtype: np.dtype
    value_dtype: np.dtype | None
    descending: bool
    upload: bool  # host chunks sorted on the GPUs: up as the runs form, the block down at the end
    on_gpu: bool  # the receive buffers are CuPy arrays, whatever a rank holds
    bounds: tuple[int, ...] = ()  # the chunks where the inputs after the first begin: no run crosses them
    presorted: Any = None  # inputs sorted already (a merge): makes and checks runs (Presorted), none sorted
    rounds: int = 1  # > 1: host runs, exchanged and merged through the GPUs a sub-block of every block at a time

    def runs_of(self, rank: int) -> list[list[int]]:
        """Rank ``rank``'s runs, each a list of its chunk indices.

        With rounds, a run a chunk: each is sorted in one step on the GPU
        and the rounds' merges take them all, where runs of many chunks
        would be merged out of core over the host link first.
        """
        held = list(self.owned[rank])
        if not held:
            return []
        if self.rounds > 1:
            return [[k] for k in held]
        if self.merge_all:
            return [held]
        return [run for ids in exchange.consecutive(held) for run in _cut_at(ids, self.bounds)]

    def table(self) -> list[tuple[int, int, int]]:
        """Every run as ``(label, rank, index among its rank's runs)``, in run order (label = first chunk)."""
        return sorted((run[0], r, i) for r in range(len(self.owned)) for i, run in enumerate(self.runs_of(r)))

    def length(self, run: Sequence[int]) -> int:
        return sum(self.declared[k][1] for k in run)

    def split_edges(self) -> np.ndarray:
        """The output ranks the splitters cut at: every rank's block's edges, each block cut into :meth:`pieces`.

        Edge ``r * pieces + b`` starts piece ``b`` of rank ``r``'s block.

        Examples
        --------
        >>> Plan.split_edges.__get__(type("P", (), {"edges": (0, 10, 20), "pieces": lambda self: 3})())().tolist()
        [0, 3, 6, 10, 13, 16, 20]
        """
        edges = np.asarray(self.edges, np.int64)
        cuts = np.arange(self.pieces(), dtype=np.int64)
        inside = edges[:-1, None] + (edges[1:, None] - edges[:-1, None]) * cuts[None, :] // self.pieces()
        return np.concatenate((inside.ravel(), edges[-1:]))

    def pieces(self) -> int:
        """How many pieces of every rank's block the splitters cut: one without rounds.

        With rounds, :data:`PIECES` a round or one a rank, whichever is more:
        one piece of every block takes at most ``1 / pieces`` of all the
        keys, so that a rank whose keys fall in one piece of every block
        sends no more than a round's share in it.
        """
        return 1 if self.rounds == 1 else self.rounds * max(PIECES, len(self.owned))

    def round_keys(self) -> int:
        """The most keys a round may have any rank send or receive: a round's share, an eighth to spare.

        The share is of the larger of the most any rank holds and the
        largest block any rank merges (:func:`gpusort.engine.graph.host_rounds`
        plans the rounds so).
        """
        held = max(sum(self.declared[k][1] for k in owned) for owned in self.owned)
        block = max(b - a for a, b in zip(self.edges[:-1], self.edges[1:]))
        return -(-9 * max(held, block) // (8 * self.rounds))


#: Pieces of every rank's block a planned round takes, at least: the rounds are
#: groups of consecutive pieces that keep every rank's sends and receives
#: within a round's share (:func:`_group_pieces`), however the keys lie.
PIECES = 4
#: Arrays the size of a round's received keys (and values) that its GPU
#: memory holds besides what it sends: the receive buffer, the merge's and
#: the decode's (:func:`gpusort.engine.graph.host_rounds` plans four a round in all).
ROUND_ARRAYS = 3


# --- the graph ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranks:
    """A collective sort in a Dask graph: task ``(name, r)`` computes rank ``r``'s merged block.

    ``blocks[r]`` are the output chunks cut from it, on worker ``r`` of the group.
    """

    graph: HighLevelGraph
    name: str
    blocks: list[tuple[int, int]]
    value_dtype: np.dtype | None


def rank_graph(parts: Sequence[tuple[da.Array, da.Array | None]], *, descending: bool, backend: Any,
               ranks: np.ndarray, positions: bool, keys_returned: bool, group: comms.Group, client: Any,
               declared: Sequence[tasks.Declared], inputs: Sequence[list], upload: bool = False,
               presorted: Any = None, rounds: int = 1) -> Ranks:
    """The rank tasks of a sort of the ``parts``' keys (end to end) into output ranks ``ranks``, one per worker of ``group``.

    ``parts``: ``(keys, values)`` arrays, one pair for a sort; ``declared``
    and ``inputs`` are, per input chunk of them all, what it declares and
    the task keys of its keys and values (:func:`gpusort.engine.graph.chunk_inputs`).
    ``upload``: host chunks that ``backend`` sorts in its (GPU) memory: each
    rank takes its chunks up once and brings its block down once.
    ``presorted``: every part is sorted already (a merge of them):
    :class:`Presorted`'s callable that makes a run of chunks and checks it,
    and the joins between runs on different ranks; nothing is sorted.
    ``rounds`` (> 1): host chunks past what the GPUs hold together; each
    rank sorts its runs out of core into host memory, and the exchange and
    the merges go through the GPUs in that many rounds (:func:`_in_rounds`).
    """
    keys, values = parts[0]
    lengths = [int(c) for k, _ in parts for c in k.chunks[0]]
    n, nranks = sum(lengths), len(group.workers)
    stable = values is not None or positions or presorted is not None
    itemsize = keys.dtype.itemsize + (8 if positions else 0 if values is None else values.dtype.itemsize)
    held = [h for k, v in parts for h in holders(client, k, v, group.workers)]
    owner = place(lengths, itemsize, held, nranks)
    owned = tuple(tuple(k for k in range(len(lengths)) if owner[k] == r) for r in range(nranks))
    blocks = output_blocks(ranks, nranks)
    bounds = tuple(np.cumsum([k.numblocks[0] for k, _ in parts])[:-1].tolist())
    plan = Plan(
        token=tokenize(parts, descending, backend, positions, keys_returned, ranks, group, owned, presorted, rounds),
        group=group, owned=owned, declared=tuple(declared),
        edges=tuple(int(ranks[a]) for a, _ in blocks) + (n,), positions=positions,
        merge_all=not stable and keys.dtype.kind in "iubmM",
        scheme="float" if presorted is not None else order.scheme_for(stable, keys_returned),
        backend=backend, key_dtype=np.dtype(keys.dtype),
        value_dtype=np.dtype(np.int64) if positions else None if values is None else np.dtype(values.dtype),
        descending=bool(descending), upload=upload, on_gpu=upload or on_device(keys._meta), bounds=bounds,
        presorted=presorted, rounds=int(rounds),
    )
    # Both tasks of rank r run on worker r of the group: the scheduler pins them there (comms.Placement).
    name, launched = "collective-" + plan.token, "launch-" + plan.token
    starts = {(launched, r): comms.PinnedTask((launched, r), launch, plan, r,
                                              *[None if x is None else TaskRef(x) for k in owned[r] for x in inputs[k]],
                                              worker=group.workers[r])
              for r in range(nranks)}
    every = List(*(TaskRef((launched, r)) for r in range(nranks)))
    dsk = {(name, r): comms.PinnedTask((name, r), collect, r, every, worker=group.workers[r]) for r in range(nranks)}
    graph = HighLevelGraph.from_collections(launched, starts, dependencies=[a for part in parts for a in part
                                                                             if a is not None])
    graph = HighLevelGraph({**graph.layers, name: dsk}, {**graph.dependencies, name: {launched}})
    return Ranks(graph, name, blocks, plan.value_dtype)


#: The sorts this process's ranks run, by ``(token, rank)``: what a ``collective-`` task waits for.
_launched: dict[tuple[str, int], concurrent.futures.Future] = {}
_launched_lock = threading.Lock()


@dataclass(frozen=True)
class Launched:
    """Rank ``rank`` of sort ``token`` under way in a thread of its worker (:func:`launch`).

    Its peers' ``collective-`` tasks read it only so that they run after
    every rank has started; its own finds the sort by name in this
    process, so a copy that Dask dropped or spilled loses nothing.
    """

    token: str
    rank: int

    def block(self) -> "Block":
        """The rank's merged block to come, taken out of this process's table of running sorts."""
        with _launched_lock:
            future = _launched.pop((self.token, self.rank), None)
        if future is None:
            raise comms.CommError(f"rank {self.rank} of sort {self.token} did not run in this worker process (it "
                                  "restarted, or the rank's result was read already); compute the sort again")
        return Block(future)


class Block:
    """A rank's merged block, to come: what its ``collective-`` task hands its views.

    Dask holds it while any view of the rank still has to run, and lets go
    of it, and of the block, after the last: the views' own results are the
    block's memory from then on.  It lives in its worker's process only.
    """

    __slots__ = ("future", "_traceback")

    def __init__(self, future: concurrent.futures.Future):
        self.future = future
        self._traceback: Any = None

    async def pair(self) -> Pair:
        """The merged keys and values, once the rank's sort has ended (its error, where it failed).

        A view that is cancelled does not cancel the rank's sort for its
        peers (``shield``); every view raises the rank's error with the
        rank's own traceback, not one that each raise of the shared
        exception would lengthen (quadratic in the views).
        """
        if not self.future.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.wrap_future(self.future))
        failure = self.future.exception()
        if failure is None:
            return self.future.result()
        if self._traceback is None:
            self._traceback = failure.__traceback__
        raise failure.with_traceback(self._traceback)

    def __sizeof__(self) -> int:
        return 64  # the views account for the block's bytes, each for its own

    def __reduce__(self):
        raise TypeError("a rank's Block stays in its worker's process (a view of it moves instead)")


def launch(plan: Plan, rank: int, *data: Any) -> Launched:
    """Rank ``rank``'s ``launch-`` task: its part of the sort (:func:`sort_on_rank`) starts in a thread, and this task ends.

    The thread acts for the sort's ``collective-`` tasks: while the
    scheduler still wants any of them its waits go on (:func:`gpusort.engine.comms.acting_for`).
    No pool thread waits for the peers, so sorts that wait for each other
    cannot hold all of a worker's threads.
    """
    context, future = contextvars.copy_context(), concurrent.futures.Future()
    keys = [("collective-" + plan.token, r) for r in range(len(plan.owned))]
    held = list(data)  # the rank's thread lets go of its inputs once they are runs

    def run() -> None:
        comms.acting_for(keys)
        try:
            future.set_result(sort_on_rank(plan, rank, held))
        except BaseException as exc:  # noqa: B036 -- the task that reads the future raises it
            future.set_exception(exc)
        # Computing part of the result runs every rank, but reads only some
        # ranks' blocks: a block that no collective- task will read goes now.
        if comms.wanted(keys[rank]) is False:
            with _launched_lock:
                if _launched.get((plan.token, rank)) is future:
                    del _launched[plan.token, rank]

    with _launched_lock:
        _launched[plan.token, rank] = future
    threading.Thread(target=context.run, args=(run,), name=f"gpusort-rank-{rank}-{plan.token[:8]}",
                     daemon=True).start()
    return Launched(plan.token, rank)


async def collect(rank: int, started: Sequence[Launched]) -> Block:
    """Rank ``rank``'s ``collective-`` task: its :class:`Block`, at once.

    It runs once every rank's ``launch-`` task has, so a view that awaits
    the block never waits for a rank that has not started.
    """
    return started[rank].block()


async def view(block: Block, field: int, start: int, stop: int) -> Any:
    """Output chunk ``[start, stop)`` of field ``field`` (keys 0, values 1) of a rank's block, once it is there."""
    return (await block.pair())[field][start:stop]


def _cut_at(ids: list[int], bounds: Sequence[int]) -> list[list[int]]:
    """Consecutive chunk ids cut where an input begins (``bounds``).

    Examples
    --------
    >>> _cut_at([2, 3, 4, 5], (4,))
    [[2, 3], [4, 5]]
    """
    runs = [[ids[0]]]
    for k in ids[1:]:
        if k in bounds:
            runs.append([k])
        else:
            runs[-1].append(k)
    return runs


def output_blocks(ranks: np.ndarray, nranks: int) -> list[tuple[int, int]]:
    """Each rank's output chunks ``[a, b)``: consecutive, of about ``n / nranks`` keys each (some may be empty).

    Chunk ``j`` goes to the rank whose share holds its middle key.

    Examples
    --------
    >>> output_blocks(corank.output_ranks(100, 10), 4)
    [(0, 2), (2, 5), (5, 7), (7, 10)]
    >>> output_blocks(corank.output_ranks(10, 10), 3)
    [(0, 0), (0, 1), (1, 1)]
    """
    n = int(ranks[-1])
    middles = (ranks[:-1] + ranks[1:]) // 2
    owner = np.minimum(middles * nranks // max(n, 1), nranks - 1)
    cuts = np.searchsorted(owner, np.arange(nranks + 1), "left")
    return [(int(cuts[r]), int(cuts[r + 1])) for r in range(nranks)]


def holders(client: Any, keys: da.Array, values: da.Array | None, workers: Sequence[str]) -> list[int | None]:
    """For each input chunk, the rank whose worker holds its keys already, or ``None`` where none does.

    Only chunks in the cluster's memory (persisted) have a holder; the rest
    are computed where the scheduler puts them.
    """
    where = client.who_has([keys] if values is None else [keys, values])
    rank_of = {w: r for r, w in enumerate(workers)}
    out: list[int | None] = []
    for key in keys.__dask_keys__():
        found = [rank_of[w] for w in where.get(key, ()) if w in rank_of]
        out.append(min(found) if found else None)
    return out


def place(lengths: Sequence[int], itemsize: int, held: Sequence[int | None], nranks: int) -> list[int]:
    """The rank that sorts each input chunk: where it is, while that rank's share allows, else where there is room.

    Every rank's share is a ``1 / nranks`` of the bytes, with an eighth to
    spare: a chunk stays with its holder within that (it moves nothing);
    the others go, in input order, to the rank whose part of the input
    they fall in if it has room, else to the least loaded rank.

    Examples
    --------
    >>> place([10] * 8, 8, [0] * 8, 4)   # all on rank 0: spread, in ranges
    [0, 0, 1, 1, 2, 2, 3, 3]
    >>> place([10] * 4, 8, [3, 2, 1, 0], 4)
    [3, 2, 1, 0]
    """
    total = sum(lengths) * itemsize
    share = total / nranks * 1.125
    load = [0] * nranks
    owner: list[int | None] = [None] * len(lengths)
    for k, (n, r) in enumerate(zip(lengths, held)):
        if r is not None and load[r] + n * itemsize <= share:
            owner[k], load[r] = r, load[r] + n * itemsize
    start = 0
    for k, n in enumerate(lengths):
        nbytes = n * itemsize
        if owner[k] is None:
            natural = min(int((start + nbytes / 2) * nranks // max(total, 1)), nranks - 1)
            r = natural if load[natural] + nbytes <= share else min(range(nranks), key=load.__getitem__)
            owner[k], load[r] = r, load[r] + nbytes
        start += nbytes
    return [int(r) for r in owner]


# --- one rank's task ----------------------------------------------------------------------------


def sort_on_rank(plan: Plan, rank: int, data: list) -> Pair:
    """Rank ``rank``'s part of the sort: its runs, the splitters, the exchange and its merged block.

    ``data``: its chunks' keys and values, interleaved, in chunk order; emptied once they are runs.
    """
    comm = comms.local(plan.group.key)
    if comm.rank != rank:
        raise comms.CommError(f"rank {rank}'s task of sort {plan.token} ran on the worker of rank {comm.rank}")
    with comm.turn(plan.token):
        return _sort(plan, comm, rank, data)


def _sort(plan: Plan, comm: comms.Collectives, rank: int, data: list) -> Pair:
    started, clock = time.time(), [time.perf_counter()]

    def lap() -> float:
        clock.append(time.perf_counter())
        return clock[-1] - clock[-2]

    nranks = len(plan.owned)
    table = plan.table()
    runs_of = [plan.runs_of(r) for r in range(nranks)]
    lengths = [plan.length(runs_of[r][i]) for _, r, i in table]
    index = {(r, i): k for k, (_, r, i) in enumerate(table)}  # run i of rank r is run k of the table
    okey = order.order_dtype(plan.key_dtype, plan.scheme)

    # Runs, the receive buffer (its size is this rank's share of the output) and samples; a rank that
    # failed says so in the samples' all-gather, and every rank stops there.
    inner = plan.split_edges()[1:-1]
    g = corank.sample_stride(int(plan.edges[-1]), len(table), len(inner))
    # Presorted runs also send their last key: the joins between runs of one input are checked here.
    tail = int(plan.presorted is not None)
    counts = [[-(-plan.length(run) // g) + (tail if plan.length(run) else 0) for run in runs_of[r]]
              for r in range(nranks)]
    failure, runs, mine = None, [], None
    try:
        runs = _form_runs(plan, rank, runs_of[rank], data)
        received = _receive(plan, plan.edges[rank + 1] - plan.edges[rank], okey)
        mine = [corank.samples(keys, g) for keys, _ in runs]  # a copy down: the runs' kernels have run
        if tail:
            mine = [np.concatenate((s, to_numpy(keys[-1:]).astype(okey))) for s, (keys, _) in zip(mine, runs)]
        mine = _bytes(mine, okey)
    except Exception as exc:  # the others must not wait for a rank that failed
        failure = exc
    seconds = {"runs": lap()}

    # The splitters: every rank computes the same split vectors, from samples and windows.
    gathered = comm.all_gather(mine, [sum(c) * okey.itemsize for c in counts], failure)
    samples = _by_run(gathered, counts, okey, index, len(table))
    if tail:
        lasts = [s[-1:] for s in samples]
        samples = [s[:-1] for s in samples]
        plan.presorted.check_joins([label for label, _, _ in table], samples, lasts)
    plan_w = corank.plan_windows(samples, lengths, inner, g)
    widths = plan_w[1] - plan_w[0]
    counts = [[int(widths[:, index[r, i]].sum()) for i in range(len(runs_of[r]))] for r in range(nranks)]
    failure, mine = None, None
    try:
        mine = _bytes([corank.window_keys(keys, plan_w, index[rank, i]) for i, (keys, _) in enumerate(runs)], okey)
    except Exception as exc:
        failure = exc
    windows = _by_run(comm.all_gather(mine, [sum(c) * okey.itemsize for c in counts], failure), counts, okey,
                      index, len(table))
    splits = corank.split_vectors(lengths, inner, plan_w, windows)  # row j: the split of split_edges()[j]
    seconds["splitters"] = lap()
    if plan.rounds > 1:
        merged = _in_rounds(plan, comm, rank, runs, splits, index, runs_of, received, okey, seconds)
        exchange.record_phases(started, seconds)
        return merged

    # The exchange: rank p gets slices [splits[p], splits[p + 1]) of every run, into one buffer in run order.
    buffers = _cut_buffer(received, splits[rank + 1] - splits[rank])
    sends, recvs, local = _slices(_parts_of(runs, splits, index, rank), buffers, index, runs_of, rank)
    comm.exchange(sends, recvs, local)
    seconds["exchange"] = lap()
    del runs, sends, recvs, local
    pieces = [_piece(buffers, k) for k in range(len(table))]
    merged = tasks.merge_pieces(plan.backend, plan.key_dtype, plan.descending, plan.scheme, pieces,
                                 scratch=buffers[:2])  # the buffer is the pieces end to end: merged in place
    synchronize(merged[0])  # the task ends when its block is there, and its clock with it
    seconds["merges"] = lap()
    if plan.upload:
        merged = get_backend(plan.backend).download(merged)
        seconds["download"] = lap()
    exchange.record_phases(started, seconds)
    return merged


def _piece(buffers: tuple[Any, Any, list[int], np.ndarray], k: int) -> Pair:
    """Run ``k``'s piece of this rank's receive buffer (:func:`_cut_buffer`)."""
    keys, values, offsets, sizes = buffers
    a, b = offsets[k], offsets[k] + int(sizes[k])
    return keys[a:b], None if values is None else values[a:b]


def _slices(part: Callable[[int, int], list], buffers: tuple, index: dict, runs_of: list, rank: int
            ) -> tuple[list[list[Any]], list[list[Any]], list[tuple[Any, Any]]]:
    """What this rank sends every other rank, where it receives theirs, and its own slices' ``(into, from)``.

    ``part(p, i)``: the arrays (keys, then values) of this rank's run ``i``
    that rank ``p`` merges.  Both sides list a rank's runs in run order,
    keys then values, so that sends and receives pair up one for one.
    """
    sends, recvs, local = [], [], []
    for p in range(len(runs_of)):
        out, into = [], []
        for i in range(len(runs_of[rank])):
            if p == rank:
                local += zip(_piece(buffers, index[rank, i]), part(p, i))
            else:
                out += part(p, i)
        if p != rank:
            for i in range(len(runs_of[p])):
                into += [x for x in _piece(buffers, index[p, i]) if x is not None]
        sends.append(out)
        recvs.append(into)
    return sends, recvs, local


def _parts_of(runs: list[Pair], splits: np.ndarray, index: dict, rank: int) -> Callable[[int, int], list]:
    """:func:`_slices`' ``part`` for runs in the memory they are exchanged from: rank ``p`` merges rows ``p, p + 1``."""
    return lambda p, i: _part(runs[i], splits[p:p + 2, index[rank, i]])


def _part(run: Pair, bounds: Sequence[int]) -> list[Any]:
    """Slice ``[bounds[0], bounds[1])`` of a run's keys, and of its values where it has them."""
    a, b = int(bounds[0]), int(bounds[1])
    keys, values = run
    return [keys[a:b]] + ([] if values is None else [values[a:b]])


def _in_rounds(plan: Plan, comm: comms.Collectives, rank: int, runs: list[Pair], splits: np.ndarray, index: dict,
               runs_of: list, output: Pair, okey: np.dtype, seconds: dict[str, float]) -> Pair:
    """Rank ``rank``'s block of host runs' keys, merged into ``output`` through the GPUs, a round at a time.

    A round is a range of pieces of every rank's block (:meth:`Plan.split_edges`,
    :func:`_group_pieces`): every rank takes up the slices of its runs that
    fall in it, all in one upload, and swaps them as the one-round sort
    does; each rank merges its part in its GPU's memory and brings it down
    into its place in ``output``.  The GPU holds one round's sends, receive
    buffer and merge, out of the backend's budget.  The rounds' seconds go
    into ``seconds``: uploads and swaps as ``exchange``, merges and
    downloads as ``merges``.
    """
    backend, pieces, nranks = get_backend(plan.backend), plan.pieces(), len(runs_of)
    xp = module(spec_of(plan.backend).device)
    none = np.empty(0, np.uint8)
    owner = np.array([r for _, r, _ in plan.table()], np.int64)  # the rank that holds each run
    element = okey.itemsize + (0 if plan.value_dtype is None else plan.value_dtype.itemsize)
    at, failure, clock = 0, None, time.perf_counter()
    seconds.update(exchange=0.0, merges=0.0)

    def lap(phase: str) -> None:
        nonlocal clock
        seconds[phase] += time.perf_counter() - clock
        clock = time.perf_counter()

    for a, b in _group_pieces(splits, owner, nranks, pieces, plan.round_keys()):
        rows = [(p * pieces + a, p * pieces + b) for p in range(nranks)]
        sizes = np.array([splits[rows[rank][1], k] - splits[rows[rank][0], k] for k in range(len(index))], np.int64)
        n = int(sizes.sum())
        held = contextlib.ExitStack()  # the round's share of the GPU budget, from its uploads to its merge
        if failure is None:  # the round's uploads and buffers; where they fail, every rank stops before the swap
            try:
                wanted = [_part(runs[i], splits[rows[p], index[rank, i]]) for p in range(nranks)
                          for i in range(len(runs))]
                ends = np.cumsum([0] + [len(w[0]) for w in wanted]).tolist()
                held.enter_context(backend.budgeted((ends[-1] + ROUND_ARRAYS * n) * element))
                up = [_upload(backend, [w[f] for w in wanted]) for f in range(len(wanted[0]))] if wanted else []
                buffers = _cut_buffer((xp.empty(n, okey),
                                       None if plan.value_dtype is None else xp.empty(n, plan.value_dtype)), sizes)
                sends, recvs, local = _slices(_uploaded(up, ends, len(runs)), buffers, index, runs_of, rank)
            except Exception as exc:
                failure = exc
        with held:
            comm.all_gather(none, [0] * nranks, failure)  # raises on every rank where any failed (here, or the last merge)
            comm.exchange(sends, recvs, local)
            del sends, recvs, local, up  # the round's uploads go before its merge takes their room
            lap("exchange")
            try:
                parts = [_piece(buffers, k) for k in range(len(index))]
                merged = tasks.merge_pieces(plan.backend, plan.key_dtype, plan.descending, plan.scheme, parts,
                                            scratch=buffers[:2])
                del parts, buffers
                backend.download(merged, tuple(None if x is None else x[at:at + n] for x in output))
                del merged  # before the next round's uploads
            except Exception as exc:
                failure = exc
        at += n
        lap("merges")
    comm.all_gather(none, [0] * nranks, failure)
    return output


def _group_pieces(splits: np.ndarray, owner: np.ndarray, nranks: int, pieces: int, cap: int) -> list[tuple[int, int]]:
    """The rounds: ranges ``[a, b)`` of consecutive pieces in which no rank sends or receives more than ``cap`` keys.

    Every rank computes the same rounds from the same split vectors.  A
    piece alone may pass ``cap`` (keys that all lie in one piece): it is a
    round of its own.

    Examples
    --------
    >>> s = np.array([[0, 0], [2, 2], [4, 4], [6, 6], [8, 8]])  # two runs (of ranks 0 and 1), 2 ranks x 2 pieces
    >>> _group_pieces(s, np.array([0, 1]), 2, 2, 8), _group_pieces(s, np.array([0, 1]), 2, 2, 4)
    ([(0, 2)], [(0, 1), (1, 2)])
    """
    take = np.diff(splits, axis=0).reshape(nranks, pieces, -1)  # [p, f, k]: run k's keys in piece f of p's block
    received = take.sum(axis=2)  # [p, f]
    sent = np.stack([take[:, :, owner == q].sum(axis=(0, 2)) for q in range(nranks)])  # [q, f]
    rounds, start = [], 0
    while start < pieces:
        stop = start + 1
        while stop < pieces and max(received[:, start:stop + 1].sum(axis=1).max(),
                                    sent[:, start:stop + 1].sum(axis=1).max()) <= cap:
            stop += 1
        rounds.append((start, stop))
        start = stop
    return rounds


def _uploaded(up: list, ends: list[int], nruns: int) -> Callable[[int, int], list]:
    """:func:`_slices`' ``part`` for a round's uploads ``up`` (keys, values): rank ``p``'s slice of run ``i``."""
    return lambda p, i: [field[ends[p * nruns + i]:ends[p * nruns + i + 1]] for field in up]


def _upload(backend: Any, parts: list[np.ndarray]) -> Any:
    """Host ``parts`` end to end in ``backend``'s memory (one upload), as contiguous arrays of one dtype."""
    return backend.upload([np.ascontiguousarray(p) for p in parts])


def _form_runs(plan: Plan, rank: int, runs: list[list[int]], data: list) -> list[Pair]:
    """This rank's runs, sorted: ``data`` holds its chunks' keys and values, interleaved, in chunk order.

    ``data`` is emptied once they are runs, or have failed to become runs:
    Dask may have let go of the inputs, and the sort must not hold them.
    """
    at = {k: j for j, k in enumerate(plan.owned[rank])}
    offsets = np.concatenate(([0], np.cumsum([d[1] for d in plan.declared]))).tolist()
    try:
        if plan.presorted is not None:
            return [plan.presorted(run, [x for k in run for x in data[2 * at[k]:2 * at[k] + 2]]) for run in runs]
        return [tasks.sort_chunks(plan.backend, plan.descending, plan.scheme,
                                   offsets[run[0]] if plan.positions else None, [plan.declared[k] for k in run],
                                   *[x for k in run for x in data[2 * at[k]:2 * at[k] + 2]], upload=plan.upload)
                for run in runs]
    finally:
        data.clear()


def _receive(plan: Plan, n: int, okey: np.dtype) -> Pair:
    """This rank's receive buffer for ``n`` keys (and values; ``None``: keys only), where the ranks keep their data.

    With rounds, the block itself in host memory, keys decoded: it is merged into a sub-block at a time.
    """
    if plan.rounds > 1:
        return np.empty(n, plan.key_dtype), None if plan.value_dtype is None else np.empty(n, plan.value_dtype)
    xp = module(plan.on_gpu)
    return xp.empty(n, okey), None if plan.value_dtype is None else xp.empty(n, plan.value_dtype)


def _cut_buffer(received: Pair, sizes: np.ndarray) -> tuple[Any, Any, list[int], np.ndarray]:
    """The receive buffer with each run's offset and size in it (``sizes[k]``: run ``k``'s, in run order)."""
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64).tolist()
    return received[0], received[1], offsets, sizes


def _bytes(arrays: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Host arrays end to end, as bytes."""
    if not arrays:
        return np.empty(0, np.uint8)
    return np.ascontiguousarray(np.concatenate([np.asarray(a, dtype) for a in arrays])).view(np.uint8)


def _by_run(gathered: Sequence[np.ndarray], counts: Sequence[Sequence[int]], dtype: np.dtype, index: dict,
            nruns: int) -> list[np.ndarray]:
    """Every rank's bytes cut into its runs' arrays (``counts[r]`` elements each), in run order."""
    out: list[np.ndarray] = [np.empty(0, dtype)] * nruns
    for r, (raw, sizes) in enumerate(zip(gathered, counts)):
        flat = raw.view(dtype)
        starts = np.concatenate(([0], np.cumsum(sizes))).tolist()
        for i in range(len(sizes)):
            out[index[r, i]] = flat[starts[i]:starts[i + 1]]
    return out
