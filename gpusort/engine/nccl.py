"""NCCL communicators between Dask's GPU workers: made once per cluster, the transport of the collective sort.

:class:`NcclComm` is :class:`gpusort.engine.comms.Collectives` over one NCCL
communicator on a worker's GPU: the all-gathers of the splitters' host bytes
go up, across and down in one buffer, and the exchange is one grouped
send/receive per pair of ranks (NCCL's all-to-all), GPU to GPU over NVLink or
PCIe.  This is how RAFT's comms serve cuML and cuGraph on Dask.

:func:`ensure`, on the client as a sort's graph is built: where the
scheduler knows the communicators it registered to be well over exactly the
cluster's workers (:class:`gpusort.engine.comms.Placement`), nothing happens
(one round trip to the scheduler); else, where every worker holds a healthy
one, the scheduler learns them again (two more).  Otherwise it probes the
workers (CuPy with NCCL, one distinct GPU each), asks one of them for an NCCL
unique id, and has every worker join (:func:`_join`): NCCL's
``ncclCommInitRank`` in a thread of each worker, then one byte to every
peer, so that the links are made before the first sort.  ``None``: this
cluster has no NCCL (CPU workers, a CuPy without NCCL, two workers on one
GPU), and the caller keeps distributed's P2P exchange.

NVLink multicast (NVLS) stays off (``NCCL_NVLS_ENABLE=0`` in the workers'
environment, unless set): on machines that share their GPUs, a program that
uses it can leave the GPUs unusable for others.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpusort.arrays import copy_into
from gpusort.engine import comms


def _probe() -> tuple[str | None, str]:
    """(this worker's GPU as a PCI bus id, or ``None``; why not): can it join an NCCL communicator?"""
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError as exc:
        return None, f"no CuPy ({exc})"
    if not getattr(nccl, "available", False):
        return None, "this CuPy was built without NCCL (pip install nvidia-nccl-cu12 or -cu13)"
    try:
        return cupy.cuda.Device(0).pci_bus_id, ""
    except Exception as exc:  # CuPy without a usable GPU
        return None, f"no GPU ({exc})"


def _unique_id() -> Any:
    from cupy.cuda import nccl

    return nccl.get_unique_id()


async def _join(uid: Any, workers: tuple[str, ...], key: str, timeout: float, dask_worker: Any = None) -> int:
    """Join communicator ``key`` as rank ``workers.index(this worker)``: in a thread, so the worker's loop runs on."""
    workers = tuple(workers)
    rank = workers.index(dask_worker.address)
    loop = asyncio.get_running_loop()
    comm = await asyncio.wait_for(loop.run_in_executor(None, NcclComm.make, uid, workers, rank, key), timeout)
    comms.install(dask_worker.address, comm)
    return rank


class NcclComm(comms.Collectives):
    """:class:`Collectives` over one NCCL communicator on this worker's GPU (device 0: dask-cuda's, for its worker)."""

    kind = "nccl"

    def __init__(self, comm: Any, workers: tuple[str, ...], rank: int, key: str):
        import cupy

        super().__init__(workers, rank, key)
        self.comm = comm
        self.device = cupy.cuda.Device(0)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)

    @classmethod
    def make(cls, uid: Any, workers: tuple[str, ...], rank: int, key: str) -> "NcclComm":
        """Rank ``rank`` of a new communicator, with a link to every peer made."""
        import cupy
        from cupy.cuda import nccl

        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # read as NCCL starts: see the module docstring
        with cupy.cuda.Device(0):
            comm = cls(nccl.NcclCommunicator(len(workers), uid, rank), workers, rank, key)
            # NCCL connects a pair of ranks on their first send: every rank is here now, so do it now.
            one = [[cupy.zeros(1, np.uint8)] for _ in workers]
            comm.exchange(one, [[cupy.empty(1, np.uint8)] for _ in workers])
        return comm

    def _gather(self, mine: np.ndarray, nbytes: Sequence[int], timeout: float) -> list[np.ndarray]:
        import cupy

        # One buffer for every rank's bytes, one upload and one download: a copy each way costs
        # a round trip over the host link, which W - 1 of them a gather would pay W - 1 times.
        ends = np.concatenate(([0], np.cumsum(nbytes, dtype=np.int64))).tolist()
        with self.device:
            buffer = cupy.empty(ends[-1], np.uint8)
            part = [buffer[ends[p]:ends[p + 1]] for p in range(self.size)]
            part[self.rank].set(np.ascontiguousarray(mine).view(np.uint8))
            self._exchange([[] if p == self.rank else [part[self.rank]] for p in range(self.size)],
                           [[] if p == self.rank else [part[p]] for p in range(self.size)], timeout)
            host = buffer.get()
        return [mine if p == self.rank else host[ends[p]:ends[p + 1]] for p in range(self.size)]

    def exchange(self, sends: Sequence[Sequence[Any]], recvs: Sequence[Sequence[Any]], local: Sequence = ()) -> None:
        self._exchange(sends, recvs, comms.TIMEOUT, local)

    def _exchange(self, sends: Sequence[Sequence[Any]], recvs: Sequence[Sequence[Any]], timeout: float,
                  local: Sequence = ()) -> None:
        import cupy
        from cupy.cuda import nccl

        if self.broken:
            raise comms.CommError(f"communicator {self.key!r} was aborted ({self.broken})")
        with self.device:
            # The arrays were written on this thread's stream; NCCL's stream runs after them.
            self.stream.wait_event(cupy.cuda.get_current_stream().record())
            nccl.groupStart()
            try:
                for peer in range(self.size):
                    if peer == self.rank:
                        continue
                    for a in sends[peer]:
                        for ptr, count, kind in _messages(a):
                            self.comm.send(ptr, count, kind, peer, self.stream.ptr)
                    for a in recvs[peer]:
                        for ptr, count, kind in _messages(a):
                            self.comm.recv(ptr, count, kind, peer, self.stream.ptr)
            finally:
                nccl.groupEnd()
            # This rank's own slices, on this thread's stream while NCCL's moves the others' (after it has
            # recorded what NCCL waits for): the merge that follows on this stream comes after both.
            try:
                for dst, src in local:
                    copy_into(dst, src)
            finally:  # nothing NCCL writes or reads may go before it is done
                self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        """Until NCCL's stream is done: :meth:`_until`, with NCCL's own asynchronous errors."""
        done = self.stream.record()

        def ready() -> bool:
            self.comm.check_async_error()
            return done.done

        self._until(ready, timeout)

    def _abort_transport(self) -> None:
        self.comm.abort()


