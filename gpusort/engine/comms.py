"""Collectives between Dask's workers, whatever moves their bytes: the ranks' agreement, their turns, their placement.

The sort across GPU workers (:mod:`gpusort.engine.collective`) runs one task per
worker, and those tasks talk to each other through a :class:`Collectives`:
all-gather a few host bytes (the splitters' samples and windows), agreeing
on the way that every rank is still well, and swap the slices of the runs
with one grouped send/receive per pair of ranks.  A transport moves the bytes (NCCL between GPU
workers, :mod:`gpusort.engine.nccl`); this module holds what every transport
shares: the workers' communicators, the turn of a sort, the waits and their
aborts, and the scheduler's part (:class:`Placement`: pinned tasks, turns,
liveness).  Dask only places the tasks.

Life of a communicator:

* :func:`gpusort.engine.nccl.ensure`, on the client as a sort's graph is
  built: the communicators the scheduler knows to be well, or new ones
  (NCCL's, :mod:`gpusort.engine.nccl`, the transport); ``None`` where the
  cluster has none to make, and the caller keeps distributed's P2P exchange.
* :func:`local`, in a sort's task: this worker's communicator.
* A rank that waits longer than :data:`TIMEOUT` seconds, or a peer that
  leaves the cluster, aborts the communicator (``ncclCommAbort``) instead of
  hanging: the sort fails with a clear error, and the next
  :func:`gpusort.engine.nccl.ensure` makes new communicators.

Every communicator is one stream of collectives, matched call by call
across the ranks; two sorts that reach the workers in different orders
would pair one sort's call with the other's.  :meth:`Collectives.turn` opens a
sort's use of it with a rendezvous on the host, at the scheduler
(:class:`Turns`): once every rank's task of a sort has started there, the
sort gets the communicator's next ticket, and every worker runs its sorts
in ticket order.  No NCCL kernel waits for a rank whose task has not
started: a kernel that spins for a peer while that peer's input is still
being computed (perhaps on this very GPU, by a task that needs a device
synchronization) deadlocks the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
from dask._task_spec import Task
from distributed.diagnostics.plugin import SchedulerPlugin

#: Seconds a rank waits for its peers in one collective before it aborts the
#: communicator: within a minute, a lost worker is an error, never a hang.
TIMEOUT = 45.0
#: Seconds a rank's task waits at the rendezvous for every rank's task of its sort to start.
TURN_TIMEOUT = 3600.0
#: Seconds one call to the scheduler's rendezvous waits before the rank checks its peers are alive.
RENDEZVOUS_POLL = 2.0
#: Seconds between a waiting rank's checks that its peers are still in the cluster.
LIVENESS_SECONDS = 2.0


class CommError(RuntimeError):
    """A collective between workers failed: a peer failed, left, or did not answer in time."""


#: Errors of a rank's input that every rank raises alike (:meth:`Collectives.all_gather`).
_USER_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


@dataclass(frozen=True)
class Group:
    """The communicators of a cluster's workers: ``key`` names them, ``workers[r]`` holds rank ``r``.

    ``kind`` is their transport's (:attr:`Collectives.kind`): ``"nccl"`` moves CuPy arrays.
    """

    key: str
    workers: tuple[str, ...]
    kind: str = "nccl"


# --- on the workers -----------------------------------------------------------------------------

#: Each worker's communicator, by the worker's address: the workers of a
#: cluster of threads share this process and this table.
_registry: dict[str, "Collectives"] = {}
_registry_lock = threading.Lock()


def local(key: str) -> "Collectives":
    """This worker's communicator ``key``, or a :class:`CommError` that says why there is none."""
    from distributed import get_worker

    with _registry_lock:
        comm = _registry.get(get_worker().address)
    if comm is None or comm.key != key or comm.broken:
        _report_broken(key)  # so that the next sort's ensure() makes new communicators
    if comm is None or comm.key != key:
        raise CommError(
            f"this worker holds no communicator {key!r}: it joined the cluster after the sort was "
            "built, or restarted since; build the sort again (gpusort makes new communicators), or "
            "set dask config gpusort.exchange='p2p'"
        )
    if comm.broken:
        raise CommError(f"communicator {key!r} was aborted ({comm.broken}); build the sort again")
    return comm


