"""The sort as one Dask graph: runs, exact splitters, merges.

:func:`sort` builds one of two graphs, picked when it is built
(:func:`exchange_method`):

* **In one process** (the threaded or synchronous scheduler, or a cluster of
  one worker) every task sees every run, so nothing is exchanged:

  ``runs-``    one task per group of consecutive input chunks: their order keys
               (:mod:`gpusort.keys.order`) sorted on the backend.  Chunks in GPU
               memory make one run, one kernel call over all of them; host
               chunks one run per thread (:func:`run_bytes`).
  ``samples-`` one task per run, run as soon as the run is made: every
               ``g``-th of its keys, the splitters' samples.
  ``splits-``  one task: the exact split vectors of every merge block's edges
               over the runs (:func:`gpusort.keys.corank.exact_splits`), from the
               samples and the few keys around each edge that they leave open,
               cut from the runs where they are; absent for one run.
  ``merge-``   one task per block of consecutive output chunks: a k-way merge
               of exactly its slices, decoded back to the user's dtype; the
               output chunks are views of the block (``sorted-``).  One run
               is not merged: each output chunk is cut from it and decoded.

* **Across worker processes** the runs are formed where the chunks live and
  exchanged once, in bulk, by distributed's P2P machinery
  (:mod:`gpusort.engine.exchange`): ``transfer-`` tasks hand each worker its chunks,
  P2P's barrier starts the sort on every worker at once, and one task per
  output chunk waits for its owner's merge and takes its view.

Either way the graph has ``O(P + J)`` tasks for ``P`` input and ``J`` output
chunks.  Phase 1 (:func:`form_runs`) and phases 2-3 (:func:`merge_sorted_runs`)
meet in :class:`Runs`, so runs may also come from elsewhere: the Zarr
external sort keeps them on disk between the two.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.base import tokenize
from dask._task_spec import DataNode, Task, TaskRef
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from gpusort.backends import MOVABLE_VALUE_BYTES, BackendSpec, Pair, backend_where, get_backend, on_device, spec_of
from gpusort.engine import collective, comms, exchange, nccl, tasks
from gpusort.keys import corank, order
from gpusort.memory import plan

#: The sort's phases and the task-name prefixes of each, in the order they run.
#: Timing by phase (:mod:`gpusort.runtime`, the benchmarks, the workflows) reads
#: the scheduler's task stream through this table, so it lives with the graph
#: that names the tasks.  Across workers the phases run on every owner once
#: P2P's barrier (``shuffle-``) has started them, and each worker times them
#: itself (:func:`gpusort.engine.exchange.recorded_phases`); P2P's output tasks
#: (``output-``) wait for the merge, so their seconds, that wait, are in no phase.
PHASES: dict[str, tuple[str, ...]] = {
    "runs": ("runs",),
    "splitters": ("samples", "splits"),
    "exchange": ("transfer",),
    "merges": ("merge", "sorted"),
}


@dataclass(frozen=True)
class Runs:
    """``P`` sorted runs in a Dask graph.

    Task ``(name, k)`` computes run ``k``: a pair ``(order_keys, values)``
    sorted ascending, ``values`` ``None`` for keys only; ``scheme`` is the
    order-key scheme (:mod:`gpusort.keys.order`) the keys were encoded with;
    ``element_bytes`` what one key and its value take (rows of composite
    keys and records count whole), which sizes the merge tasks.
    """

    graph: HighLevelGraph
    name: str
    lengths: tuple[int, ...]
    okey_dtype: np.dtype
    value_dtype: np.dtype | None
    meta: Any
    element_bytes: int
    scheme: order.Scheme = "exact"

    def arrays(self) -> tuple[da.Array, da.Array | None]:
        """The runs' order keys and values as Dask arrays, one chunk per run."""
        chunks = (self.lengths,)
        keys = _field(self.graph, self.name, 0, "run-keys", chunks, self.meta, self.okey_dtype)
        if self.value_dtype is None:
            return keys, None
        return keys, _field(self.graph, self.name, 1, "run-values", chunks, self.meta, self.value_dtype)

    @classmethod
    def from_arrays(cls, okeys: da.Array, values: da.Array | None = None, scheme: order.Scheme = "exact") -> "Runs":
        """Runs whose blocks are already sorted order keys (and their values), encoded with ``scheme``."""
        if values is not None and values.chunks != okeys.chunks:
            # Run k pairs block k of each: other chunks would pair keys with other keys' values.
            raise ValueError(f"values has chunks {values.chunks} but okeys has {okeys.chunks}; they must match")
        name = "runs-" + tokenize(okeys, values)
        vkeys = [None] * okeys.numblocks[0] if values is None else values.__dask_keys__()
        dsk = {(name, k): (tuple, list(kv)) for k, kv in enumerate(zip(okeys.__dask_keys__(), vkeys, strict=True))}
        deps = [okeys] if values is None else [okeys, values]
        return cls(
            HighLevelGraph.from_collections(name, dsk, dependencies=deps),
            name,
            tuple(int(c) for c in okeys.chunks[0]),
            okeys.dtype,
            None if values is None else values.dtype,
            okeys._meta,
            row_bytes(okeys) + (0 if values is None else row_bytes(values)),
            scheme,
        )