#: The most elements one NCCL send or receive moves: larger arrays go in several.
MESSAGE_ELEMENTS = 2**30


def _messages(a: Any) -> list[tuple[int, int, int]]:
    """``(pointer, count, NCCL datatype)`` of each message that moves contiguous array ``a``.

    Sender and receiver cut an array of the same dtype and length alike,
    which NCCL needs: its sends and receives match one for one.  Elements of
    1, 2, 4 or 8 bytes move as unsigned words of that width (2 as float16:
    NCCL has no 16-bit unsigned type, and only bytes move).
    """
    from cupy.cuda import nccl

    kinds = {1: nccl.NCCL_UINT8, 2: nccl.NCCL_FLOAT16, 4: nccl.NCCL_UINT32, 8: nccl.NCCL_UINT64}
    width = a.dtype.itemsize if a.dtype.itemsize in kinds else 1
    count = a.nbytes // width
    return [(a.data.ptr + i * width, min(MESSAGE_ELEMENTS, count - i), kinds[width])
            for i in range(0, count, MESSAGE_ELEMENTS)]


def ensure(client: Any, timeout: float = 60.0) -> comms.Group | None:
    """The communicators of ``client``'s workers, made if they are not there yet; ``None`` without NCCL.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     ensure(client) is None   # CPU workers: no NCCL, the sort exchanges through P2P
    True
    """
    # One round trip while the scheduler knows the communicators well (Placement.group).
    known = client.run_on_scheduler(comms._known)
    workers = tuple(known["workers"])
    if len(workers) < 2:
        return None
    if known["group"] is not None and tuple(known["group"][1]) == workers:
        return comms.Group(known["group"][0], workers, known["group"][2])
    # Replies travel as msgpack, where tuples become lists.
    held = {None if v is None else (v[0], tuple(v[1]), v[2]) for v in client.run(comms._state).values()}
    if len(held) == 1 and None not in held:
        key, group, kind = held.pop()
        if group == workers:
            return comms.register(client, comms.Group(key, workers, kind))
    probed = client.run(_probe)
    buses = [bus for bus, _ in probed.values()]
    if None in buses or len(set(buses)) < len(buses):
        return None
    uid = client.run(_unique_id, workers=[workers[0]])[workers[0]]
    key = uuid.uuid4().hex[:16]
    try:
        client.run(_join, uid, workers, key, timeout)
    except Exception as exc:
        warnings.warn(f"gpusort: NCCL communicators could not be made ({type(exc).__name__}: {exc}); "
                      "sorting through distributed's P2P exchange instead", RuntimeWarning, stacklevel=3)
        return None
    return comms.register(client, comms.Group(key, workers))


def why_not(client: Any) -> str:
    """Why :func:`ensure` gives ``client``'s cluster no communicators, in words."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if len(workers) < 2:
        return f"the cluster has {len(workers)} worker (collectives need two or more)"
    probed = client.run(_probe)
    reasons = {why for bus, why in probed.values() if bus is None}
    if reasons:
        return "; ".join(sorted(reasons))
    return "two or more workers share one GPU (NCCL needs a GPU per worker: start a dask-cuda LocalCUDACluster)"
