"""The sort across workers: each sorts what it holds, exact splitters over the workers' runs, one swap, one merge.

On a cluster of several workers the critical path of a sort is: every worker
sorts the chunks it holds, the workers agree on exact split vectors over
their runs, each sends every other exactly the slices it merges, and each
merges what it received.  Anything more -- a chunk moved before its run, a
scheduler round trip per phase -- is overhead.  So that is all this does, on
distributed's P2P shuffle machinery (the one ``dask.dataframe`` shuffles and
``dask.array`` rechunks use), with a spec and a run of our own:

* one ``transfer-`` task per input chunk (tiny chunks batched) runs where the
  chunk is and hands it to the worker's P2P run (:class:`SortRun`); nothing
  moves, unless that worker merges no output, and then it goes to one that
  does before the task ends;
* P2P's barrier task tells every worker that all inputs are in, and each
  worker that owns output (an *owner*) starts its sort (:meth:`SortRun.inputs_done`)
  and lets the barrier end, so that the scheduler hands out the output tasks
  while the owners work:

  1. its chunks become sorted runs, on its backend: one run of all of them
     where ties cannot be told apart (:func:`one_run_per_worker`), else one
     run per range of consecutive chunks, so that run order is input order;
  2. every owner sends every other the samples of its runs (every ``g``-th
     key), each works out the same windows (:func:`gpusort.keys.corank.plan_windows`),
     every owner sends every other its window keys, and each works out the
     same exact split vectors (:func:`gpusort.keys.corank.split_vectors`) at the
     edges of every owner's output ranks;
  3. every owner sends every other, in one message, the slices of its runs
     that the other merges -- CuPy slices GPU to GPU over UCX, host slices as
     frames, never pickled whole;
  4. each owner merges its slices, in run order (ties keep the strict order
     ``(key, run, position)``), into one block of its output ranks;

* one task per output chunk, placed by P2P on its owner, waits for the
  owner's merge and returns a view of its merged ranks.

Under a memory limit a worker's inputs, runs and slices are arrays Dask
neither counts nor spills.  Once those of a worker pass a share of its limit
(:mod:`gpusort.memory.spill`), it keeps them in files: it forms its runs from
parts that hold at most half the share, each sorted and written in turn
(the same kind of runs as otherwise, so every owner plans alike), the
slices it receives and the blocks it merges go to files too, and each
phase lets go of the pages it read.  Once any owner spills (the samples
say so), every owner merges one output partition at a time.  Output tasks
take each block as soon as it is merged.

The graph has ``O(P + J)`` tasks whatever the number of workers ``W``; the
workers exchange ``3·W·(W-1)`` messages, two rounds of samples and window
keys (a few KiB to MiB) and one of slices (the data).  If a worker dies,
P2P restarts the whole exchange with new inputs recomputed from their
lineage, so the result stays exact.

This module uses ``distributed.shuffle``'s extension points (``ShuffleSpec``,
``ShuffleRun``, the barrier), which are not public API: gpusort pins
``distributed`` to one release line for that reason.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import threading
import time
import weakref
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from dask._task_spec import Task, TaskRef
from distributed import get_worker
from distributed.worker import thread_state
from distributed.shuffle._core import (
    P2PBarrierTask,
    ShuffleId,
    ShuffleRun,
    ShuffleSpec,
    barrier_key,
    get_worker_plugin,
    handle_transfer_errors,
    handle_unpack_errors,
    p2p_barrier,
)
from distributed.utils import sync
from distributed.utils_comm import retry

from gpusort.arrays import concatenate, in_order, synchronize, to_numpy
from gpusort.backends import get_backend
from gpusort.engine import tasks
from gpusort.keys import corank, order
from gpusort.memory import spill

#: Below this many bytes a message travels as one pickled blob rather than as
#: frames (distributed's own threshold for P2P shards).
_SMALL_MESSAGE_BYTES = 65536

_lock = threading.Lock()
_sent: dict[str, int] = {"bytes": 0, "splitter_bytes": 0, "messages": 0}
#: (wall-clock start, seconds per phase) of this process's recent exchanges.
_timed: deque[tuple[float, dict[str, float]]] = deque(maxlen=1000)


def sent() -> dict[str, int]:
    """What this process has sent to other workers in exchanges so far.

    ``bytes`` counts the slices of runs (the data), ``splitter_bytes`` the
    samples and window keys, ``messages`` every message.  Run it on the
    workers (``client.run``): P2P's messages bypass Dask's own transfer log,
    so this is how benchmarks count what an exchange moved.
    """
    with _lock:
        return dict(_sent)


def recorded_phases(since: float = 0.0) -> dict[str, float]:
    """Seconds this process's exchanges that started at ``since`` (``time.time()``) or later spent in each phase.

    The phases (those of :data:`gpusort.engine.graph.PHASES`) run on each
    owner once P2P's barrier has started them, not as tasks of their own, so
    the task stream cannot tell them apart: :func:`gpusort.runtime.task_costs`
    reads them here, on every worker.
    """
    out: dict[str, float] = {}
    with _lock:
        for start, seconds in _timed:
            if start >= since:
                for phase, s in seconds.items():
                    out[phase] = out.get(phase, 0.0) + s
    return out


def record_phases(started: float, seconds: dict[str, float]) -> None:
    """Record one sort's seconds per phase on this worker, for :func:`recorded_phases`.

    The sort across workers on collectives (:mod:`gpusort.engine.collective`) runs
    its phases inside one task a worker too, and times them here.
    """
    with _lock:
        _timed.append((started, seconds))


def _count(**amounts: int) -> None:
    with _lock:
        for k, v in amounts.items():
            _sent[k] += v


def one_run_per_worker(stable: bool) -> bool:
    """Whether a worker may sort all its chunks as one run, whichever chunks it holds.

    A run of chunks that are not consecutive puts its ties in an order the
    input does not have, which a sort can only return if its ties cannot be
    told apart: keys only (equal keys are equal bits), sorted in ``"exact"``
    order.  Floats have keys that are equal but differ in bits (``-0.0``
    and ``0.0``, NaN payloads): the workers check their runs for them
    (:func:`gpusort.keys.order.tie_keys`) and sort again by ranges of chunks
    where any two differ.  Stable sorts (values, positions) always sort by
    ranges of consecutive chunks: one range, one run, where a worker's
    chunks are consecutive.
    """
    return not stable


@dataclass(frozen=True)
class SortSpec(ShuffleSpec[int]):
    """What the scheduler plugin needs to start the exchange: the output chunks and how to sort."""

    edges: tuple[int, ...]  # the boundary ranks of the output partitions (blocks of output chunks)
    nparts: int  # input parts, one per transfer task
    backend: Any
    key_dtype: np.dtype
    descending: bool
    scheme: str  # the order-key scheme of stable runs (ranges of consecutive chunks)
    merge_all: bool  # :func:`one_run_per_worker`

    @property
    def output_partitions(self):
        yield from range(len(self.edges) - 1)

    def pick_worker(self, partition: int, workers) -> str:
        # Contiguous ranges of output chunks per worker: each owner merges its
        # consecutive ranks (one block, or a partition at a time where a worker
        # spills), and every run sends it one slice of each.
        return workers[partition * len(workers) // (len(self.edges) - 1)]

    def create_run_on_worker(self, run_id, span_id, worker_for, plugin) -> ShuffleRun:
        worker = plugin.worker
        return SortRun(
            spec=self,
            worker_for=worker_for,
            id=self.id,
            run_id=run_id,
            span_id=span_id,
            local_address=worker.address,
            directory=os.path.join(worker.local_directory, f"gpusort-exchange-{self.id}-{run_id}"),
            memory_limit=worker.memory_manager.memory_limit,
            executor=plugin._executor,
            rpc=worker.rpc,
            digest_metric=worker.digest_metric,
            scheduler=worker.scheduler,
            memory_limiter_disk=plugin.memory_limiter_disk,
            memory_limiter_comms=plugin.memory_limiter_comms,
            disk=False,
            loop=worker.loop,
        )


def contiguous_ranges(worker_for: dict[int, str]) -> dict[str, list[tuple[int, int]]]:
    """Each worker's output chunks as maximal ranges ``[a, b)`` of consecutive indices.

    Examples
    --------
    >>> contiguous_ranges({0: "x", 1: "x", 2: "y", 3: "x"})
    {'x': [(0, 2), (3, 4)], 'y': [(2, 3)]}
    """
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for j in sorted(worker_for):
        owned = ranges[worker_for[j]]
        if owned and owned[-1][1] == j:
            owned[-1] = (owned[-1][0], j + 1)
        else:
            owned.append((j, j + 1))
    return dict(ranges)


def consecutive(ids: list[int]) -> list[list[int]]:
    """Sorted ids cut into ranges of consecutive ids.

    Examples
    --------
    >>> consecutive([0, 1, 3, 4, 5, 9])
    [[0, 1], [3, 4, 5], [9]]
    """
    groups: list[list[int]] = []
    for k in ids:
        if groups and groups[-1][-1] == k - 1:
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


class Input(NamedTuple):
    """The header of an input part sent to its owner before the barrier: part ``part``, keys only or with values."""

    part: int
    keys_only: bool


class Described(NamedTuple):
    """What round 1 says of a sender's runs, whose samples are the message's arrays (one a run)."""

    labels: list[int]
    lengths: list[int]
    ties: set[int]  # order keys of its float ties (zeros, NaNs)
    lasts: list  # each run's last key (None: rows of composite keys)
    spilling: bool  # it keeps its arrays in files


class Windows(NamedTuple):
    """What round 2 says of a sender's window keys, the message's arrays (one a run)."""

    labels: list[int]


class Slabs(NamedTuple):
    """What the swap says of the slices of runs it sends: ``(block start, run index)`` each, in order."""

    where: list[tuple[int, int]]
    keys_only: bool  # one array a slice (keys), else two (keys, values)


class Header(NamedTuple):
    """The header of a message between owners: its round, the sort's attempt, its sender, and what it says.

    ``kind`` is ``"samples"`` (round 1, :class:`Described`), ``"windows"``
    (round 2, :class:`Windows`) or ``"slabs"`` (the swap, :class:`Slabs`);
    a retried sort starts again at a new ``attempt``.
    """

    kind: str
    attempt: int
    sender: int
    about: Any

    @property
    def key(self) -> tuple[str, int, int]:
        """What tells this message from every other of the run's: a retried send arrives twice."""
        return self.kind, self.attempt, self.sender


