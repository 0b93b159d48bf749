"""Merging two sorted Dask arrays: the sort's phases 2-3 over runs that are already sorted.

Sorted ``a`` and ``b`` are runs already, so a merge is a sort without
phase 1 (:mod:`gpusort.engine.graph`).  Consecutive chunks of each input are
batched into runs as the sort batches its chunks (``runs-``, one task per
run, tiny chunks a few tasks in all); then every run publishes every
``g``-th order key (``samples-``), one task finds the exact co-ranks of the
output blocks' edges from the samples and the few keys around each edge
(``splits-``, :func:`gpusort.keys.corank.exact_splits`), and one task per block
of output chunks merges exactly its slices (``merge-``).  ``a``'s runs come
before ``b``'s, so the strict order ``(key, run, position)`` of
:mod:`gpusort.keys.corank` takes ``a``'s ties first, each input's in its order.
Every task depends on its chunks, or on the runs and their samples: the
graph has ``O(p + q + J)`` tasks and dependencies for ``p`` and ``q`` input
chunks and ``J`` output chunks, as the sort's does, and needs the memory the
sort needs.

Order keys are :func:`gpusort.keys.order.encode`'s scheme ``"float"`` for real
keys: floats compared as floats, ``-0.0`` tied with ``0.0`` and every NaN
with every other NaN, as NumPy compares them, so a merge of sorted inputs
never reorders a tie, and the merged keys decode to the inputs' exact bits.
Complex keys merge as composite order keys (:mod:`gpusort.engine.multikey`) and
carry themselves (and their values, as records).

Nothing checks the inputs up front: each run task checks the order of the
keys it encodes anyway, and the join with the last key before it, so that
together the runs check every neighbouring pair of each input, chunk ends
included, and the first one out of order raises a ``ValueError`` before any
co-rank is computed from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort.arrays import in_order, joined, namespace, to_numpy
from gpusort.backends import BackendSpec, Pair, backend_for, get_backend, on_device
from gpusort.engine import graph, multikey
from gpusort.front.api import SortOptions, as_dask
from gpusort.keys import composite, order


def merge(
    a: Any,
    b: Any,
    *,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> da.Array:
    """Merge two sorted 1-D arrays into one sorted array, stably, lazily.

    Parameters
    ----------
    a, b : dask.array.Array or array-like
        1-D, of one dtype (any key dtype :func:`gpusort.sort` takes), each
        sorted as :func:`gpusort.sort` returns it: ascending, or largest
        first with ``descending=True``, NaN (and NaT) last either way.  Any
        chunks, each its own.
    descending : bool
        Whether ``a`` and ``b`` are sorted largest first.
    chunks : int, optional
        Output chunk length; every chunk has it but the last, the rest.  By
        default the output has as many chunks as ``a`` and ``b`` together
        (as :func:`gpusort.sort` of their concatenation would).
    backend, gpu_memory_budget
        As for :func:`gpusort.sort`: CuPy chunks merge on the GPU, and
        ``backend="cupy"`` merges NumPy chunks there.

    Returns
    -------
    dask.array.Array
        ``np.sort(np.concatenate([a, b]), kind="stable")`` (for ascending
        inputs): ties keep ``a``'s elements first, and every element keeps
        its exact bits.  Nothing is computed yet.

    Raises
    ------
    ValueError
        When computed, if ``a`` or ``b`` is not sorted: the first position
        found out of order is named.

    Notes
    -----
    No sort: the inputs' chunks become runs as they are, checked for order
    as they are encoded, and the sort's co-rank splitters and merges do the
    rest (see :mod:`gpusort.front.sorted_merge`).  The graph grows with the
    number of chunks, not with its square.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> a = da.from_array([1, 3, 5, 7], chunks=2)
    >>> b = da.from_array([2, 3, 8], chunks=1)
    >>> gpusort.merge(a, b, chunks=3).compute()
    array([1, 2, 3, 3, 5, 7, 8])
    >>> gpusort.merge(a[::-1], b[::-1], descending=True).chunks
    ((2, 2, 2, 1),)
    >>> gpusort.merge(da.from_array([1, 5, 3, 7], chunks=2), b).compute()
    Traceback (most recent call last):
    ...
    ValueError: a is not sorted (ascending, NaN last): a[2] = 3 comes after a[1] = 5; ...
    """
    keys, _ = _merge_arrays([(a, "a"), (b, "b")], None, SortOptions.of(descending, chunks, backend, gpu_memory_budget))
    return keys


def merge_by_key(
    ka: Any,
    va: Any,
    kb: Any,
    vb: Any,
    *,
    descending: bool = False,
    chunks: int | None = None,
    backend: str | None = None,
    gpu_memory_budget: int | str | None = None,
) -> tuple[da.Array, da.Array]:
    """Merge two sorted key arrays and carry their values along, stably, lazily.

    ``ka`` and ``kb`` are as ``a`` and ``b`` of :func:`merge`; ``va`` and
    ``vb`` are 1-D values of one fixed-width dtype, as long as their keys
    (rechunked to their keys' chunks if need be), as
    :func:`gpusort.sort_by_key` returns them.  The other arguments are those
    of :func:`merge`.

    Returns
    -------
    (dask.array.Array, dask.array.Array)
        The merged keys and the values in the same order: equal keys keep
        ``ka``'s first, each side in its input order.

    Examples
    --------
    >>> import dask.array as da, gpusort
    >>> k, v = gpusort.merge_by_key(da.from_array([1, 3, 3]), da.from_array([b"a", b"b", b"c"]),
    ...                             da.from_array([3, 4]), da.from_array([b"x", b"y"]))
    >>> k.compute(), v.compute()
    (array([1, 3, 3, 3, 4]), array([b'a', b'b', b'c', b'x', b'y'], dtype='|S1'))
    """
    return _merge_arrays([(ka, "ka"), (kb, "kb")], [(va, "va"), (vb, "vb")],
                         SortOptions.of(descending, chunks, backend, gpu_memory_budget))


@dataclass(frozen=True)
class _Merge:
    """What every task of one merge needs: the keys' dtype and order, the backend, the inputs' names."""

    dtype: np.dtype
    descending: bool
    backend: str | BackendSpec
    names: tuple[str, str]

    @property
    def layout(self) -> composite.Layout | None:
        """The composite order keys' layout for complex keys; ``None`` for real ones."""
        return multikey.layout_of([self.dtype], self.descending) if order.is_composite(self.dtype) else None

    def okeys(self, keys: Any) -> Any:
        """Order keys of scheme ``"tied"``: 1-D, or ``(n, words)`` rows for complex keys."""
        if order.is_composite(self.dtype):
            return multikey.pack(self.layout, self.descending, keys)
        return order.encode(keys, self.descending, "tied")


def _merge_arrays(keys, values, options: SortOptions):
    """merge and merge_by_key: ``keys`` and ``values`` are ``(array, argument name)`` pairs, ``a``'s first."""
    names = (keys[0][1], keys[1][1])
    keys = [_sorted_input(x, name) for x, name in keys]
    (a, b), (name_a, name_b) = keys, names
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {a.dtype} but {name_b} has dtype {b.dtype}; merging needs one "
                        f"dtype: cast one first (e.g. {name_b}.astype({name_a}.dtype)), then sort it if the cast "
                        "may reorder it")
    if on_device(a._meta) != on_device(b._meta):
        host, device = (name_b, name_a) if on_device(a._meta) else (name_a, name_b)
        raise TypeError(f"{device} has CuPy chunks but {host} has NumPy chunks; put both in one memory: "
                        f"{host}.map_blocks(cupy.asarray), or {device}.map_blocks(cupy.asnumpy)")
    if values is not None:
        vnames = (values[0][1], values[1][1])
        values = [_values(v, name, k, kname) for (v, name), k, kname in zip(values, keys, names)]
        if values[0].dtype != values[1].dtype:
            raise TypeError(f"{vnames[0]} has dtype {values[0].dtype} but {vnames[1]} has dtype "
                            f"{values[1].dtype}; the merged values need one dtype: cast one first "
                            f"(e.g. {vnames[1]}.astype({vnames[0]}.dtype))")
    spec = _Merge(np.dtype(a.dtype), options.descending, options.spec(a._meta), names)
    n = a.shape[0] + b.shape[0]
    chunk = options.chunk(n, a.numblocks[0] + b.numblocks[0])
    if n == 0:  # nothing to merge: one empty chunk, as sort gives
        return _empty(a), None if values is None else _empty(values[0])
    return _graph(spec, keys, values, chunk)


