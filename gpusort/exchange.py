"""The exchange between workers: every run's slices to the workers that merge them.

Once the split vectors are known, output chunk ``j`` needs slice
``run_k[s_k(r_j):s_k(r_{j+1})]`` of every run ``k``.  On a cluster of several
workers this is an all-to-all, and it goes through distributed's P2P shuffle
machinery -- the one ``dask.dataframe`` shuffles and ``dask.array`` rechunks
use -- with a spec and a run of our own:

* one ``transfer-`` task per run hands the run and its split vector to the
  worker's P2P plugin (:class:`SortExchangeRun`), which cuts the run into one
  contiguous *slab* per destination worker (the output chunks a worker owns
  are a contiguous range of ranks, so they are a contiguous range of every
  run) and sends the slabs in batches, worker to worker, over the cluster's
  comms: UCX carries CuPy slabs GPU to GPU, TCP carries host slabs as frames,
  never pickled whole;
* P2P's barrier task waits until every slab has arrived;
* one ``merge-`` task per merge block (consecutive output chunks, see
  :func:`gpusort.graph.task_groups`), placed by the scheduler plugin on the
  worker that owns the block, merges its pieces of the slabs it received (in
  run order, so ties keep the strict ``(key, run, position)`` order) and
  decodes the order keys.

The graph has one task per run, the barrier and one per merge block for the
exchange and the merges, the data moves in at most ``P·(W-1)`` shards
batched into messages per pair of workers,
and P2P restarts the exchange if a worker dies during it (the runs are
recomputed from their lineage), so the result stays exact.  Slabs are kept
in memory (GPU memory for CuPy runs) until their merges ran: the exchange
holds at most the data its runs held.

This module uses ``distributed.shuffle``'s extension points (``ShuffleSpec``,
``ShuffleRun``, the barrier), which are not public API: gpusort pins
``distributed`` to one release line for that reason.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask._task_spec import Task, TaskRef
from distributed import get_worker
from distributed.utils_comm import retry
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

from gpusort.graph import merge_pieces

#: Below this mean size per array, slabs travel as one pickled blob rather than
#: as frames (distributed's own threshold for P2P shards).
_SMALL_SHARD_BYTES = 65536

_sent = {"bytes": 0, "messages": 0}
_sent_lock = threading.Lock()


def sent() -> dict[str, int]:
    """Bytes of slabs and messages this process has sent to other workers in exchanges so far.

    Run it on the workers (``client.run``): P2P's messages bypass Dask's own
    transfer log, so this is how benchmarks count what an exchange moved.
    """
    with _sent_lock:
        return dict(_sent)


@dataclass(frozen=True)
class SortExchangeSpec(ShuffleSpec[int]):
    """What the scheduler plugin needs to start the exchange: the output chunks and how to merge them."""

    nruns: int
    nblocks: int
    backend: Any
    key_dtype: np.dtype
    descending: bool
    scheme: str

    @property
    def output_partitions(self):
        yield from range(self.nblocks)

    def pick_worker(self, partition: int, workers) -> str:
        # Contiguous ranges of output chunks per worker: every run then sends
        # each worker one contiguous slab.
        return workers[partition * len(workers) // self.nblocks]

    def create_run_on_worker(self, run_id, span_id, worker_for, plugin) -> ShuffleRun:
        worker = plugin.worker
        return SortExchangeRun(
            spec=self,
            worker_for=worker_for,
            id=self.id,
            run_id=run_id,
            span_id=span_id,
            local_address=worker.address,
            directory=os.path.join(worker.local_directory, f"gpusort-exchange-{self.id}-{run_id}"),
            executor=plugin._executor,
            rpc=worker.rpc,
            digest_metric=worker.digest_metric,
            scheduler=worker.scheduler,
            memory_limiter_disk=plugin.memory_limiter_disk,
            memory_limiter_comms=plugin.memory_limiter_comms,
            disk=False,
            loop=worker.loop,
        )


def cut_slabs(keys: Any, values: Any, split: np.ndarray, owned: list[tuple[int, int]]) -> list[tuple]:
    """One run's slabs for one worker: ``(keys, values, offsets, a)`` per owned range ``[a, b)``.

    ``split`` is the run's split vector over the output chunks' edges; the
    slab holds the run's elements of chunks ``a … b-1`` and ``offsets`` where
    each chunk starts in it.  Arrays come first in every tuple: distributed
    looks at the first leaf of a message to decide whether to serialize it
    element by element (CuPy arrays as device frames, NumPy arrays as
    buffers) or to pickle it whole, which would copy GPU slabs to the host.

    Examples
    --------
    >>> cut_slabs(np.arange(10), None, np.array([0, 3, 3, 8, 10]), [(1, 3)])
    [(array([3, 4, 5, 6, 7]), None, array([0, 0, 5]), 1)]
    """
    slabs = []
    for a, b in owned:
        lo, hi = int(split[a]), int(split[b])
        offsets = np.asarray(split[a:b + 1], dtype=np.int64) - lo
        slabs.append((keys[lo:hi], None if values is None else values[lo:hi], offsets, a))
    return slabs


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


class SortExchangeRun(ShuffleRun[int, Any]):
    """One worker's part of one exchange: cut runs into slabs, keep the slabs that arrive, merge."""

    def __init__(self, spec: SortExchangeSpec, worker_for: dict[int, str], **kwargs: Any):
        super().__init__(**kwargs)
        self.spec = spec
        self.worker_for = worker_for
        self.ranges = contiguous_ranges(worker_for)
        self.range_of = {j: (a, b) for owned in self.ranges.values() for a, b in owned for j in range(a, b)}
        # slabs[a][k] = (offsets, keys, values): run k's slab for the range starting at a.
        self._slabs: dict[int, dict[int, tuple]] = defaultdict(dict)
        self._unmerged: dict[int, int] = {}
        self._lock = threading.Lock()

    def _shard_partition(self, data: Any, partition_id: int) -> dict[str, tuple[list, int]]:
        (keys, values), split = data
        return {address: (cut_slabs(keys, values, split, owned), partition_id)
                for address, owned in self.ranges.items()}

    async def _write_to_comm(self, data: dict[str, Any]) -> None:
        # Slabs for this worker stay in this process: no loopback round trip.
        local = data.pop(self.local_address, None)
        if local is not None:
            await self._receive([local])
        if data:
            await super()._write_to_comm(data)

    async def send(self, address: str, shards: list) -> Any:
        arrays = [a for slabs, _ in shards for k, v, _, _ in slabs for a in (k, v) if a is not None]
        small = arrays and sum(a.nbytes for a in arrays) // len(arrays) < _SMALL_SHARD_BYTES
        # The parent measures shards with memoryview, which CuPy arrays lack.
        payload = pickle.dumps(shards, protocol=5) if small else shards
        with _sent_lock:
            _sent["bytes"] += sum(a.nbytes for a in arrays)
            _sent["messages"] += 1
        return await retry(lambda: self._send(address, payload), count=self.RETRY_COUNT,
                           delay_min=self.RETRY_DELAY_MIN, delay_max=self.RETRY_DELAY_MAX)

    async def _receive(self, data: list[tuple[list, int]]) -> None:
        self.raise_if_closed()
        with self._lock:
            for slabs, k in data:
                if k in self.received:  # a retried send
                    continue
                self.received.add(k)
                for keys, values, offsets, a in slabs:
                    self._slabs[a][k] = (offsets, keys, values)
                    self.total_recvd += int(keys.nbytes) + (0 if values is None else int(values.nbytes))

    def _get_output_partition(self, partition_id: int, key: Any, **kwargs: Any) -> tuple[Any, Any]:
        a, b = self.range_of[partition_id]
        i = partition_id - a
        with self._lock:
            slabs = self._slabs.get(a, {})
            if len(slabs) != self.spec.nruns:
                raise RuntimeError(
                    f"exchange {self.id}: output chunk {partition_id} has slabs of {len(slabs)} of "
                    f"{self.spec.nruns} runs"
                )
            slabs = [slabs[k] for k in range(self.spec.nruns)]  # run order: ties stay stable
        pieces = [(keys[o[i]:o[i + 1]], None if values is None else values[o[i]:o[i + 1]])
                  for o, keys, values in slabs]
        with self._lock:
            left = self._unmerged.setdefault(a, b - a) - 1
            self._unmerged[a] = left
            if left == 0:  # every chunk of this range is merged: free the slabs
                self._slabs.pop(a, None)
        spec = self.spec
        return merge_pieces(spec.backend, spec.key_dtype, spec.descending, spec.scheme, pieces)

    def _get_assigned_worker(self, partition_id: int) -> str:
        return self.worker_for[partition_id]

    def read(self, path):  # pragma: no cover - slabs are kept in memory, never on disk
        raise NotImplementedError("the sort exchange keeps its slabs in memory")

    def deserialize(self, buffer: Any) -> Any:  # pragma: no cover - see read
        return buffer