@dataclass
class _Run:
    """One sorted run of this worker: ``label`` (its first input part) orders it among all runs."""

    label: int
    keys: Any
    values: Any


class SortRun(ShuffleRun[int, Any]):
    """One worker's part of one sort: hold its chunks, sort them, agree on splits, swap slices, merge."""

    def __init__(self, spec: SortSpec, worker_for: dict[int, str], memory_limit: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.directory = kwargs["directory"]  # P2P's own buffer leaves it to a run that spills (disk=False)
        self.spec = spec
        self.worker_for = worker_for
        self.owners = sorted(set(worker_for.values()))
        edges = spec.edges
        # Each owner's output as ranges of ranks [start, stop), with their chunks.
        self.ranges = {w: [(edges[a], edges[b], a, b) for a, b in owned]
                       for w, owned in contiguous_ranges(worker_for).items()}
        cuts = sorted({r for owned in self.ranges.values() for s, e, _, _ in owned for r in (s, e)}
                      | {0, edges[-1]})
        self.rows = {r: i for i, r in enumerate(cuts)}  # split vector row of every cut rank
        self._fine = False  # blocks of one output partition each (:meth:`_blocks_of`)
        self._inputs: dict[int, tuple[Any, Any]] = {}
        # Past this many bytes of host arrays held, they go to files (:mod:`gpusort.memory.spill`).
        self._spill_at = int(memory_limit * spill.share_setting()) if memory_limit else None
        self._held = 0
        self._maps: weakref.WeakSet = weakref.WeakSet()  # the maps of its files, whose read pages each phase lets go
        self._messages: dict[tuple, tuple] = {}
        self._arrived = asyncio.Event()
        self._blocks: dict[int, tuple[Any, Any]] = {}  # start rank -> merged (keys, values)
        self._unread: dict[int, int] = {}
        self._lock = threading.Lock()
        self._sorting: asyncio.Future | None = None  # the sort, which the barrier starts and no task awaits
        self._finished = threading.Event()  # the sort merged its blocks, failed, or the run closed
        self._merged = threading.Condition(self._lock)  # a block is merged, or the sort finished
        self._failure: BaseException | None = None

    # --- phase 0: the inputs ------------------------------------------------------------

    def add_partition(self, data: tuple[Any, Any], partition_id: int) -> int:
        self.raise_if_closed()
        if self.transferred:
            raise RuntimeError(f"Cannot add more partitions to {self}")
        if self.local_address in self.ranges:
            self._keep(partition_id, data)
        else:
            # This worker merges nothing: its chunks go to an owner now, so that
            # they are there when the barrier starts the sort.
            owner = self.owners[partition_id % len(self.owners)]
            keys, values = data
            arrays = (keys,) if values is None else (keys, values)
            sync(self._loop, self._deliver, owner, [(arrays, Input(partition_id, values is None))])
        return self.run_id

    def _shard_partition(self, data: Any, partition_id: int) -> dict:  # pragma: no cover - add_partition stores
        raise NotImplementedError("the sort's inputs are kept where they are")

    async def _receive(self, data: list[tuple]) -> None:
        self.raise_if_closed()
        for arrays, header in data:
            if isinstance(header, Input):
                await self.offload(self._keep, header.part, (arrays[0], None if header.keys_only else arrays[1]))
                continue
            if header.kind == "slabs" and self.spilling:  # each message to a file as it comes
                arrays = await self.offload(self._to_files, list(arrays))
            self._messages.setdefault(header.key, (arrays, header))  # a retried send arrives twice
            self._arrived.set()

    def _keep(self, k: int, data: tuple[Any, Any]) -> None:
        """Input part ``k``, held until its run is formed: in a file once this worker holds its share."""
        if self._spill_at is not None:
            with self._lock:
                self._held += sum(int(a.nbytes) for a in data if type(a) is np.ndarray)
                spilling = self._held > self._spill_at
            if spilling:
                data = tuple(self._to_files(data))
        with self._lock:
            self._inputs[k] = data

    def _to_files(self, arrays: list) -> list:
        """``arrays`` in one file of this run's (:func:`gpusort.memory.spill.to_files`)."""
        self.raise_if_closed()  # a closed run has taken its folder away
        arrays = spill.to_files(arrays, self.directory)
        with self._lock:
            self._maps.update(m for m in map(spill.mapping, arrays) if m is not None)
        return arrays

    def _let_go(self) -> None:
        """The pages of this run's files that the last phase read: out of the worker's memory again."""
        if self.spilling:
            with self._lock:
                maps = list(self._maps)
            spill.drop_pages(maps)

    @property
    def spilling(self) -> bool:
        """Whether this worker keeps its host arrays in files: they passed its share of the memory limit."""
        return self._spill_at is not None and self._held > self._spill_at

    # --- the sort, on every owner at once ------------------------------------------------

    async def inputs_done(self) -> None:
        """P2P's barrier on this worker: every input is in, so start the sort, and return.

        The barrier task ends once every owner has started, and the scheduler
        hands out the output tasks while the owners sort, swap and merge; each
        output task waits for its block (:meth:`_get_output_partition`).  So
        Dask's cost per output task is paid under the sort rather than after
        it.  A failure of the sort reaches the output tasks, and a run closed
        by P2P (a worker lost: the exchange restarts) stops it.
        """
        await super().inputs_done()
        if self.local_address not in self.ranges:
            return
        self._sorting = asyncio.ensure_future(self._sort())
        self._sorting.add_done_callback(self._sort_ended)

    def _sort_ended(self, sorting: asyncio.Future) -> None:
        if not sorting.cancelled() and sorting.exception() is not None:
            self._failure = sorting.exception()
            self.fail(self._failure)
        self._ended()

    def _ended(self) -> None:
        with self._merged:
            self._finished.set()
            self._merged.notify_all()

    async def close(self) -> None:
        if self._sorting is not None:
            self._sorting.cancel()
        await super().close()
        self._ended()
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _sort(self) -> None:
        """This owner's part of the sort: runs, exact splitters, the swap, the merge of its blocks."""
        spec = self.spec
        me = self.owners.index(self.local_address)
        merge_all, scheme, attempt = spec.merge_all, ("exact" if spec.merge_all else spec.scheme), 0
        started, formed = time.time(), 0.0
        while True:
            t0 = time.perf_counter()
            runs = await self.offload(self._form_runs, merge_all, scheme)
            t1 = time.perf_counter()
            g = corank.sample_stride(spec.edges[-1], len(self.owners) if merge_all else spec.nparts,
                                     len(self.rows) - 2)
            samples, ties, lasts = await self.offload(self._samples, runs, g, merge_all)
            self._let_go()
            described = await self._all_to_all(("samples", attempt), samples,
                                               Described([r.label for r in runs], [len(r.keys) for r in runs], ties,
                                                         lasts, self.spilling), me)
            if any(header.about.spilling for _, header in described) and not self._fine:
                # A worker keeps its arrays in files: every owner merges an output partition at a time.
                self._fine = True
                self.rows = {r: i for i, r in enumerate(sorted(set(spec.edges)))}
            everyone = _every_run(described)
            if not merge_all or not order.ties_differ(set().union(*(h.about.ties for _, h in described)),
                                                      spec.key_dtype, spec.descending):
                break
            # Zeros or NaNs of different bits: runs by ranges of consecutive chunks keep their input order.
            formed += t1 - t0
            merge_all, scheme, attempt = False, spec.scheme, attempt + 1
        with self._lock:
            self._inputs.clear()
        labels, lengths = [e[0] for e in everyone], [e[1] for e in everyone]
        index = {label: i for i, label in enumerate(labels)}
        cuts = np.array(sorted(self.rows), dtype=np.int64)
        if _follow(everyone):  # sorted input: each run's keys come after the last run's
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            splits = np.clip(cuts[:, None] - starts[None, :], 0, np.array(lengths)[None, :])
        else:
            inner = cuts[1:-1]
            plan = await self.offload(corank.plan_windows, [e[2] for e in everyone], lengths, inner, g)
            windows = await self.offload(lambda held: [corank.window_keys(r.keys, plan, index[r.label]) for r in held],
                                         runs)
            self._let_go()
            received = await self._all_to_all(("windows", attempt), windows, Windows([r.label for r in runs]), me)
            by_label = {label: w for arrays, header in received for label, w in zip(header.about.labels, arrays)}
            splits = await self.offload(corank.split_vectors, lengths, inner, plan,
                                        [by_label[lb] for lb in labels])
        t2 = time.perf_counter()
        pieces = await self._swap(runs, splits, index, attempt, me)
        del runs
        self._let_go()
        t3 = time.perf_counter()
        await self.offload(self._merge, pieces, scheme)
        t4 = time.perf_counter()
        record_phases(started, {"runs": formed + t1 - t0, "splitters": t2 - t1, "exchange": t3 - t2,
                                "merges": t4 - t3})

    def _form_runs(self, merge_all: bool, scheme: str) -> list[_Run]:
        """This worker's inputs as sorted runs: as few as fit, or one per range of consecutive parts."""
        with self._lock:
            inputs = dict(self._inputs)
        ids = sorted(inputs)
        if not ids:
            return []
        backend = get_backend(self.spec.backend)
        runs = self._presorted(ids, inputs, scheme, backend) if merge_all else None
        if runs is None:
            # Spilling, a run at a time is in memory: parts that fit half the share, sorted, then to a file.
            most = self._spill_at // 2 if self.spilling else None
            if merge_all:
                limit = backend.run_limit(*inputs[ids[0]])
                groups = _fitting(ids, inputs, limit if most is None else min(limit, most))
            else:
                groups = [g for c in consecutive(ids) for g in ([c] if most is None else _fitting(c, inputs, most))]
            runs = []
            for group in groups:
                formed = self._sorted(group, inputs, scheme, cut=merge_all)
                if most is not None:
                    formed = [_Run(r.label, *self._to_files([r.keys, r.values])) for r in formed]
                    if not merge_all:  # no retry will form runs again: the parts can go
                        with self._lock:
                            for k in group:
                                del self._inputs[k], inputs[k]
                runs += formed
        for run in runs:
            synchronize(run.keys)  # the slices go out through comms that do not wait on the GPU
        return runs

    def _presorted(self, ids: list[int], inputs: dict, scheme: str, backend: Any) -> list[_Run] | None:
        """Every input part as a run of its own where all are sorted already, else ``None``.

        Sorted parts need no sort, and on sorted input no merge either (their
        keys follow one another).  Each part is encoded once; the first part
        that is not sorted (a sample tells, on random input) ends the check.
        """
        runs = []
        for k in ids:
            okeys = order.encode(inputs[k][0], self.spec.descending, scheme)
            if okeys.ndim != 1 or not backend.is_sorted(okeys):
                return None
            runs.append(_Run(k, okeys, inputs[k][1]))
        return runs

    def _sorted(self, group: list[int], inputs: dict, scheme: str, cut: bool) -> list[_Run]:
        """One run of the parts ``group``, or, where ``cut`` and that does not fit, runs of its halves."""
        spec = self.spec
        keys = concatenate([inputs[k][0] for k in group], spec.key_dtype)
        values = None if inputs[group[0]][1] is None else concatenate([inputs[k][1] for k in group])
        try:
            okeys, ovalues = tasks.sort_pair(spec.backend, spec.descending, scheme, keys, values,
                                              overwrite=len(group) > 1)
        except MemoryError:
            if not cut or len(group) == 1:
                raise
            del keys, values
            half = len(group) // 2
            return self._sorted(group[:half], inputs, scheme, cut) + self._sorted(group[half:], inputs, scheme, cut)
        return [_Run(group[0], okeys, ovalues)]

    def _blocks_of(self, owner: str) -> list[tuple[int, int, int, int]]:
        """``owner``'s blocks of output ranks ``(start, stop, a, b)``: output partitions ``a`` to ``b``.

        One block a range of consecutive partitions, one merge each; where any
        worker spills, one block a partition, so that a merge holds one
        partition's slices and result at a time.
        """
        if not self._fine:
            return self.ranges[owner]
        edges = self.spec.edges
        return [(edges[i], edges[i + 1], i, i + 1) for _, _, a, b in self.ranges[owner] for i in range(a, b)]

    def _samples(self, runs: list[_Run], g: int, merge_all: bool) -> tuple[list, set[int], list]:
        """Round 1 of this worker: its runs' samples, the order keys of its float ties, each run's last key."""
        spec = self.spec
        ties: set[int] = set()
        if merge_all:
            search = get_backend(spec.backend).searchsorted
            for run in runs:
                ties |= order.tie_keys(run.keys, spec.key_dtype, spec.descending, search)
        lasts = [to_numpy(r.keys[-1:])[0] if r.keys.ndim == 1 and len(r.keys) else None for r in runs]
        return [corank.samples(r.keys, g) for r in runs], ties, lasts

    async def _swap(self, runs: list[_Run], splits: np.ndarray, index: dict[int, int], attempt: int,
                    me: int) -> dict[int, dict[int, tuple]]:
        """Every owner gets the slices of these runs it merges; returns the slices this worker merges.

        The result maps each of this worker's output blocks (by start rank)
        to its slices, by run index.
        """
        keys_only = not runs or runs[0].values is None

        def slices(owner: str) -> tuple[list, Slabs]:
            arrays, where = [], []
            for start, stop, _, _ in self._blocks_of(owner):
                a, b = splits[self.rows[start]], splits[self.rows[stop]]
                for run in runs:
                    k = index[run.label]
                    lo, hi = int(a[k]), int(b[k])
                    arrays += [run.keys[lo:hi]] if keys_only else [run.keys[lo:hi], run.values[lo:hi]]
                    where.append((start, k))
            return arrays, Slabs(where, keys_only)

        messages = [(w, slices(w)) for w in self.owners if w != self.local_address]
        own = slices(self.local_address)
        tag = ("slabs", attempt)
        await asyncio.gather(*(self._deliver(w, [(_framed(arrays), Header(*tag, me, slabs))])
                               for w, (arrays, slabs) in messages))
        received = [(own[0], Header(*tag, me, own[1]))] + await self._gather(tag, exclude=me)
        pieces: dict[int, dict[int, tuple]] = defaultdict(dict)
        for arrays, header in received:
            where, keys_only = header.about
            step = 1 if keys_only else 2
            for i, (start, k) in enumerate(where):
                pieces[start][k] = (arrays[step * i], None if keys_only else arrays[step * i + 1])
        return pieces

    def _merge(self, pieces: dict[int, dict[int, tuple]], scheme: str) -> None:
        spec = self.spec
        for start, stop, a, b in self._blocks_of(self.local_address):
            by_run = pieces.pop(start, {})  # each block's slices go as it is merged
            merged = tasks.merge_pieces(spec.backend, spec.key_dtype, spec.descending, scheme,
                                         [by_run[k] for k in sorted(by_run)])
            del by_run
            if self.spilling:  # the output tasks read it from its file
                merged = tuple(self._to_files(list(merged)))
            self._let_go()
            with self._merged:  # its output tasks may take it now
                self._blocks[start] = merged
                self._unread[start] = b - a
                self._merged.notify_all()

    # --- messages between owners ---------------------------------------------------------

    async def _all_to_all(self, tag: tuple[str, int], arrays: list, about: tuple, me: int) -> list[tuple]:
        """Send ``arrays``, and ``about`` them, to every other owner; every owner's ``(arrays, header)``, mine first.

        ``tag`` is the round and attempt; each :class:`Header` adds its sender.
        """
        header = Header(*tag, me, about)
        await asyncio.gather(*(self._deliver(w, [(_framed(arrays), header)])
                               for i, w in enumerate(self.owners) if i != me))
        return [(arrays, header)] + await self._gather(tag, exclude=me)

    async def _gather(self, tag: tuple, exclude: int) -> list[tuple]:
        """The messages of ``tag`` from every owner but ``exclude``, once all have arrived."""
        want = [Header(*tag, i, None).key for i in range(len(self.owners)) if i != exclude]
        while not all(w in self._messages for w in want):
            self.raise_if_closed()
            self._arrived.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (self._arrived, self._closed_event)]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        self.raise_if_closed()
        return [self._messages.pop(w) for w in want]

    async def _deliver(self, address: str, items: list[tuple]) -> None:
        """``items``, each ``(arrays, header)``, to worker ``address``: small ones pickled, large ones as frames."""
        arrays = [a for arrays, _ in items for a in arrays]
        nbytes = sum(int(a.nbytes) for a in arrays)
        small = nbytes < _SMALL_MESSAGE_BYTES and all(isinstance(a, np.ndarray) for a in arrays)
        payload = pickle.dumps(items, protocol=5) if small else items
        header = items[0][1]
        data = isinstance(header, Input) or header.kind == "slabs"  # the keys themselves, not splitters
        _count(**{"bytes" if data else "splitter_bytes": nbytes}, messages=1)
        await retry(lambda: self._send(address, payload), count=self.RETRY_COUNT,
                    delay_min=self.RETRY_DELAY_MIN, delay_max=self.RETRY_DELAY_MAX)

    # --- phase 4: the output -------------------------------------------------------------

    def get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> Any:
        # P2P's own makes two round trips to the worker's event loop per output
        # task, on a loop that is busy with every task's messages: one to move a
        # task that runs on the wrong worker (asked only where it does), one to
        # flush a disk buffer this run never writes.
        self.raise_if_closed()
        if self._get_assigned_worker(partition_id) != self.local_address:
            sync(self._loop, self._ensure_output_worker, partition_id, key)
        if not self.transferred:
            raise RuntimeError(f"{self}: an output task ran before the barrier")
        return self._get_output_partition(partition_id, key, **kwargs)

    def _get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> Any:
        edges = self.spec.edges
        with self._merged:  # until this chunk's block is merged, or the sort ends without it
            while True:
                # Blocks are laid out (_blocks_of) once the samples are in, before the first is merged.
                start = next((s for s, _, a, b in self._blocks_of(self.local_address) if a <= partition_id < b), None)
                if start is None:  # pragma: no cover - P2P places the task on the chunk's owner
                    raise RuntimeError(f"exchange {self.id}: output chunk {partition_id} is not owned here")
                if start in self._blocks or self._finished.is_set():
                    break
                self._merged.wait(0.1)
                self.raise_if_closed()
        self.raise_if_closed()
        if self._failure is not None:
            raise self._failure
        with self._lock:
            keys, values = self._blocks[start]
            self._unread[start] -= 1
            if not self._unread[start]:  # every chunk of this block is out: the block lives in them
                del self._blocks[start]
        i, j = edges[partition_id] - start, edges[partition_id + 1] - start
        return keys[i:j], None if values is None else values[i:j]

    def _get_assigned_worker(self, partition_id: int) -> str:
        return self.worker_for[partition_id]

    def read(self, path):  # pragma: no cover - P2P's disk buffer is not used
        raise NotImplementedError("the sort keeps its arrays in memory, or in files of its own (gpusort.memory.spill)")

    def deserialize(self, buffer: Any) -> Any:  # pragma: no cover - see read
        return buffer