def _empty(x: da.Array) -> da.Array:
    return da.from_array(x._meta.reshape(0), chunks=-1, asarray=False)


def _sorted_input(x: Any, name: str) -> da.Array:
    x = as_dask(x, name)
    if x.ndim != 1:
        raise ValueError(f"{name} is {x.ndim}-D; merge takes 1-D sorted arrays (sort an N-D one flat with "
                         f"gpusort.sort({name}, axis=None) first)")
    order.check_key_dtype(x.dtype, name, composite_ok=True)
    _check_known_chunks(x, name)
    return x


def _values(v: Any, name: str, keys: da.Array, kname: str) -> da.Array:
    v = as_dask(v, name)
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D like {kname}; got {v.ndim}-D (use {name}.ravel())")
    if v.dtype.hasobject:
        raise TypeError(f"{name} has dtype object; gpusort moves fixed-width values only")
    _check_known_chunks(v, name)
    if v.shape != keys.shape:
        raise ValueError(f"{name} has length {v.shape[0]} but {kname} has length {keys.shape[0]}; "
                         "they must be the same length")
    if v.chunks == keys.chunks:
        return v
    if keys.shape[0] == 0:  # Dask's rechunk keeps the number of empty chunks: nothing to move anyway
        return da.from_array(v._meta.reshape(0), chunks=keys.chunks, asarray=False)
    return v.rechunk(keys.chunks)


