"""The three-phase sort as one Dask graph.

Layers, in the order they run (constant rounds, whatever ``P`` and ``N``):

``runs-``     one task per input chunk: order keys (:mod:`gpusort.order`),
              sorted on the chosen backend; a run is ``(keys, values)``.
``samples-``  every ``g``-th key of each run, to host memory.
``plan-``     one task: per-run windows that bracket every split.
``windows-``  one task per run: its window keys, cut where the run lives.
``splits-``   one task: exact split vectors for every output boundary.
``slice-``    one task per (output chunk, run): the run's part of that chunk,
              cut where the run lives, so no task pulls a whole run.
``merge-``    one task per output chunk: a k-way merge of exactly its slices,
              then the order keys decoded back to the user's dtype.

Phase 1 (:func:`form_runs`) and phases 2-3 (:func:`merge_sorted_runs`) meet
in :class:`Runs`, so runs may also come from elsewhere: the Zarr external
sort keeps them on disk between the two.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort import corank, order
from gpusort.backends import Pair, get_backend, namespace, to_numpy

#: The sort's phases and the task-name prefixes of each, in the order they run.
#: Timing by phase (:mod:`gpusort.runtime`, the benchmarks, the workflows) reads
#: the scheduler's task stream through this table, so it lives with the graph
#: that names the tasks.
PHASES: dict[str, tuple[str, ...]] = {
    "runs": ("runs",),
    "splitters": ("samples", "plan", "windows", "splits"),
    "merges": ("slice", "merge"),
}


@dataclass(frozen=True)
class Runs:
    """``P`` sorted runs in a Dask graph.

    Task ``(name, k)`` computes run ``k``: a pair ``(order_keys, values)``
    sorted ascending, ``values`` ``None`` for keys only; ``scheme`` is the
    order-key scheme (:mod:`gpusort.order`) the keys were encoded with.
    """

    graph: HighLevelGraph
    name: str
    lengths: tuple[int, ...]
    okey_dtype: np.dtype
    value_dtype: np.dtype | None
    meta: Any
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
            scheme,
        )


def _extend(graph: HighLevelGraph, name: str, dsk: dict, *deps: str) -> HighLevelGraph:
    """``graph`` plus layer ``name``, whose tasks read layers ``deps``."""
    return HighLevelGraph({**graph.layers, name: dsk}, {**graph.dependencies, name: set(deps)})


def _field(graph, name, field, label, chunks, meta, dtype) -> da.Array:
    """Field ``field`` of the pairs that tasks ``(name, i)`` compute, as an array."""
    out = f"{label}-{tokenize(name, field)}"
    dsk = {(out, i): (operator.getitem, (name, i), field) for i in range(len(chunks[0]))}
    return da.Array(_extend(graph, out, dsk, name), out, chunks, meta=meta_from_array(meta, ndim=1, dtype=dtype))


def _sort_chunk(backend: str, descending: bool, scheme: order.Scheme, keys, values, offset, declared) -> Pair:
    k, length, dtype, value_dtype = declared
    # The splitters trust the declared chunk lengths, so a chunk that loads
    # short, long or as another dtype would silently lose or garble elements
    # downstream: stop at the chunk, by name.  Byte order alone may differ.
    for what, got, want in (("keys", keys, dtype), ("values", values, value_dtype)):
        if got is not None and (len(got) != length or not np.can_cast(got.dtype, want, "equiv")):
            raise ValueError(
                f"input chunk {k} loaded {len(got)} {what} of dtype {got.dtype}, but its dask array "
                f"declares {length} of dtype {want}: fix the source of chunk {k}, or declare the "
                "array's real chunks and dtype"
            )
    if offset is not None:  # argsort: the values are global positions
        values = namespace(keys).arange(offset, offset + len(keys), dtype=np.int64)
    return get_backend(backend).sort_run(order.encode(keys, descending, scheme), values)


def form_runs(
    keys: da.Array,
    values: da.Array | None = None,
    *,
    descending: bool,
    backend: str,
    positions: bool = False,
    keys_returned: bool = True,
) -> Runs:
    """Phase 1: every chunk of ``keys`` (and ``values``) becomes a sorted run.

    With ``positions=True`` the values are int64 positions into ``keys``
    (argsort) and ``values`` must be ``None``.  ``keys_returned=False`` says
    that only the values will be used (argsort), which lets float keys tie
    their zeros and NaNs in integer order keys (:func:`gpusort.order.scheme_for`).
    """
    stable = values is not None or positions
    scheme = order.scheme_for(stable, keys_returned)
    name = "runs-" + tokenize(keys, values, descending, backend, positions, scheme)
    lengths = tuple(int(c) for c in keys.chunks[0])
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist()
    vkeys = values.__dask_keys__() if values is not None else [None] * len(lengths)
    vdtype = None if values is None else values.dtype
    dsk = {
        (name, k): (
            _sort_chunk, backend, descending, scheme, kk, vk, offsets[k] if positions else None,
            (k, lengths[k], keys.dtype, vdtype),
        )
        for k, (kk, vk) in enumerate(zip(keys.__dask_keys__(), vkeys, strict=True))
    }
    deps = [keys] if values is None else [keys, values]
    value_dtype = np.dtype(np.int64) if positions else vdtype
    return Runs(
        HighLevelGraph.from_collections(name, dsk, dependencies=deps),
        name,
        lengths,
        order.order_dtype(keys.dtype, scheme),
        value_dtype,
        keys._meta,
        scheme,
    )


def _samples(run: Pair, g: int) -> np.ndarray:
    return np.ascontiguousarray(to_numpy(run[0][::g]))


def _windows(run: Pair, plan: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """Run ``k``'s window keys ``run_k[lo[j, k]:hi[j, k]]`` of every boundary ``j``, in host memory."""
    keys = run[0]
    lo, hi = plan  # one row per inner boundary, and a windows- task exists only if there is one
    return to_numpy(namespace(keys).concatenate([keys[a:b] for a, b in zip(lo[:, k].tolist(), hi[:, k].tolist())]))