def _every_run(described: list[tuple]) -> list[tuple]:
    """Every owner's runs ``(label, length, samples, last key)`` from round 1's messages, in label order.

    Each owner must number the runs alike, whatever order the messages came
    in; the sender breaks a tie of label and length.  Only these fields are
    compared: the samples are arrays, which have no truth value to order by.
    """
    keyed = [((label, length, header.sender), (label, length, sample, last)) for arrays, header in described
             for label, length, sample, last in zip(header.about.labels, header.about.lengths, arrays,
                                                    header.about.lasts)]
    return [run for _, run in sorted(keyed, key=lambda pair: pair[0])]


def _follow(runs: list[tuple]) -> bool:
    """Whether runs ``(label, length, samples, last key)`` in label order follow one another, key after key."""
    ends = [(samples[0], last) for _, length, samples, last in runs if length]
    if any(last is None for _, last in ends):  # rows of composite keys
        return False
    return all(in_order(last, first) for (_, last), (first, _) in zip(ends, ends[1:]))


def _fitting(ids: list[int], inputs: dict[int, tuple[Any, Any]], limit: int) -> list[list[int]]:
    """``ids`` in ranges of consecutive ids whose parts hold at most ``limit`` bytes (all of them where they do)."""
    sizes = [sum(int(a.nbytes) for a in inputs[k] if a is not None) for k in ids]
    groups: list[list[int]] = []
    total = 0
    for k, size in zip(ids, sizes):
        if groups and total + size <= limit:
            groups[-1].append(k)
            total += size
        else:
            groups.append([k])
            total = size
    return groups