def _check_known_chunks(x: da.Array, name: str) -> None:
    if any(np.isnan(c) for c in x.chunks[0]):
        raise ValueError(f"{name} has unknown chunk sizes (e.g. after boolean indexing); "
                         f"call {name}.compute_chunk_sizes() first")


def _graph(spec: _Merge, keys: list[da.Array], values: list[da.Array] | None, chunk: int):
    """The merge's tasks: a run per group of consecutive chunks of one input, then the sort's phases 2-3.

    Every run is already sorted, so :func:`gpusort.engine.graph.merge_sorted_runs`
    merges them as it merges a sort's runs: ``a``'s runs come first, so its
    strict order ``(key, run, position)`` keeps ``a``'s ties first, each
    input's in its order.  Real keys take order keys of scheme ``"float"``,
    which decode to their exact bits; complex keys merge as composite order
    keys and carry themselves (and their values, as records).
    """
    across = _on_ranks(spec, keys, values, chunk)
    if across is not None:
        return across
    runs = _runs(spec, keys, values)
    complex_keys = order.is_composite(spec.dtype)
    key_dtype = runs.okey_dtype if complex_keys else spec.dtype
    merged, carried = graph.merge_sorted_runs(runs, key_dtype=key_dtype, descending=spec.descending and not
                                              complex_keys, chunk=chunk, backend=spec.backend)
    if not complex_keys:
        return merged, carried
    if values is None:
        return carried, None
    return multikey.fields(carried, [spec.dtype, values[0].dtype])


def _on_ranks(spec: _Merge, keys: list[da.Array], values: list[da.Array] | None, chunk: int):
    """The merge on the collectives between GPU workers, as the sort takes them; ``None`` where it does not.

    The ranks take the inputs' chunks where they are, join each rank's
    chunks of one input into runs and check them (:class:`Presorted`),
    and go on as a sort does after its runs: splitters, one all-to-all,
    one merge.  Host chunks merge as before (through one process), as do
    complex keys.
    """
    method = graph.exchange_method()
    if order.is_composite(spec.dtype) or method not in ("across", "collective") \
            or (method == "across" and not on_device(keys[0]._meta)):
        return None
    group = graph.collective_group(keys[0], None if values is None else values[0], spec.backend,
                                   forced=method == "collective")
    if group is None or (group.kind == "nccl" and not on_device(keys[0]._meta)):
        return None  # NCCL moves GPU memory: host chunks merge through one process
    parts = [(k, None if values is None else values[s]) for s, k in enumerate(keys)]
    sizes = tuple(tuple(int(c) for c in k.chunks[0]) for k in keys)
    return graph.on_ranks(parts, descending=spec.descending, backend=spec.backend, chunk=chunk, group=group,
                          presorted=Presorted(spec, sizes, None if values is None else np.dtype(values[0].dtype)))