def extend(graph: HighLevelGraph, name: str, dsk: dict, *deps: str) -> HighLevelGraph:
    """``graph`` plus layer ``name``, whose tasks read layers ``deps``."""
    return HighLevelGraph({**graph.layers, name: dsk}, {**graph.dependencies, name: set(deps)})


def _field(graph, name, field, label, chunks, meta, dtype, blocks: list[tuple[int, int]] | None = None,
           decoded: tuple | None = None, workers: Sequence[str] | None = None) -> da.Array:
    """Field ``field`` of the pairs that tasks ``(name, b)`` compute, as an array.

    With ``blocks`` (chunk ranges ``[a, b)``, one per task), task ``b``
    computes several consecutive chunks and chunk ``i`` is a view of it;
    ``decoded`` (:func:`gpusort.keys.order.decode`'s arguments after the keys)
    decodes each chunk from order keys as it is cut.  ``workers[b]``: rank ``b``'s worker, where task ``b``
    hands on a :class:`gpusort.engine.collective.Block` and its views, pinned there
    (:class:`gpusort.engine.comms.PinnedTask`), await it.
    """
    out = f"{label}-{tokenize(name, field, decoded, chunks, blocks)}"
    # Task objects, not tuples: an output chunk a task, tens of thousands of
    # them at tiny chunks, each of which Dask would otherwise parse as a
    # legacy task in every pass over the graph (culling, fusing, running).
    if blocks is None:
        dsk = {(out, i): Task((out, i), operator.getitem, TaskRef((name, i)), field) for i in range(len(chunks[0]))}
    else:
        starts = np.concatenate(([0], np.cumsum(chunks[0]))).tolist()
        def view(t: int, i: int, a: int) -> Task:
            bounds = (starts[i] - starts[a], starts[i + 1] - starts[a])
            if workers is None:
                return comms.ViewTask((out, i), _cut, TaskRef((name, t)), field, *bounds, decoded)
            return comms.PinnedTask((out, i), collective.view, TaskRef((name, t)), field, *bounds, worker=workers[t])

        dsk = {(out, i): view(t, i, a) for t, (a, b) in enumerate(blocks) for i in range(a, b)}
    return da.Array(extend(graph, out, dsk, name), out, chunks, meta=meta_from_array(meta, ndim=1, dtype=dtype))


def _cut(pair: Pair, field: int, start: int, stop: int, decoded: tuple | None = None) -> Any:
    part = pair[field][start:stop]
    return part if decoded is None else order.decode(part, *decoded)


#: Bounds of the data one run or one merge task takes when chunks are small:
#: tiny chunks are batched up to ``TASK_BYTES[0]``, or to an equal share of the
#: data per thread when that is more, but never past ``TASK_BYTES[1]``.  Every
#: task costs the scheduler about a millisecond, so 256 chunks of 128 KiB cost
#: more in tasks than in sorting; batched, the graph grows with the data.
TASK_BYTES = (8 * 2**20, 64 * 2**20)
#: The same bounds for chunks that live in GPU memory (CuPy chunks), where a
#: task's fixed cost is a larger share of its work: a GPU sorts a GiB in
#: milliseconds.  topk and the N-D sorts batch by these; a sort's runs take
#: all of a process's GPU chunks at once (:func:`run_bytes`).
DEVICE_TASK_BYTES = (64 * 2**20, 2**30)