def _report_broken(key: str) -> None:
    """Tell the scheduler (:class:`Placement`) that communicator ``key`` is no more; nothing outside a worker.

    Sent, not awaited: an abort may happen on the worker's event loop.
    """
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return

    async def send() -> None:
        with contextlib.suppress(Exception):  # no scheduler, or no plugin: the next ensure() asks the workers
            await worker.scheduler.gpusort_broken(key=key)

    with contextlib.suppress(Exception):  # a closed loop: the worker is going, and its communicator with it
        worker.loop.add_callback(send)


def install(address: str, comm: "Collectives") -> None:
    """Make ``comm`` the communicator of the worker at ``address``; the one it held before is aborted."""
    with _registry_lock:
        old = _registry.get(address)
        _registry[address] = comm
    if old is not None:
        old.close()


def _state(dask_worker: Any = None) -> tuple[str, tuple[str, ...], str] | None:
    """This worker's healthy communicator as ``(key, workers, kind)``, or ``None``."""
    with _registry_lock:
        comm = _registry.get(dask_worker.address)
    return None if comm is None or comm.broken else (comm.key, comm.workers, comm.kind)


class Collectives:
    """What a sort's task needs from the collectives between its workers: rank ``rank`` of ``size``.

    Every rank calls the same methods in the same order.  :meth:`exchange`
    takes arrays in the memory the data lives in (CuPy arrays for NCCL),
    contiguous; the rest takes and returns host bytes.  A transport gives
    :meth:`_gather` (host bytes from every rank, within a timeout),
    :meth:`exchange` and :meth:`_abort_transport`, and waits through
    :meth:`_until`; the turn of a sort and the agreement are this class's.
    """

    kind = ""

    def __init__(self, workers: tuple[str, ...], rank: int, key: str):
        self.workers, self.rank, self.size, self.key = workers, rank, len(workers), key
        self.broken: str | None = None
        self._order = threading.Condition()
        self._serving = 0  # the ticket whose sort runs now, or runs next, on this rank
        self._epoch: str | None = None  # the scheduler's table of turns that numbers them

    # --- the turn of one sort ---

    @contextlib.contextmanager
    def turn(self, token: str) -> Iterator["Collectives"]:
        """The communicator for sort ``token`` alone, once every rank's task of it has started.

        A rank waits here for its peers and for the sorts before it, so it
        runs outside its worker's thread pool (:func:`gpusort.engine.collective.launch`):
        a pool thread that waited for peers whose inputs may still have to be
        computed on this worker could deadlock a cluster whose threads all
        wait (dask-cuda's workers have one thread).
        """
        epoch, ticket = self._rendezvous(token)
        with self._order:
            if self._epoch is None:
                self._epoch = epoch
            elif epoch != self._epoch:  # the scheduler's table of turns is new: its numbers are not ours
                self.abort("the scheduler restarted")
            last_check = time.monotonic()
            while self._serving < ticket and self.broken is None:
                self._order.wait(0.05)
                if time.monotonic() - last_check > LIVENESS_SECONDS:
                    last_check = time.monotonic()
                    why = _gone(self.workers)
                    if why:
                        self.abort(why)
        try:
            if self.broken is not None:
                raise CommError(f"communicator {self.key!r} was aborted ({self.broken}); build the sort again")
            yield self
        finally:
            with self._order:
                self._serving = max(self._serving, ticket + 1)
                self._order.notify_all()

    def _rendezvous(self, token: str) -> tuple[str, int]:
        """This sort's ``(epoch, ticket)``, once every rank's task of it has started (asked of :func:`arrive`).

        A rank that stops waiting (its sort cancelled, a peer gone, the
        communicator aborted, the scheduler unreachable) takes its arrival
        back; where it cannot, its peers may have the ticket already, so the
        communicator is aborted: they fail within :data:`TIMEOUT` instead of
        waiting for it, and the next sort makes new communicators.
        """
        deadline = time.monotonic() + TURN_TIMEOUT
        while True:
            try:
                got = arrive(self.key, token, self.rank, self.size, RENDEZVOUS_POLL)
            except Exception as exc:
                got, why = None, f"the scheduler did not answer ({type(exc).__name__}: {exc})"
            else:
                if got is not None:
                    return got
                why = (f"aborted ({self.broken})" if self.broken is not None else _gone(self.workers)
                       or ("" if time.monotonic() < deadline else f"no turn in {TURN_TIMEOUT:.0f} s"))
            if why:
                try:
                    got = arrive(self.key, token, self.rank, self.size, 0.0, leave=True)
                except Exception:
                    self.abort(why)
                    got = None
                if got is not None:  # every rank came after all: the sort runs, and its peers with it
                    return got
                raise CommError(f"communicator {self.key!r}: {why} before sort {token} began "
                                f"(rank {self.rank} of {self.size})")

    # --- collectives ---

    def all_gather(self, mine: np.ndarray | None, nbytes: Sequence[int], failure: BaseException | None = None
                   ) -> list[np.ndarray]:
        """Every rank's bytes (``nbytes[r]`` of rank ``r``; ``mine`` this rank's), as uint8 host arrays.

        The ranks agree on the way, at no extra round: every rank's bytes
        carry a flag, set by a rank that failed before the call (``failure``;
        it sends ``nbytes`` zeros, ``mine`` unread).  Then every rank raises
        instead of going on to wait for the failed one.  A rank that failed
        on its input (a ``ValueError`` or ``TypeError``: an unsorted merge
        input, a chunk that is not what it declares) has every rank raise
        the same error, so that the user reads it whichever rank the client
        hears from; other failures are named, and raised where they happened.
        """
        payload = np.zeros(nbytes[self.rank] + 1, np.uint8)
        if failure is None:
            payload[:-1] = np.ascontiguousarray(mine).view(np.uint8)
        payload[-1] = failure is not None
        got = self._gather(payload, [int(b) + 1 for b in nbytes], TIMEOUT)
        failed = [r for r, part in enumerate(got) if part[-1]]
        if failed:
            self._fail(failed[0], failure)
        return [part[:-1] for part in got]

    def _fail(self, first: int, failure: BaseException | None) -> NoReturn:
        """Raise, on every rank, what rank ``first`` (the first that failed) failed with; ``failure`` is this rank's."""
        said = f"{type(failure).__name__}\0{failure}".encode() if self.rank == first else b""
        sizes = self._gather(np.array([len(said)], np.int64).view(np.uint8), [8] * self.size, TIMEOUT)
        nbytes = [int(sizes[r].view(np.int64)[0]) if r == first else 0 for r in range(self.size)]
        got = self._gather(np.frombuffer(said, np.uint8), nbytes, TIMEOUT)[first]
        kind, _, text = bytes(got).decode().partition("\0")
        if failure is not None:
            raise failure
        if kind in _USER_ERRORS:
            raise _USER_ERRORS[kind](text)
        raise CommError(f"rank {first} of the sort (worker {self.workers[first]}) failed ({kind}: {text})")

    def _gather(self, mine: np.ndarray, nbytes: Sequence[int], timeout: float) -> list[np.ndarray]:
        raise NotImplementedError

    def exchange(self, sends: Sequence[Sequence[Any]], recvs: Sequence[Sequence[Any]], local: Sequence = ()) -> None:
        """Send ``sends[p]`` to rank ``p`` and receive ``recvs[p]`` from it, in order, for every other rank ``p``.

        ``local``: ``(destination, source)`` arrays of this rank's own
        slices, copied while the others move.
        """
        raise NotImplementedError

    def _until(self, ready: Any, timeout: float) -> None:
        """Poll ``ready()`` (which raises the transport's errors) until it is true.

        Aborts the communicator on an error, after ``timeout`` seconds, or
        once :func:`_gone` says the peers will not come.
        """
        start = last_check = time.monotonic()
        while True:
            try:
                if ready():
                    return
            except Exception as exc:
                self.abort(f"{type(exc).__name__}: {exc}")
                raise CommError(f"communicator {self.key!r}: {type(exc).__name__}: {exc}") from exc
            now = time.monotonic()
            if now - start > timeout:
                self.abort(f"no answer in {timeout:.0f} s")
                raise CommError(f"communicator {self.key!r}: the other ranks did not answer in {timeout:.0f} s "
                                f"(rank {self.rank} of {self.size}); a worker was lost or is stuck")
            if now - last_check > LIVENESS_SECONDS:
                last_check = now
                why = _gone(self.workers)
                if why:
                    self.abort(why)
                    raise CommError(f"communicator {self.key!r}: {why} mid-sort (rank {self.rank} of {self.size})")
            # A collective of a sort ends within milliseconds: poll closely at first, gently later.
            time.sleep(2e-5 if now - start < 0.05 else 1e-3)

    def abort(self, why: str) -> None:
        """Abort the communicator: every call on it, now or later, fails."""
        if self.broken is None:
            self.broken = why
            with contextlib.suppress(Exception):
                self._abort_transport()
            _report_broken(self.key)
            with self._order:
                self._order.notify_all()

    def _abort_transport(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.abort("replaced by new communicators")


class Turns:
    """The order of the sorts on each communicator: a sort's ticket, once every rank of it has arrived.

    Tickets count up from 0 per communicator, in the order the sorts
    became complete, so every rank sees the same order.  One table lives
    on the scheduler (:class:`Placement`); threads outside a worker (tests)
    share this process's.

    Examples
    --------
    >>> turns = Turns()
    >>> turns.arrive("k", "b", 0, 2), turns.arrive("k", "a", 1, 2), turns.arrive("k", "a", 0, 2)
    (None, None, 0)
    >>> turns.arrive("k", "a", 1, 2), turns.arrive("k", "b", 1, 2), turns.arrive("k", "b", 0, 2)
    (0, 1, 1)
    """

    def __init__(self) -> None:
        self.epoch = uuid.uuid4().hex  # names this table: a restarted scheduler's numbers start again
        self._lock = threading.Lock()
        self._arrived: dict[tuple[str, str], set[int]] = {}
        self._tickets: dict[tuple[str, str], tuple[int, set[int]]] = {}  # ticket, and the ranks that have it
        self._next: dict[str, int] = {}

    def arrive(self, key: str, token: str, rank: int, size: int, leave: bool = False) -> int | None:
        """Rank ``rank`` of ``size`` is in sort ``token`` on communicator ``key``: its ticket, or ``None`` for not yet.

        With ``leave``, a rank that will wait no more takes its arrival
        back, unless the sort has its ticket already (then it must run).
        """
        sort = (key, token)
        with self._lock:
            if sort in self._tickets:
                ticket, told = self._tickets[sort]
                told.add(rank)
                if len(told) == size:
                    del self._tickets[sort]
                return ticket
            arrived = self._arrived.setdefault(sort, set())
            if leave:
                arrived.discard(rank)
                if not arrived:
                    del self._arrived[sort]
                return None
            arrived.add(rank)
            if len(arrived) < size:
                return None
            del self._arrived[sort]
            ticket = self._next.get(key, 0)
            self._next[key] = ticket + 1
            if size > 1:
                self._tickets[sort] = (ticket, {rank})
            return ticket


_local_turns = Turns()  # for ranks that run outside a worker (tests' threads)


def arrive(key: str, token: str, rank: int, size: int, wait: float, leave: bool = False) -> tuple[str, int] | None:
    """:meth:`Turns.arrive` at the scheduler of this worker's cluster, waiting up to ``wait`` seconds for the ticket.

    Returns ``(epoch, ticket)``: the table's :attr:`Turns.epoch` and the ticket, or ``None``.
    """
    from distributed import get_worker
    from distributed.utils import sync

    try:
        worker = get_worker()
    except ValueError:  # a test's thread: this process's table, polled
        end = time.monotonic() + wait
        while True:
            ticket = _local_turns.arrive(key, token, rank, size, leave)
            if ticket is not None:
                return _local_turns.epoch, ticket
            if leave or time.monotonic() >= end:
                return None
            time.sleep(1e-3)
    got = sync(worker.loop, worker.scheduler.gpusort_turn, key=key, token=token, rank=rank, size=size, wait=wait,
               leave=leave)
    return None if got is None else (got[0], int(got[1]))


_acting = threading.local()  # the tasks a rank's thread runs for (acting_for)


def acting_for(keys: Sequence[Any]) -> None:
    """This thread runs a rank for the tasks ``keys`` (its sort's ``collective-`` tasks): it waits while any is wanted."""
    _acting.keys = list(keys)


def _gone(workers: Sequence[str]) -> str:
    """Why a waiting rank should stop waiting, asked of the scheduler: "" while its peers may come.

    A peer that left the cluster never comes; a sort whose tasks the
    scheduler no longer holds (its graph was let go of, or failed) waits
    for nothing.  Outside a worker, or with no scheduler to ask, the
    timeout still applies.
    """
    answer = _alive(workers, getattr(_acting, "keys", None))
    if answer is None:
        return ""
    lost, held = answer
    if lost:
        return f"worker {lost} left the cluster"
    return "" if held else "the sort was cancelled"


def wanted(key: Any) -> bool | None:
    """Whether the scheduler still holds task ``key`` (not failed); ``None`` where it cannot be asked."""
    answer = _alive([], [key])
    return None if answer is None else bool(answer[1])


def _alive(workers: Sequence[str], keys: Sequence[Any] | None) -> tuple[str | None, bool] | None:
    """:meth:`Placement.alive` asked from this worker; ``None`` outside a worker, or with no scheduler to ask."""
    from distributed import get_worker
    from distributed.utils import sync

    try:
        worker = get_worker()
        lost, held = sync(worker.loop, worker.scheduler.gpusort_alive, workers=list(workers), keys=keys)
    except Exception:
        return None
    return lost, held


# --- where the ranks' tasks run, and when ------------------------------------------------------

class PinnedTask(Task):
    """A task that must run on one worker, ``worker``: a rank of a collective sort, or a view of a rank's block.

    Never fused with its neighbours (Dask's linear fusion would rename it,
    and run the fused task wherever its inputs are); :class:`Placement`
    pins it to ``worker`` as its graph reaches the scheduler.  Layer
    annotations cannot say this: Dask's array optimization drops them.
    Pinned, a view is never queued as a root-ish task either: the
    scheduler would hand a worker its views a few at a time, a round trip
    each (a view's task group reads few tasks when the workers are few).
    """

    worker: str

    __slots__ = tuple(__annotations__)

    def __init__(self, key: Any, func: Any, /, *args: Any, worker: str, **kwargs: Any):
        self.worker = worker
        super().__init__(key, func, *args, **kwargs)

    @property
    def block_fusion(self) -> bool:
        return True


class ViewTask(Task):
    """A view of one task's result that many like it share (output chunks cut from a run or a merged block).

    Dask takes a group of many tasks that read one task for root-ish and
    queues it: the scheduler hands a worker a few of the views at a time, a
    round trip each, so 64 views of a sort took 70 ms where they cost
    0.02 ms each.  :class:`Placement` lets a view run on any of the
    cluster's hosts, loosely (a worker on a new host may still take it),
    which no queued task is; the scheduler then sends every view to where
    its result lies as soon as it is there.
    """

    __slots__ = ()


def placed(client: Any) -> int:
    """How many workers ``client``'s cluster has, with :class:`Placement` on its scheduler: one round trip.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     placed(client), Placement.name in client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))
    (2, True)
    """
    return client.run_on_scheduler(_placed)


def _placed(dask_scheduler: Any = None) -> int:
    _placement(dask_scheduler)
    return len(dask_scheduler.workers)


def register(client: Any, group: Group) -> Group:
    """Have ``client``'s scheduler pin tasks, hand out turns and know ``group`` (:class:`Placement`).

    Returns ``group``, for chaining.
    """
    client.run_on_scheduler(_register, group.key, list(group.workers), group.kind)
    return group


def _register(key: str, workers: list[str], kind: str, dask_scheduler: Any = None) -> None:
    _placement(dask_scheduler).group = (key, tuple(workers), kind)


def _placement(scheduler: Any) -> "Placement":
    """``scheduler``'s :class:`Placement`, installed if it has none."""
    plugin = scheduler.plugins.get(Placement.name)
    if plugin is None:
        plugin = Placement(scheduler)
        scheduler.add_plugin(plugin, name=Placement.name)
        scheduler.handlers["gpusort_turn"] = plugin.turn
        scheduler.handlers["gpusort_broken"] = plugin.broken
        scheduler.handlers["gpusort_alive"] = plugin.alive
    return plugin


def _known(dask_scheduler: Any = None) -> dict:
    """The scheduler's workers, sorted, and the communicators it knows to be well over them (or ``None``)."""
    plugin = dask_scheduler.plugins.get(Placement.name)
    return {"workers": sorted(dask_scheduler.workers), "group": None if plugin is None else plugin.group}


class Placement(SchedulerPlugin):
    """The scheduler's part: every :class:`PinnedTask` restricted to its worker, views never queued, and the sorts' turns.

    ``gpusort_turn`` (a scheduler handler) is :meth:`Turns.arrive`, waiting
    up to ``wait`` seconds for the last rank instead of returning ``None``
    at once: the ranks learn their turn one round trip after it begins.

    A pinned task whose worker has left the cluster can run nowhere (a
    rank's communicator and block were that worker's), and the scheduler
    would keep it waiting for that worker for ever: it fails instead, as
    it becomes unrunnable, and the sort with it.

    ``group`` is ``(key, workers, kind)`` of the communicators the client
    registered last, while they are well: a worker that joins or leaves,
    or a rank that aborts its communicator (``gpusort_broken``), forgets
    them, and the next :func:`ensure` asks the workers again.
    """

    name = "gpusort-placement"

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.group: tuple[str, tuple[str, ...], str] | None = None
        self.turns = Turns()
        self._ready: dict[tuple[str, str], asyncio.Event] = {}

    def add_worker(self, scheduler: Any, worker: str) -> None:
        self.group = None

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        self.group = None
        # Its pinned tasks that were unrunnable already (the worker paused) fail too: no transition comes for them.
        for ts in list(scheduler.unrunnable):
            if isinstance(ts.run_spec, PinnedTask) and ts.run_spec.worker == worker:
                scheduler.loop.add_callback(self._fail_orphan, ts.key, worker)

    async def alive(self, workers: list[str], keys: list | None = None) -> tuple[str | None, bool]:
        """The first of ``workers`` that left the cluster (or ``None``), and whether any task of ``keys`` is held.

        A task is held while the scheduler has it and it has not failed;
        ``keys`` ``None``: held.  Keys come as msgpack makes them: tuples as lists.
        """
        lost = next((w for w in workers if w not in self.scheduler.workers), None)
        if keys is None:
            return lost, True
        tasks = self.scheduler.tasks
        held = [tasks.get(tuple(k) if isinstance(k, list) else k) for k in keys]
        return lost, any(ts is not None and ts.state != "erred" for ts in held)

    async def broken(self, key: str) -> None:
        if self.group is not None and self.group[0] == key:
            self.group = None

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "no-worker":
            ts = self.scheduler.tasks.get(key)
            if ts is not None and isinstance(ts.run_spec, PinnedTask) and ts.run_spec.worker not in self.scheduler.workers:
                # Not from inside this transition: the scheduler is between states.
                self.scheduler.loop.add_callback(self._fail_orphan, key, ts.run_spec.worker)

    def _fail_orphan(self, key: Any, worker: str) -> None:
        """Fail pinned task ``key`` of worker ``worker``, which left: as distributed fails a task no worker can run."""
        from distributed.protocol.pickle import dumps

        ts = self.scheduler.tasks.get(key)
        if ts is None or ts.state != "no-worker" or worker in self.scheduler.workers:
            return
        stimulus_id = f"gpusort-worker-left-{time.time()}"
        error = CommError(f"worker {worker} left the cluster while task {key!r} of a collective sort was pinned "
                          "there; compute the sort again (gpusort makes new communicators)")
        recommendations = self.scheduler.transition(key, "erred", exception=dumps(error), cause=key,
                                                    stimulus_id=stimulus_id)
        self.scheduler.transitions(recommendations, stimulus_id=stimulus_id)

    def update_graph(self, scheduler: Any, *, tasks: Any = (), **kwargs: Any) -> None:
        hosts = None
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is None:
                continue
            if isinstance(ts.run_spec, PinnedTask):
                scheduler.set_restrictions({key: ts.run_spec.worker})
            elif isinstance(ts.run_spec, ViewTask) and not (
                    ts.worker_restrictions or ts.host_restrictions or ts.resource_restrictions):
                # Restricted already (the caller's workers=), a view is not queued and keeps them.
                # Hosts, not workers: a worker that joins a host later is one of them.
                hosts = {ws.host for ws in scheduler.workers.values()} if hosts is None else hosts
                if hosts:
                    ts.host_restrictions, ts.loose_restrictions = set(hosts), True

    async def turn(self, key: str, token: str, rank: int, size: int, wait: float, leave: bool = False
                   ) -> tuple[str, int] | None:
        ticket = self.turns.arrive(key, token, rank, size, leave)
        if ticket is None and not leave:
            ready = self._ready.setdefault((key, token), asyncio.Event())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ready.wait(), wait)
            ticket = self.turns.arrive(key, token, rank, size)  # the ticket, or still waiting: the rank asks again
        if ticket is None:
            return None
        ready = self._ready.pop((key, token), None)
        if ready is not None:  # the other ranks' calls that wait for it
            ready.set()
        return self.turns.epoch, ticket