@dataclass(frozen=True)
class Presorted:
    """How a rank makes a merge's runs (:mod:`gpusort.engine.collective`): an input's chunks joined and checked.

    ``sizes``: the chunk lengths of ``a`` and of ``b``; chunk ``i`` of the
    ranks' numbering is ``a``'s, then ``b``'s.  Each run is checked as
    :func:`_run` checks one; the joins between runs on different ranks are
    checked from every run's first and last keys (:meth:`check_joins`).
    """

    spec: _Merge
    sizes: tuple[tuple[int, ...], tuple[int, ...]]
    value_dtype: np.dtype | None = None

    def _where(self, chunk: int) -> tuple[int, int, int]:
        """(input, its chunk index, the position of the chunk's first key in that input)."""
        side = int(chunk >= len(self.sizes[0]))
        first = chunk - side * len(self.sizes[0])
        return side, first, sum(self.sizes[side][:first])

    def __call__(self, run: list[int], data: list) -> Pair:
        """The run of chunks ``run`` (``data``: their keys and values, interleaved), checked, as order keys."""
        side, first, start = self._where(run[0])
        values = [v for v in data[1::2] if v is not None]
        return _run(self.spec, side, first, list(self.sizes[side][first:first + len(run)]), start, False,
                    self.value_dtype, *data[0::2], *values)

    def check_joins(self, labels: Sequence[int], firsts: Sequence[Any], lasts: Sequence[Any]) -> None:
        """Raise where a run's first order key comes before the last of the run before it in its input.

        ``labels``: every run's first chunk, ascending; ``firsts`` and
        ``lasts``: host arrays holding each run's first and last order key
        (empty for an empty run).  Every rank raises alike.
        """
        before: list[Any] = [None, None]
        for label, first, last in zip(labels, firsts, lasts):
            if not len(last):
                continue
            side, _, start = self._where(label)
            if before[side] is not None and not in_order(before[side], first[0]):
                decoded = [order.decode(np.array([x]), self.spec.dtype, self.spec.descending, "float")
                           for x in (before[side], first[0])]
                _out_of_order(self.spec, side, start, *decoded)
            before[side] = last[0]


def _runs(spec: _Merge, keys: list[da.Array], values: list[da.Array] | None) -> graph.Runs:
    """Runs of consecutive chunks of each input (``a``'s first), each checked for order by the task that makes it.

    Chunks are batched as the sort batches them (:func:`gpusort.engine.graph.run_bytes`),
    so tiny chunks cost a task in all, and every run also reads the last
    chunk before it that holds a key, to check the join: together the runs
    check every neighbouring pair of each input.  Each run task depends on
    its chunks and one more, so the graph has ``O(p + q)`` run tasks and
    dependencies for ``p`` and ``q`` input chunks.
    """
    layout = spec.layout
    okey_bytes = spec.dtype.itemsize if layout is None else 8 * layout.words
    carried = (spec.dtype.itemsize if layout is not None else 0) + (0 if values is None else values[0].dtype.itemsize)
    element = okey_bytes + carried
    total = sum(int(k.shape[0]) for k in keys)
    target = graph.run_bytes(total * element, on_device(keys[0]._meta))
    name = "runs-" + tokenize("gpusort.front.sorted_merge", spec, keys, values, target)
    dsk: dict = {}
    lengths: list[int] = []
    for s, k in enumerate(keys):
        sizes = [int(c) for c in k.chunks[0]]
        starts = np.concatenate(([0], np.cumsum(sizes))).tolist()
        held = [c for c, size in enumerate(sizes) if size]
        kblocks = graph.block_inputs(k)
        vblocks = None if values is None else graph.block_inputs(values[s])
        for a, b in graph.task_groups(tuple(sizes), element, target):
            before = [c for c in held if c < a][-1:]  # the last chunk before the run that holds a key
            inputs = [kblocks[c] for c in before + list(range(a, b))]
            if vblocks is not None:
                inputs += vblocks[a:b]
            dsk[(name, len(lengths))] = (_run, spec, s, a, sizes[a:b], starts[a], bool(before),
                                         None if values is None else values[s].dtype, *inputs)
            lengths.append(starts[b] - starts[a])
    if layout is not None:
        okey_dtype = layout.dtype
        value_dtype = spec.dtype if values is None else np.dtype(np.uint8)
    else:
        okey_dtype = order.order_dtype(spec.dtype, "float")
        value_dtype = None if values is None else values[0].dtype
    deps = graph.read_by_key(keys + (values or []))
    meta = keys[0]._meta.real if layout is not None else keys[0]._meta  # the array type: cast quietly
    return graph.Runs(HighLevelGraph.from_collections(name, dsk, dependencies=deps), name, tuple(lengths),
                      okey_dtype, value_dtype, meta, element, "float")


