"""Host communicators for a cluster of threads: the collective sort's engine tested without a GPU.

A test double of NCCL's transport (:class:`gpusort.engine.nccl.NcclComm`): the
workers of a ``LocalCluster(processes=False)`` share this process, so each
collective call is a rendezvous of the ranks' threads at a shared table, and
arrays are copied from the senders' lists into the receivers' (through host
memory: CuPy arrays too, so one GPU can stand in for several).
Everything above the transport -- the turn of a sort, the agreement, the
waits and their aborts (:class:`gpusort.engine.comms.Collectives`), and the whole
engine (:mod:`gpusort.engine.collective`) -- is the code the GPU workers run.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Sequence

import numpy as np

from gpusort.arrays import copy_into, in_memory, is_cupy, to_numpy
from gpusort.engine import comms


class _Table:
    """The posts of one communicator's calls, by (call number, rank), until every rank has read them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posts: dict[tuple[int, int], Any] = {}
        self.reads: dict[int, int] = {}


class HostComm(comms.Collectives):
    kind = "host"

    def __init__(self, table: _Table, workers: tuple[str, ...], rank: int, key: str):
        super().__init__(workers, rank, key)
        self.table, self.calls = table, 0
        self.moved = 0  # bytes this rank received through exchange()

    def _swap(self, payload: Any, timeout: float) -> list[Any]:
        call, table = self.calls, self.table
        self.calls += 1
        with table.lock:
            table.posts[call, self.rank] = payload

        def ready() -> bool:
            if self.broken:
                raise comms.CommError(f"aborted: {self.broken}")
            with table.lock:
                return all((call, r) in table.posts for r in range(self.size))

        self._until(ready, timeout)
        with table.lock:
            got = [table.posts[call, r] for r in range(self.size)]
            table.reads[call] = table.reads.get(call, 0) + 1
            if table.reads[call] == self.size:  # every rank has its copy: the posts can go
                del table.reads[call]
                for r in range(self.size):
                    del table.posts[call, r]
        return got

    def _gather(self, mine: np.ndarray, nbytes: Sequence[int], timeout: float) -> list[np.ndarray]:
        got = self._swap(np.array(mine, np.uint8), timeout)
        assert [len(g) for g in got] == [int(n) for n in nbytes], "ranks disagree on what they gather"
        return got

    def exchange(self, sends: Sequence[Sequence[Any]], recvs: Sequence[Sequence[Any]], local: Sequence = ()) -> None:
        for dst, src in local:
            copy_into(dst, src)
        got = self._swap([[np.array(to_numpy(a)) for a in out] for out in sends], comms.TIMEOUT)
        for p in range(self.size):
            if p == self.rank:
                continue
            arrived = got[p][self.rank]
            assert [a.shape for a in arrived] == [b.shape for b in recvs[p]], "ranks disagree on the slices"
            for into, a in zip(recvs[p], arrived):
                into[...] = in_memory(a, is_cupy(into))
                self.moved += a.nbytes

    def _abort_transport(self) -> None:
        pass


#: The tables of this process's host communicators, by key: the workers of a cluster of threads share them.
_tables: dict[str, _Table] = {}


def _join(key: str, workers: tuple[str, ...], dask_worker: Any = None) -> None:
    comm = HostComm(_tables[key], workers, workers.index(dask_worker.address), key)
    comms.install(dask_worker.address, comm)


def install(client: Any) -> comms.Group:
    """Host communicators on every worker of ``client``'s cluster of threads: the group they form."""
    info = client.scheduler_info(n_workers=-1)
    workers = tuple(sorted(info["workers"]))
    key = uuid.uuid4().hex[:16]
    _tables[key] = _Table()
    client.run(_join, key, workers)
    return comms.register(client, comms.Group(key, workers, HostComm.kind))