def task_bytes(total_bytes: int, device: bool = False) -> int:
    """How much data one task may batch: ``dask.config`` ``gpusort.task-bytes``.

    ``"auto"`` (the default) takes an equal share of ``total_bytes`` per thread
    (:func:`threads`) within :data:`TASK_BYTES` (:data:`DEVICE_TASK_BYTES` for
    chunks in GPU memory); a size (``"16MiB"``, or bytes) sets it; ``0``
    batches nothing, one chunk per task.
    """
    setting = _task_bytes_setting()
    if setting is None:
        low, high = DEVICE_TASK_BYTES if device else TASK_BYTES
        return min(max(low, total_bytes // threads()), high)
    return setting


def run_bytes(total_bytes: int, device: bool) -> int:
    """How much data one run takes in one process: a run is one sort of it all where that pays.

    Chunks in GPU memory make one run (``total_bytes``): the GPU sorts it in
    one call at its full rate, and nothing is left to split or merge.  Host
    chunks make one run per thread (:func:`task_bytes`).  ``dask.config``
    ``gpusort.task-bytes`` set to a size bounds runs of either kind, for a
    GPU that cannot hold about three times its data at once.
    """
    setting = _task_bytes_setting()
    if setting is not None:
        return setting
    return max(total_bytes, 1) if device else task_bytes(total_bytes)


def _task_bytes_setting() -> int | None:
    """``gpusort.task-bytes`` in bytes, or ``None`` for ``"auto"``."""
    setting = dask.config.get("gpusort.task-bytes", "auto")
    if setting == "auto":
        return None
    try:
        return int(dask.utils.parse_bytes(setting) if isinstance(setting, str) else setting)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"dask config gpusort.task-bytes={setting!r}; use 'auto', a size like '16MiB', or 0") from exc


def _rounds_setting() -> int | None:
    """``gpusort.collective-rounds``: the rounds of a collective sort's exchange, ``None`` for ``"auto"``.

    More rounds hold less GPU memory at once; tests take the rounds' path
    with host communicators, where nothing would choose it.
    """
    setting = dask.config.get("gpusort.collective-rounds", "auto")
    if setting == "auto":
        return None
    if not isinstance(setting, int) or isinstance(setting, bool) or setting < 1:
        raise ValueError(f"dask config gpusort.collective-rounds={setting!r}; use 'auto' or a count of rounds >= 1")
    return setting


def task_groups(lengths: tuple[int, ...], element_bytes: int, target: int) -> list[tuple[int, int]]:
    """Consecutive chunks batched into tasks of at most ``target`` bytes: ranges ``[a, b)`` of chunk indices.

    A chunk of ``target`` bytes or more is a task of its own; smaller
    neighbours are batched while the batch stays within ``target``.

    Examples
    --------
    >>> task_groups((2**20,) * 8, 8, 32 * 2**20)
    [(0, 4), (4, 8)]
    >>> task_groups((2**14,) * 256, 8, 8 * 2**20)
    [(0, 64), (64, 128), (128, 192), (192, 256)]
    >>> task_groups((2**24,) * 3, 8, 8 * 2**20)
    [(0, 1), (1, 2), (2, 3)]
    """
    groups: list[tuple[int, int]] = []
    size = 0
    for i, n in enumerate(lengths):
        nbytes = n * element_bytes
        if groups and size + nbytes <= target:
            groups[-1] = (groups[-1][0], i + 1)
            size += nbytes
        else:
            groups.append((i, i + 1))
            size = nbytes
    return groups


def threads() -> int:
    """Threads that will run the graph: the distributed client's workers', or the local pool's."""
    client = _client()
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    from dask.system import CPU_COUNT

    return dask.config.get("num_workers", None) or CPU_COUNT


def _client() -> Any:
    """The default ``distributed`` client, or ``None`` under a local scheduler (or without distributed)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def declared_chunks(keys: da.Array, values: da.Array | None, a: int, b: int) -> list[tasks.Declared]:
    """What chunks ``a … b-1`` of ``keys`` (and ``values``) declare: :func:`gpusort.engine.tasks.gathered` checks it."""
    vdtype = None if values is None else values.dtype
    return [(k, int(keys.chunks[0][k]), keys.dtype, vdtype) for k in range(a, b)]


def chunk_inputs(keys: da.Array, values: da.Array | None, a: int, b: int, data: bool = False) -> list:
    """The task keys of chunks ``a … b-1``, keys and values interleaved, as :func:`gpusort.engine.tasks.gathered` takes them.

    With ``data=True`` a chunk the graph holds as data is passed as itself
    instead of by its key (:func:`block_inputs`): for tasks that run in this
    process, on a local scheduler.
    """
    blocks = block_inputs if data else _block_keys
    kkeys = blocks(keys)
    vkeys = blocks(values) if values is not None else [None] * len(kkeys)
    return [x for k in range(a, b) for x in (kkeys[k], vkeys[k])]


def block_inputs(x: da.Array) -> list:
    """What a task reads for each block of ``x``: the chunk itself where the graph holds it as data, else its key.

    ``da.from_array`` of a NumPy array (and ``persist`` on a local scheduler)
    puts every chunk in the graph as data.  Dask's threaded scheduler keeps
    each such key in its cache from the start and, for every other task,
    subtracts a set built from that whole cache (``start_state_from_dask``,
    Dask 2026.7.1): time in tasks x chunks held, 3.2 s for 15,676 tasks
    reading 17,011 one-element chunks.  Passed as task arguments, the chunks
    are no keys, and nothing reads the input's layer any more, so it is
    culled.  Only a materialized layer is looked into: any other would be
    materialized by the look.
    """
    keys = _block_keys(x)
    layer = x.__dask_graph__().layers.get(x.name)
    if not isinstance(layer, MaterializedLayer):
        return keys
    return [_held_chunk(layer.mapping.get(k), k) for k in keys]


def read_by_key(arrays: list[da.Array]) -> list[da.Array]:
    """Those of ``arrays`` that tasks built from :func:`block_inputs` still read by key: their graph's dependencies.

    An input whose every chunk is passed as data must not be one: Dask's
    ``HighLevelGraph.cull`` keeps every layer whole once no key is left to
    look for, so its chunks would stay in the graph (and in the threaded
    scheduler's cache) all the same.
    """
    return [x for x in arrays if any(b is k for b, k in zip(block_inputs(x), _block_keys(x)))]


def _held_chunk(task: Any, key: Any) -> Any:
    """The chunk a graph holds as data under ``key`` (a DataNode, or an array in the legacy form), else ``key``."""
    value = task.value if isinstance(task, DataNode) else task
    return value if isinstance(value, np.ndarray) or on_device(value) else key


def form_runs(
    keys: da.Array,
    values: da.Array | None = None,
    *,
    descending: bool,
    backend: str,
    positions: bool = False,
    keys_returned: bool = True,
    batch: bool = True,
) -> Runs:
    """Phase 1: consecutive chunks of ``keys`` (and ``values``) become sorted runs.

    With ``positions=True`` the values are int64 positions into ``keys``
    (argsort) and ``values`` must be ``None``.  ``keys_returned=False`` says
    that only the values will be used (argsort), which lets float keys tie
    their zeros and NaNs in integer order keys (:func:`gpusort.keys.order.scheme_for`).
    Chunks are batched into runs (:func:`task_groups`, :func:`run_bytes`)
    unless ``batch=False``, which makes one run per chunk.
    """
    scheme = order.scheme_for(values is not None or positions, keys_returned)
    lengths = tuple(int(c) for c in keys.chunks[0])
    value_dtype = np.dtype(np.int64) if positions else None if values is None else values.dtype
    element = row_bytes(keys) + (8 if positions else 0 if values is None else row_bytes(values))
    target = run_bytes(sum(lengths) * element, on_device(keys._meta)) if batch else 0
    groups = task_groups(lengths, element, target)
    name = "runs-" + tokenize(keys, values, descending, backend, positions, scheme, groups)
    offsets = np.concatenate(([0], np.cumsum(lengths))).tolist()
    dsk = {(name, r): (tasks.sort_chunks, backend, descending, scheme, offsets[a] if positions else None,
                       declared_chunks(keys, values, a, b), *chunk_inputs(keys, values, a, b, data=True))
           for r, (a, b) in enumerate(groups)}
    deps = read_by_key([keys] if values is None else [keys, values])
    return Runs(
        HighLevelGraph.from_collections(name, dsk, dependencies=deps),
        name,
        tuple(offsets[b] - offsets[a] for a, b in groups),
        order.order_dtype(keys.dtype, scheme),
        value_dtype,
        keys._meta,
        element,
        scheme,
    )


def row_bytes(x: da.Array) -> int:
    """Bytes per element of a 1-D array, or per row of a 2-D one (composite keys, records)."""
    return x.dtype.itemsize * (int(x.shape[1]) if x.ndim == 2 else 1)


def _block_keys(x: da.Array) -> list:
    """The keys of a 1-D array's blocks, or of a 2-D one's row blocks (one chunk across)."""
    if x.ndim == 2 and x.numblocks[1] != 1:
        raise ValueError(f"rows of composite keys or records must be one chunk wide; got chunks {x.chunks}")
    return [k[0] for k in x.__dask_keys__()] if x.ndim == 2 else x.__dask_keys__()


def _samples(g: int, run: Pair) -> np.ndarray:
    """Every ``g``-th order key of a run: its splitters' samples, cut while other runs are still being made."""
    return corank.samples(run[0], g)


def _splits(inner: np.ndarray, g: int, samples: list[np.ndarray], *runs: Pair) -> np.ndarray:
    """The split vectors of the merge blocks' edges, from the runs' samples and the runs in this process."""
    return corank.exact_splits([run[0] for run in runs], inner, g, samples)


def _merge_local(backend, dtype, descending, scheme, splits, j, *runs: Pair) -> Pair:
    """Merge block ``j``, cutting its slices from whole runs."""
    pieces = []
    for k, (keys, values) in enumerate(runs):
        a, b = int(splits[j, k]), int(splits[j + 1, k])
        pieces.append((keys[a:b], None if values is None else values[a:b]))
    return tasks.merge_pieces(backend, dtype, descending, scheme, pieces)


def exchange_method() -> str:
    """How the sort runs: ``"local"``, ``"p2p"``, ``"collective"``, or ``"across"``: collectives where they serve, else P2P.

    ``"local"``: runs, splitters and merges are tasks that cut what they
    need from the runs as views.  That is free where every run sits in the
    merging process -- the threaded and synchronous schedulers, or a
    distributed cluster of one worker -- and moves whole runs anywhere else.
    ``"p2p"``: each worker sorts the chunks it holds and the workers exchange
    exactly the slices the others merge, once, through distributed's P2P
    machinery (:mod:`gpusort.engine.exchange`).  ``"collective"``: one task per
    worker, talking through collectives (:mod:`gpusort.engine.collective`; NCCL
    between GPU workers, :func:`collective_group`), refused where the
    workers have none.  ``"auto"`` (the default) picks ``"across"`` on a
    distributed client with several workers, else ``"local"``, when the
    graph is built -- as Dask picks its own shuffle method.
    ``dask.config`` key ``gpusort.exchange``.
    """
    method = dask.config.get("gpusort.exchange", "auto")
    if method not in ("auto", "p2p", "local", "collective"):
        raise ValueError(f"dask config gpusort.exchange={method!r}; use 'auto', 'collective', 'p2p' or 'local'")
    client = _client()
    # The round trip that counts the workers also readies the scheduler for
    # the sort's views (comms.ViewTask), whatever the method.
    workers = 0 if client is None else comms.placed(client)
    if method != "auto":
        return method
    return "across" if workers > 1 else "local"


def sort(
    keys: da.Array,
    values: da.Array | None = None,
    *,
    descending: bool,
    backend: Any,
    chunk: int | tuple[int, ...],
    positions: bool = False,
    keys_returned: bool = True,
) -> tuple[da.Array, da.Array | None]:
    """``keys`` sorted (and ``values``, or their positions, in the same order), in output chunks of ``chunk``.

    The arguments are :func:`form_runs`'; ``chunk`` is an output chunk
    length (the last chunk the rest) or the chunk sizes.  Returns the keys,
    decoded to their dtype, and the values (``None`` for keys only).
    """
    method = exchange_method()
    if method in ("across", "p2p", "collective") and keys.shape[0]:
        group = None if method == "p2p" else collective_group(
            keys, values, backend, forced=method == "collective", positions=positions, descending=descending,
            keys_returned=keys_returned)
        if group is not None:
            device, host = spec_of(backend).device, not on_device(keys._meta)
            rounds = 1
            if host:  # host chunks: up once (one round) where the shares fit the GPUs, else in rounds
                rounds = _rounds_setting() or (device and host_rounds(keys, values, spec_of(backend), len(group.workers),
                                                                      positions, descending, keys_returned, chunk)) or 1
            return on_ranks([(keys, values)], descending=descending, backend=backend, chunk=chunk,
                            positions=positions, keys_returned=keys_returned, group=group,
                            upload=device and host and rounds == 1, rounds=rounds)
        return _sort_across_workers(keys, values, descending=descending, backend=backend, chunk=chunk,
                                    positions=positions, keys_returned=keys_returned)
    if whole_on_gpu(keys, values, backend, positions, descending, keys_returned):
        return _sort_whole(keys, values, descending=descending, backend=backend, chunk=chunk,
                           positions=positions, keys_returned=keys_returned)
    runs = form_runs(keys, values, descending=descending, backend=backend, positions=positions,
                     keys_returned=keys_returned)
    return merge_sorted_runs(runs, key_dtype=keys.dtype, descending=descending, chunk=chunk, backend=backend)


def collective_group(keys: da.Array, values: da.Array | None, backend: Any, forced: bool = False,
                     positions: bool = False, descending: bool = False, keys_returned: bool = True
                     ) -> comms.Group | None:
    """The communicators a sort across workers runs on (:mod:`gpusort.engine.collective`), or ``None`` for P2P.

    1-D keys (and values the GPU kernels move) on a cluster of GPU workers
    with NCCL (:func:`gpusort.engine.nccl.ensure`, which makes the
    communicators on first use): CuPy chunks, or host chunks of the keys the
    kernels sort, with ``backend="cupy"`` (:func:`host_rounds`: up once and
    down once where every rank's share fits its GPU, else in rounds).  With
    ``forced`` (``gpusort.exchange: "collective"``) a sort that cannot run
    there is refused, saying why, and the workers' communicators serve
    whatever chunks they move (tests install host communicators that move
    NumPy chunks).
    """
    spec = spec_of(backend)
    shaped = keys.ndim == 1 and (values is None or (values.ndim == 1 and values.dtype.itemsize in MOVABLE_VALUE_BYTES))
    if not forced and (not shaped or not spec.device):
        return None
    # Host keys the GPUs cannot take as they are sort out of core through P2P (refused where forced).
    untaken = spec.device and not on_device(keys._meta) and not _kernels_take(keys, values)
    if not forced and untaken:
        return None
    client = _client()
    group = nccl.ensure(client)
    if forced and group is None:
        raise ValueError(f"dask config gpusort.exchange='collective', but {nccl.why_not(client)}; "
                         "use gpusort.exchange='auto' or 'p2p'")
    if forced and untaken:
        raise ValueError(f"dask config gpusort.exchange='collective' takes host keys of booleans and numbers (and "
                         f"values of numbers) up to the GPUs; got keys {keys.dtype}"
                         + ("" if values is None else f" and values {values.dtype}")
                         + ": use gpusort.exchange='auto' or 'p2p'")
    if forced and not shaped:
        raise ValueError("dask config gpusort.exchange='collective' sorts 1-D keys, and 1-D values of 1, 2, 4 or 8 "
                         f"bytes; got keys of shape {keys.shape}"
                         + ("" if values is None else f" and values {values.dtype} of shape {values.shape}"))
    return group


def host_rounds(keys: da.Array, values: da.Array | None, spec: BackendSpec, nranks: int, positions: bool,
                descending: bool, keys_returned: bool, chunk: int | tuple[int, ...] | None = None) -> int | None:
    """In how many rounds host chunks sort on ``nranks`` GPUs: 1 where every rank's share goes up in one step.

    A rank's share is the larger of what :func:`gpusort.engine.collective.place`
    gives the most loaded rank (an eighth over ``1 / nranks`` of the keys,
    or a chunk larger than that) and the largest block of output chunks of
    ``chunk`` a rank merges.  Where its sort fits ``gpu_memory_budget`` (or the
    workers' default budget) as one whole-GPU step
    (:func:`gpusort.memory.plan.whole_bytes`), the share goes up once and its
    block comes down once: 1.  Past that, each rank sorts its runs out of
    core, and a round takes up a part of every run and merges a part of every
    block: about four arrays of a round's keys and values (sends, receive
    buffer, the merge's and the decode's), an eighth to spare, within the
    budget.  ``None`` for
    keys the GPU kernels do not sort from host memory (P2P sorts them).

    Examples
    --------
    >>> import dask.array as da
    >>> x = da.zeros(2**20, dtype="int64", chunks=2**18)
    >>> [host_rounds(x, None, BackendSpec("cupy", b), 2, False, False, True) for b in (2**30, 2**22)]
    [1, 6]
    """
    if not _kernels_take(keys, values):
        return None
    lengths = [int(c) for c in keys.chunks[0]]
    owner = collective.place(lengths, 1, [None] * len(lengths), nranks)
    ranks = corank.output_ranks(sum(lengths), max(lengths) if chunk is None else chunk)
    block = max(int(ranks[b] - ranks[a]) for a, b in collective.output_blocks(ranks, nranks))
    share = int(max(np.bincount(owner, weights=lengths, minlength=nranks).max(), block, 1))
    budget = (spec.gpu_memory_budget if spec.gpu_memory_budget is not None else default_budget_seen()) \
        * plan.PLAN_FRACTION
    if _step_bytes(share, keys, values, positions, descending, keys_returned) <= budget:
        return 1
    element = keys.dtype.itemsize + (8 if positions else 0 if values is None else values.dtype.itemsize)
    arrays = collective.ROUND_ARRAYS + 1  # and the round's sends
    return max(2, -(-9 * arrays * share * element // (8 * max(int(budget), 1))))  # an eighth to spare: pieces differ


def _kernels_take(keys: da.Array, values: da.Array | None) -> bool:
    """Whether host keys (and values) go up to the GPUs as they are: booleans and numbers in native byte order.

    CuPy makes no arrays of datetimes, strings or records: those sort
    across workers through P2P.
    """
    return keys.dtype.kind in "biuf" and keys.dtype.isnative and (
        values is None or (values.dtype.kind in "biufc" and values.dtype.isnative))


def _step_bytes(n: int, keys: da.Array, values: da.Array | None, positions: bool, descending: bool,
                keys_returned: bool) -> int:
    """The GPU memory one step that takes ``n`` of these keys (and values) up, sorts them and down holds."""
    vb = 8 if positions else 0 if values is None else values.dtype.itemsize
    scheme = order.scheme_for(values is not None or positions, keys_returned)
    return plan.whole_bytes(n, keys.dtype.itemsize, vb, order.encode_temporaries(keys.dtype, descending, scheme))


def on_ranks(parts: list[tuple[da.Array, da.Array | None]], *, descending: bool, backend: Any,
             chunk: int | tuple[int, ...], group: comms.Group, positions: bool = False, keys_returned: bool = True,
             upload: bool = False, presorted: Any = None, rounds: int = 1) -> tuple[da.Array, da.Array | None]:
    """The ``parts``' keys (and values), end to end, sorted -- or merged, ``presorted`` -- by the ranks of ``group``.

    Output chunks of ``chunk`` are views of their rank's block
    (:func:`gpusort.engine.collective.rank_graph` has the rest).
    """
    keys = parts[0][0]
    ranks = corank.output_ranks(sum(int(k.shape[0]) for k, _ in parts), chunk)
    sizes = (tuple(int(c) for c in np.diff(ranks)),)
    declared, inputs = [], []
    for k, v in parts:
        first = len(declared)
        declared += [(first + i, *rest) for i, *rest in declared_chunks(k, v, 0, k.numblocks[0])]
        inputs += [chunk_inputs(k, v, i, i + 1) for i in range(k.numblocks[0])]
    on = collective.rank_graph(parts, descending=descending, backend=backend, ranks=ranks, positions=positions,
                               keys_returned=keys_returned, group=group, client=_client(), declared=declared,
                               inputs=inputs, upload=upload, presorted=presorted, rounds=rounds)
    # "output", as P2P's output tasks: a view waits for its rank's merge, and no phase counts that wait.
    out = _field(on.graph, on.name, 0, "output", sizes, keys._meta, keys.dtype, on.blocks, workers=group.workers)
    if on.value_dtype is None:
        return out, None
    return out, _field(on.graph, on.name, 1, "output-values", sizes, keys._meta, on.value_dtype, on.blocks,
                       workers=group.workers)


#: The sort footprint the graph assumes any default GPU memory budget holds
#: (:data:`gpusort.backends.cupy.DEFAULT_FRACTION` of the free memory, known
#: only where the sort runs): about 1 GiB of int64 keys.  A larger sort asks
#: the GPUs (:func:`default_budget_seen`).  A sort planned as one step that
#: finds less there still sorts, out of core, in its one task.
WHOLE_DEFAULT_BYTES = 3 * 2**30


def whole_on_gpu(keys: da.Array, values: da.Array | None, backend: Any, positions: bool,
                 descending: bool = False, keys_returned: bool = True) -> bool:
    """Whether host chunks sort in one task that takes them to the GPU once: up, one sort, down.

    Where the CuPy backend sorts host chunks whose sort fits its GPU memory
    budget, out-of-core runs and merges would only move every key across
    the host link twice more.  Keys 1-D of a numeric dtype CuPy holds
    (order keys of one word), values 1-D; ``dask.config`` ``gpusort.task-bytes`` set to a size
    keeps runs of that size.

    Examples
    --------
    >>> import dask.array as da
    >>> x = da.zeros(2**20, chunks=2**18)
    >>> whole_on_gpu(x, None, "cupy", False), whole_on_gpu(x, None, "numpy", False)
    (True, False)
    """
    spec = spec_of(backend)
    if not spec.device or on_device(keys._meta) or keys.ndim != 1 or not keys.shape[0] \
            or keys.dtype.kind not in "biuf" or not keys.dtype.isnative or _task_bytes_setting() is not None:
        return False
    if values is not None and (values.ndim != 1 or values.dtype.itemsize not in MOVABLE_VALUE_BYTES
                               or not values.dtype.isnative):
        return False
    need = _step_bytes(int(keys.shape[0]), keys, values, positions, descending, keys_returned)
    if spec.gpu_memory_budget is None:
        return need <= WHOLE_DEFAULT_BYTES or need <= default_budget_seen() * plan.PLAN_FRACTION
    return need <= spec.gpu_memory_budget * plan.PLAN_FRACTION


def default_budget_seen() -> int:
    """The smallest default GPU memory budget where the sort runs, asked as the graph is built; 0 if none.

    On a distributed client every worker answers for its GPU (0 without
    one); under a local scheduler this process does.  One round trip to the
    workers, taken only for a sort past :data:`WHOLE_DEFAULT_BYTES`: one
    whole-GPU step moves every key across the host link twice where runs and
    merges move it four times.
    """
    client = _client()
    if client is None:
        return _default_budget_here()
    return min(client.run(_default_budget_here).values(), default=0)


def _default_budget_here() -> int:
    try:
        return get_backend(backend_where(True)).default_budget()
    except Exception:  # no CuPy here, or CuPy without a usable GPU
        return 0


def _sort_whole(keys: da.Array, values: da.Array | None, *, descending: bool, backend: Any,
                chunk: int | tuple[int, ...], positions: bool, keys_returned: bool
                ) -> tuple[da.Array, da.Array | None]:
    """:func:`sort` as one task (:func:`gpusort.engine.tasks.sort_chunks_whole`) whose output chunks are views of it."""
    scheme = order.scheme_for(values is not None or positions, keys_returned)
    n = int(keys.shape[0])
    sizes = tuple(int(c) for c in np.diff(corank.output_ranks(n, chunk)))
    name = "runs-" + tokenize(keys, values, descending, backend, positions, scheme, "whole")
    dsk = {(name, 0): (tasks.sort_chunks_whole, backend, keys.dtype, descending, scheme, 0 if positions else None,
                       declared_chunks(keys, values, 0, keys.numblocks[0]),
                       *chunk_inputs(keys, values, 0, keys.numblocks[0]))}
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[keys] if values is None else [keys, values])
    blocks = [(0, len(sizes))]
    out = _field(graph, name, 0, "sorted", (sizes,), keys._meta, keys.dtype, blocks)
    if values is None and not positions:
        return out, None
    value_dtype = np.dtype(np.int64) if positions else values.dtype
    return out, _field(graph, name, 1, "sorted-values", (sizes,), keys._meta, value_dtype, blocks)


def merge_sorted_runs(
    runs: Runs,
    *,
    key_dtype: Any,
    descending: bool,
    chunk: int | tuple[int, ...],
    backend: Any,
    sample_stride: int | None = None,
) -> tuple[da.Array, da.Array | None]:
    """Phases 2-3 in one process: exact splitters, then one merge per block of consecutive output chunks.

    Returns the sorted keys (decoded to ``key_dtype``) and the values in the
    same order (``None`` for keys only), in chunks of ``chunk`` elements, the
    last one the remainder, or in the chunk sizes ``chunk`` lists.  Small
    host chunks are merged in blocks (:func:`task_groups`), GPU chunks in
    one task (:func:`run_bytes`); ``dask.config`` ``gpusort.task-bytes: 0``
    merges every chunk in a task of its own.  One
    run needs no splitters and no merge: every output chunk is cut from it
    and decoded.
    """
    n, nruns = sum(runs.lengths), len(runs.lengths)
    ranks = corank.output_ranks(n, chunk)
    sizes = tuple(int(c) for c in np.diff(ranks))
    element = runs.element_bytes
    dtype = np.dtype(key_dtype)
    chunks = (sizes,)
    if nruns == 1:
        # The run is the result: each output chunk is cut from it and decoded,
        # with no task in between to wait for the kernels that sort it.
        blocks = [(0, len(sizes))]
        keys = _field(runs.graph, runs.name, 0, "sorted", chunks, runs.meta, dtype, blocks,
                      decoded=(dtype, descending, runs.scheme))
        if runs.value_dtype is None:
            return keys, None
        return keys, _field(runs.graph, runs.name, 1, "sorted-values", chunks, runs.meta, runs.value_dtype, blocks)
    # Runs in one process's GPU memory merge in one task, as they were sorted in one
    # (:func:`run_bytes`): the GPU merges them at its full rate, and no splitters are needed.
    blocks = task_groups(sizes, element, run_bytes(n * element, on_device(runs.meta)))
    # Merges split the runs only at block edges; inside a block its chunks are
    # consecutive ranks of one merged array.
    edges = ranks[[a for a, _ in blocks] + [blocks[-1][1]]]
    token = tokenize(runs.name, key_dtype, descending, chunk, backend, sample_stride, blocks)
    run_keys = [(runs.name, k) for k in range(nruns)]
    inner = edges[1:-1]
    # The samples are cut by a task per run, not by the splitters' task: they
    # are a strided read of every run (a cache and TLB miss a key where runs
    # are in host memory), which then overlaps the runs still being made
    # instead of delaying every merge.
    g = sample_stride or corank.sample_stride(n, nruns, len(inner))
    samples = [("samples-" + token, k) for k in range(nruns)] if len(inner) else []
    dsk: dict = {key: (_samples, g, run) for key, run in zip(samples, run_keys)}
    splits = ("splits-" + token,)
    dsk[splits] = (_splits, inner, g, samples, *run_keys)
    name = "merge-" + token
    for t in range(len(blocks)):
        dsk[(name, t)] = (_merge_local, backend, dtype, descending, runs.scheme, splits, t, *run_keys)
    graph = extend(runs.graph, name, dsk, runs.name)
    keys = _field(graph, name, 0, "sorted", chunks, runs.meta, dtype, blocks)
    if runs.value_dtype is None:
        return keys, None
    return keys, _field(graph, name, 1, "sorted-values", chunks, runs.meta, runs.value_dtype, blocks)


def _sort_across_workers(keys: da.Array, values: da.Array | None, *, descending: bool, backend: Any,
                         chunk: int | tuple[int, ...], positions: bool, keys_returned: bool
                         ) -> tuple[da.Array, da.Array | None]:
    """:func:`sort` on several workers: the exchange's graph (:mod:`gpusort.engine.exchange`).

    Every input chunk is its own transfer task, so that it is sorted where
    it is; only chunks smaller than :data:`TASK_BYTES`' lower bound
    (:data:`DEVICE_TASK_BYTES`' in GPU memory) are batched, as moving them
    costs less than their tasks.
    """
    lengths = tuple(int(c) for c in keys.chunks[0])
    n = sum(lengths)
    stable = values is not None or positions
    value_dtype = np.dtype(np.int64) if positions else None if values is None else values.dtype
    element = row_bytes(keys) + (8 if positions else 0 if values is None else row_bytes(values))
    setting = _task_bytes_setting()
    low = (DEVICE_TASK_BYTES if on_device(keys._meta) else TASK_BYTES)[0] if setting is None else setting
    groups = task_groups(lengths, element, low)
    offsets = np.concatenate(([0], np.cumsum(lengths))).tolist()
    parts = [(offsets[a] if positions else None, declared_chunks(keys, values, a, b),
              chunk_inputs(keys, values, a, b)) for a, b in groups]
    ranks = corank.output_ranks(n, chunk)
    sizes = tuple(int(c) for c in np.diff(ranks))
    # P2P's output partitions are blocks of consecutive output chunks, each a
    # view of its owner's merged ranks: a P2P output task costs more than a view.
    # Not one block a worker: the scheduler may run a view on another worker,
    # which then fetches the whole block.
    blocks = task_groups(sizes, element, task_bytes(n * element, on_device(keys._meta)))
    edges = ranks[[a for a, _ in blocks] + [blocks[-1][1]]]
    spec = dict(edges=tuple(int(r) for r in edges), nparts=len(groups), backend=backend,
                key_dtype=np.dtype(keys.dtype), descending=bool(descending),
                scheme=order.scheme_for(stable, keys_returned),
                merge_all=exchange.one_run_per_worker(stable))
    token = tokenize(keys, values, descending, backend, positions, keys_returned, chunk, groups, blocks)
    dsk, name = exchange.exchange_layer(parts, token, spec)
    deps = [keys] if values is None else [keys, values]
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
    chunks = (sizes,)
    out = _field(graph, name, 0, "sorted", chunks, keys._meta, keys.dtype, blocks)
    if value_dtype is None:
        return out, None
    return out, _field(graph, name, 1, "sorted-values", chunks, keys._meta, value_dtype, blocks)