def _transfer(run: Any, splits: np.ndarray, id: ShuffleId, k: int) -> int:
    try:
        get_worker()
    except ValueError:
        raise RuntimeError(
            "this gpusort result was built for a distributed cluster of several workers (its runs "
            "are exchanged between them), but it is being computed by another scheduler: compute "
            "it through that cluster's client, or build it under "
            "dask.config.set({'gpusort.exchange': 'local'})"
        ) from None
    with handle_transfer_errors(id):
        return get_worker_plugin().add_partition((run, splits[:, k]), partition_id=k, id=id)


def _unpack(id: ShuffleId, j: int, run_id: int) -> tuple[Any, Any]:
    with handle_unpack_errors(id):
        return get_worker_plugin().get_output_partition(id, run_id, j)


def exchange_layer(run_keys: list, splits_key: Any, token: str, spec_args: dict) -> tuple[dict, str]:
    """The exchange's tasks: transfers of every run, the barrier, one merge per block of output chunks.

    ``run_keys`` are the runs' keys, ``splits_key`` the key of the split
    vectors (``(J + 1, P)``), ``spec_args`` the fields of
    :class:`SortExchangeSpec` but ``id``.  Returns the tasks and the name of
    the merge tasks, ``(name, j)`` for output chunk ``j``.
    """
    id = ShuffleId(token)
    transfer, merge = "transfer-" + token, "merge-" + token
    dsk: dict = {}
    refs = []
    for k, run in enumerate(run_keys):
        dsk[(transfer, k)] = t = Task((transfer, k), _transfer, TaskRef(run), TaskRef(splits_key), id, k)
        refs.append(t.ref())
    spec = SortExchangeSpec(id=id, disk=False, **spec_args)
    dsk[barrier_key(id)] = barrier = P2PBarrierTask(barrier_key(id), p2p_barrier, id, *refs, spec=spec)
    for j in range(spec.nblocks):
        dsk[(merge, j)] = Task((merge, j), _unpack, id, j, barrier.ref())
    return dsk, merge