def _framed(arrays: list) -> tuple:
    """A message's arrays as distributed serializes them frame by frame: it looks at the first leaf."""
    return tuple(arrays) or (np.empty(0, np.uint8),)


def _transfer(id: ShuffleId, k: int, offset: int | None, declared: list, *chunk_data: Any) -> int:
    try:
        get_worker()
    except ValueError:
        raise RuntimeError(
            "this gpusort result was built for a distributed cluster of several workers (its runs "
            "are exchanged between them), but it is being computed by another scheduler: compute "
            "it through that cluster's client, or build it under "
            "dask.config.set({'gpusort.exchange': 'local'})"
        ) from None
    pair = tasks.gathered(declared, offset, chunk_data)  # a chunk that lies stops here, by name
    with handle_transfer_errors(id):
        plugin = get_worker_plugin()
        run = _active_run(plugin, id)
        if run is None:  # this worker's first input: the plugin asks the scheduler for the run
            return plugin.add_partition(pair, partition_id=k, id=id)
        return run.add_partition(pair, k)


def _active_run(plugin: Any, id: ShuffleId, run_id: int | None = None) -> SortRun | None:
    """This worker's run of exchange ``id`` (of ``run_id``, if given) where it has one, else ``None``.

    Read without the round trip to the worker's event loop that the plugin's
    own lookups make, once a task, on a loop busy with every task's messages.
    A run that has failed is left to those lookups, which raise its error.
    """
    run = plugin.shuffle_runs._active_runs.get(id)
    if run is None or run_id not in (None, run.run_id) or run._exception is not None:
        return None
    return run