def _slice(run: Pair, splits: np.ndarray, j: int, k: int) -> Pair:
    a, b = int(splits[j, k]), int(splits[j + 1, k])
    keys, values = run
    return keys[a:b], None if values is None else values[a:b]


def _merge(backend: str, dtype: np.dtype, descending: bool, scheme: order.Scheme, *pieces: Pair) -> Pair:
    okeys, values = get_backend(backend).merge_runs(pieces)
    return order.decode(okeys, dtype, descending, scheme), values


def _merge_local(backend, dtype, descending, scheme, splits, j, *runs: Pair) -> Pair:
    """:func:`_merge` of output chunk ``j``, cutting its slices from whole runs."""
    return _merge(backend, dtype, descending, scheme, *(_slice(run, splits, j, k) for k, run in enumerate(runs)))


def slice_locally() -> bool:
    """Whether merges may cut their slices themselves rather than in slice tasks.

    Slice tasks exist so that only slices travel between workers, at the
    price of one task per (output chunk, run).  Where every run already sits
    in the merging process — the threaded and synchronous schedulers, or a
    distributed cluster of one worker — they are pure scheduling overhead
    (about 6 s for 64 x 64 chunks on a 2-worker cluster), so the merges take
    whole runs and slice them as views.  Dask picks its shuffle the same way
    (P2P only with a distributed client).  The choice is made when the graph
    is built: a graph built for one process and computed on a multi-worker
    cluster stays exact but moves whole runs.  ``dask.config`` key
    ``gpusort.slicing``: ``"auto"`` (default), ``"tasks"`` or ``"local"``.
    """
    mode = dask.config.get("gpusort.slicing", "auto")
    if mode not in ("auto", "tasks", "local"):
        raise ValueError(f"dask config gpusort.slicing={mode!r}; use 'auto', 'tasks' or 'local'")
    if mode != "auto":
        return mode == "local"
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):  # no distributed client: a local scheduler
        return dask.config.get("scheduler", "threads") in ("threads", "threading", "sync", "synchronous", "single-threaded")
    info = client.scheduler_info(n_workers=2)
    return info.get("n_workers", len(info["workers"])) <= 1


def merge_sorted_runs(
    runs: Runs,
    *,
    key_dtype: Any,
    descending: bool,
    chunk: int,
    backend: str,
    sample_stride: int | None = None,
) -> tuple[da.Array, da.Array | None]:
    """Phases 2-3: exact splitters, then one merge per output chunk.

    Returns the sorted keys (decoded to ``key_dtype``) and the values in the
    same order (``None`` for keys only), in chunks of ``chunk`` elements, the
    last one the remainder.
    """
    n, nruns = sum(runs.lengths), len(runs.lengths)
    ranks = corank.output_ranks(n, chunk)
    inner = ranks[1:-1]
    g = sample_stride or corank.sample_stride(n, nruns, len(inner))
    local = slice_locally()
    token = tokenize(runs.name, key_dtype, descending, chunk, backend, g, local)
    run_keys = [(runs.name, k) for k in range(nruns)]
    dsk: dict = {}
    splits = ("splits-" + token,)
    if len(inner):
        plan = ("plan-" + token,)
        dsk.update({("samples-" + token, k): (_samples, rk, g) for k, rk in enumerate(run_keys)})
        dsk[plan] = (corank.plan_windows, [("samples-" + token, k) for k in range(nruns)], list(runs.lengths), inner, g)
        dsk.update({("windows-" + token, k): (_windows, rk, plan, k) for k, rk in enumerate(run_keys)})
        windows = [("windows-" + token, k) for k in range(nruns)]
        dsk[splits] = (corank.split_vectors, list(runs.lengths), inner, plan, windows)
    else:
        dsk[splits] = (corank.split_vectors, list(runs.lengths), inner)
    dtype = np.dtype(key_dtype)
    for j in range(len(ranks) - 1):
        if local:
            dsk[("merge-" + token, j)] = (_merge_local, backend, dtype, descending, runs.scheme, splits, j, *run_keys)
            continue
        for k, rk in enumerate(run_keys):
            dsk[("slice-" + token, j, k)] = (_slice, rk, splits, j, k)
        pieces = [("slice-" + token, j, k) for k in range(nruns)]
        dsk[("merge-" + token, j)] = (_merge, backend, dtype, descending, runs.scheme, *pieces)
    name = "merge-" + token
    graph = _extend(runs.graph, name, dsk, runs.name)
    chunks = (tuple(int(c) for c in np.diff(ranks)),)
    keys = _field(graph, name, 0, "sorted", chunks, runs.meta, np.dtype(key_dtype))
    if runs.value_dtype is None:
        return keys, None
    return keys, _field(graph, name, 1, "sorted-values", chunks, runs.meta, runs.value_dtype)