def _run(spec: _Merge, side: int, first: int, sizes: list[int], start: int, after: bool, vdtype: np.dtype | None,
         *chunks: Any) -> Pair:
    """Consecutive chunks ``first, first + 1, …`` of input ``side`` (from position ``start``) as one run.

    ``chunks`` are the chunk before (when ``after``), the run's key chunks,
    then their values' chunks (of ``vdtype``), if any.  Each chunk's length
    and dtype is checked, and the order of every key, the join with the
    chunk before included; the run is its order keys and what they carry
    (:func:`_runs`).
    """
    before = chunks[0][-1:] if after else None
    parts = chunks[int(after):int(after) + len(sizes)]
    for c, (size, chunk) in enumerate(zip(sizes, parts)):
        _check_chunk(spec.names[side], first + c, size, spec.dtype, chunk)
    keys = joined(parts, spec.dtype)  # runs are read, never written: chunks cut from one array stay put
    okeys = spec.okeys(keys)
    pieces, encoded, at = [keys], [okeys], [start]
    if before is not None:
        pieces, encoded, at = [before, keys], [spec.okeys(before), okeys], [start - 1, start]
    _check_sorted(spec, side, pieces, encoded, at)
    vparts = chunks[int(after) + len(sizes):]
    for c, (size, chunk) in enumerate(zip(sizes, vparts)):
        _check_chunk(f"the values of {spec.names[side]}", first + c, size, vdtype, chunk)
    values = joined(vparts, vdtype) if vparts else None
    if order.is_composite(spec.dtype):  # composite keys do not decode: the keys travel as values, with theirs
        return okeys, keys if values is None else multikey.record_rows(keys, values)
    if spec.dtype.kind == "f":  # "tied" keys checked the order; "float" keys keep every bit through the merge
        okeys = order.encode(keys, spec.descending, "float")
    return okeys, values


def _check_chunk(name: str, c: int, size: int, dtype: np.dtype, chunk: Any) -> None:
    """The co-ranks trust the declared chunk lengths and dtypes: a chunk that loads others stops here."""
    if len(chunk) != size:
        raise ValueError(f"chunk {c} of {name} loaded {len(chunk)} elements, but its dask array declares "
                         f"{size}: fix the source of that chunk, or declare the array's real chunks")
    if not np.can_cast(chunk.dtype, dtype, "equiv"):
        raise ValueError(f"chunk {c} of {name} loaded dtype {chunk.dtype}, but its dask array declares {dtype}: "
                         "fix the source of that chunk, or declare the array's real dtype")


def _check_sorted(spec: _Merge, side: int, raw: list, okeys: list, at: list[int]) -> None:
    """A ``ValueError`` at the first position of these consecutive pieces whose key precedes its predecessor."""
    if not _descends(okeys):
        return
    for p, o in enumerate(okeys):
        if p and len(okeys[p - 1]) and len(o) and _first_descent(_concat([okeys[p - 1][-1:], o[:1]])):
            _out_of_order(spec, side, at[p], raw[p - 1][-1:], raw[p][:1])
        i = _first_descent(o)
        if i is not None:
            _out_of_order(spec, side, at[p] + i, raw[p][i - 1:i], raw[p][i:i + 1])


def _out_of_order(spec: _Merge, side: int, position: int, before: Any, here: Any) -> None:
    name = spec.names[side]
    direction = "descending" if spec.descending else "ascending"
    fix = f"gpusort.sort({name}{', descending=True' if spec.descending else ''})"
    here, before = (str(to_numpy(x)[0]) for x in (here, before))
    raise ValueError(f"{name} is not sorted ({direction}, NaN last): {name}[{position}] = {here} comes "
                     f"after {name}[{position - 1}] = {before}; sort it first, e.g. with {fix}")


def _concat(parts: list) -> Any:
    return namespace(parts[0]).concatenate(parts)


def _descends(okeys: list) -> bool:
    """Whether a key of these consecutive pieces precedes its predecessor.

    Each piece is asked of the backend of its memory (:meth:`gpusort.backends.Backend.is_sorted`:
    on a GPU one fused pass that reads each key once, where a comparison
    of shifted views wrote a mask as large as the keys and read it again);
    the joins between pieces are a comparison each.  Rows (complex keys)
    are answered by :func:`_first_descent` alone.
    """
    pieces = [o for o in okeys if len(o)]
    if not pieces:
        return False
    if pieces[0].ndim == 2:
        return True
    sorter = get_backend(backend_for(pieces[0]))
    if not all(sorter.is_sorted(o) for o in pieces):
        return True
    xp = namespace(pieces[0])
    joins = [xp.any(o[:1] < before[-1:]) for before, o in zip(pieces, pieces[1:])]
    return bool(xp.stack(joins).any()) if joins else False


def _first_descent(okeys: Any) -> int | None:
    """The first index whose order key is below its predecessor's (rows compared word by word), or ``None``."""
    if len(okeys) < 2:
        return None
    after, before = okeys[1:], okeys[:-1]
    if okeys.ndim == 1:
        below = after < before
    else:
        xp = namespace(okeys)
        below, equal = xp.zeros(len(after), bool), xp.ones(len(after), bool)
        for w in range(okeys.shape[1]):
            below |= equal & (after[:, w] < before[:, w])
            equal &= after[:, w] == before[:, w]
    i = int(below.argmax())
    return i + 1 if bool(below[i]) else None