def _unpack(id: ShuffleId, j: int, run_id: int) -> Any:
    with handle_unpack_errors(id):
        plugin = get_worker_plugin()
        run = _active_run(plugin, id, run_id) or plugin.get_shuffle_run(id, run_id)
        return run.get_output_partition(j, thread_state.key)


def exchange_layer(parts: list[tuple[int | None, list, list]], token: str, spec_args: dict) -> tuple[dict, str]:
    """The exchange's tasks: a transfer per input part, the barrier, one task per output chunk.

    ``parts`` holds, per transfer task, the offset of its positions (argsort,
    else ``None``), what its chunks declare and the keys of its chunks
    (:func:`gpusort.engine.tasks.gathered`); ``spec_args`` the fields of
    :class:`SortSpec` but ``id``.  Returns the tasks and the name of the
    output tasks, ``(name, j)`` for output chunk ``j``.
    """
    id = ShuffleId(token)
    transfer, out = "transfer-" + token, "output-" + token
    dsk: dict = {}
    refs = []
    for k, (offset, declared, inputs) in enumerate(parts):
        args = [TaskRef(x) if x is not None else None for x in inputs]
        dsk[(transfer, k)] = t = Task((transfer, k), _transfer, id, k, offset, declared, *args)
        refs.append(t.ref())
    spec = SortSpec(id=id, disk=False, **spec_args)
    dsk[barrier_key(id)] = barrier = P2PBarrierTask(barrier_key(id), p2p_barrier, id, *refs, spec=spec)
    for j in range(len(spec.edges) - 1):
        dsk[(out, j)] = Task((out, j), _unpack, id, j, barrier.ref())
    return dsk, out
