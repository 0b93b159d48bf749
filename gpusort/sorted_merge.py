"""Merging two sorted Dask arrays: Merge Path over chunks, with exactly balanced output chunks.

Merge Path (Green, McColl, Bader 2012; Odeh et al. 2012) cuts the merge of
sorted ``a`` and ``b`` by output rank: the first ``r`` merged elements are
the first ``i`` of ``a`` and the first ``r - i`` of ``b`` for one co-rank
``i``.  Output chunk ``j`` owns ranks ``[r_j, r_{j+1})`` and merges exactly
``a[i_j:i_{j+1}]`` and ``b[r_j - i_j:r_{j+1} - i_{j+1}]``; no element is
read twice and no output chunk waits for another.  Ties take ``a``'s
elements first, each input's in its order: the strict order ``(key, input,
position)`` of :mod:`gpusort.corank` with two runs.

The co-ranks come from samples, as the sort's splitters do (constant rounds,
whatever the number of chunks): every chunk publishes every ``g``-th order
key of its input (``samples-``), one task brackets every co-rank in a window
of at most ``5g`` elements per boundary (``plan-``,
:func:`gpusort.corank.plan_windows`), every chunk cuts its part of the
windows (``windows-``), and one task takes the exact co-ranks from them
(``splits-``, :func:`gpusort.corank.refine_splits`).  That is ``n/g`` keys
of samples and ``5g`` per boundary, about ``2·sqrt(5·n·J)`` keys for ``J``
output chunks, in five rounds.  A binary search over the inputs would need
``log n`` rounds of tasks, and one over chunk ends only brackets a co-rank
within whole chunks.

Which chunks a merge reads is data-dependent, but Merge Path bounds it: the
co-rank of ``r`` lies in ``[r - len(b), r]``, so output chunk ``j`` depends
only on the chunks of ``a`` that meet ``[r_j - len(b) - 1, r_{j+1})`` (and
the same for ``b``).  A small ``b`` merged into a large ``a`` reads one or
two chunks of ``a`` per output chunk; two inputs of equal length, up to half
the chunks of each.  The graph has ``O(p + q + J)`` tasks for ``p`` and
``q`` input chunks.  Where the chunks live in several worker processes,
each worker fetches the chunks its merges read (at most every chunk once).

Order keys are :func:`gpusort.order.encode`'s scheme ``"tied"``: ``-0.0``
ties with ``0.0`` and every NaN with every other NaN, as NumPy compares
them, so a merge of sorted inputs never reorders a tie, and integer keys
merge as integers.  Those two tie classes are the only equal order keys
with different bits: each merge writes them back from its inputs, ``a``'s
then ``b``'s, so the output holds the inputs' exact bits in the stable
order.  Complex keys merge as composite order keys (:mod:`gpusort.multikey`)
and carry their positions, through which the keys and values are gathered.

Nothing checks up front that the inputs are sorted: each merge checks the
order keys it reads anyway, and one element before them, so that together
the merges check every neighbouring pair of each input, chunk ends
included, and the first one out of order raises a ``ValueError``.  Splits
over unsorted inputs stay a valid cut of both
(:func:`gpusort.corank.merge_path_splits`), so every element is checked.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from gpusort import composite, corank, multikey, order
from gpusort.api import SortOptions, as_dask
from gpusort.arrays import every, is_cupy, namespace, to_numpy
from gpusort.backends import BackendSpec, get_backend


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
    No sort and no pass over the data besides the merge itself: the
    co-ranks come from samples and windows of the order keys, and each
    merge checks the order of what it reads (see :mod:`gpusort.sorted_merge`).
    Computing only some output chunks checks only what those read.

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
        return multikey.layout_of([self.dtype], self.descending) if self.dtype.kind == "c" else None

    def okeys(self, keys: Any) -> Any:
        """Order keys of scheme ``"tied"``: 1-D, or ``(n, words)`` rows for complex keys."""
        if self.dtype.kind == "c":
            return multikey.pack(self.layout, self.descending, keys)
        return order.encode(keys, self.descending, "tied")

    def tie_classes(self) -> np.ndarray:
        """The order keys of float keys' two classes of equal keys with other bits: zeros and NaNs."""
        return order.encode(np.array([0.0, np.nan], self.dtype), self.descending, "tied")


def _merge_arrays(keys, values, options: SortOptions):
    """merge and merge_by_key: ``keys`` and ``values`` are ``(array, argument name)`` pairs, ``a``'s first."""
    names = (keys[0][1], keys[1][1])
    keys = [_sorted_input(x, name) for x, name in keys]
    (a, b), (name_a, name_b) = keys, names
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {a.dtype} but {name_b} has dtype {b.dtype}; merging needs one "
                        f"dtype: cast one first (e.g. {name_b}.astype({name_a}.dtype)), then sort it if the cast "
                        "may reorder it")
    if is_cupy(a._meta) != is_cupy(b._meta):
        host, device = (name_b, name_a) if is_cupy(a._meta) else (name_a, name_b)
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
    order.check_key_dtype(x.dtype, name, complex_ok=True)
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
    """The merge's tasks: samples, plan, windows and splits (when there are inner boundaries), then merges."""
    lengths = [int(k.shape[0]) for k in keys]
    ranks = corank.output_ranks(sum(lengths), chunk)
    inner = ranks[1:-1]
    g = corank.sample_stride(sum(lengths), 2, len(inner))
    token = tokenize("gpusort.sorted_merge", spec, keys, values, chunk, g)
    starts = [np.concatenate(([0], np.cumsum(k.chunks[0]))).tolist() for k in keys]
    dsk: dict = {}
    if len(inner):
        samples, plan, windows = "samples-" + token, ("plan-" + token,), "windows-" + token
        for s, k in enumerate(keys):
            for c in range(k.numblocks[0]):
                dsk[(samples, s, c)] = (_samples, spec, starts[s][c], g, (k.name, c))
                dsk[(windows, s, c)] = (_windows, spec, s, starts[s][c], plan, (k.name, c))
        per_side = [[[(layer, s, c) for c in range(k.numblocks[0])] for s, k in enumerate(keys)]
                    for layer in (samples, windows)]
        dsk[plan] = (_plan, g, lengths, inner, *per_side[0])
        splits = ("splits-" + token,)
        dsk[splits] = (_splits, ranks, lengths, plan, *per_side[1])
    else:  # one output chunk: it takes everything
        splits = corank.merge_path_splits(ranks, np.array([0, lengths[0]]), *lengths)
    name = "merge-" + token
    for j in range(len(ranks) - 1):
        reads, inputs = [], []
        for s, k in enumerate(keys):
            # Merge Path's bound on the co-ranks of r_j and r_{j+1}, and one element before (the join's check).
            low, high = max(ranks[j] - lengths[1 - s] - 1, 0), min(ranks[j + 1], lengths[s])
            for c, size in enumerate(k.chunks[0]):
                if size and starts[s][c] < high and starts[s][c] + size > low:
                    reads.append((s, c, starts[s][c], int(size)))
                    inputs += [(k.name, c)] + ([] if values is None else [(values[s].name, c)])
        # The chunks' places go as one array, which Dask passes as it is: in
        # nested lists it would look for keys in every number.
        dsk[(name, j)] = (_merge, spec, splits, j, np.array(reads, dtype=np.int64).reshape(-1, 4), *inputs)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=keys + (values or []))
    chunks = (tuple(int(c) for c in np.diff(ranks)),)
    if values is None:
        return da.Array(graph, name, chunks, meta=_meta(keys[0])), None
    fields = []
    for field, (label, like) in enumerate((("merged", keys[0]), ("merged-values", values[0]))):
        out = f"{label}-{token}"
        layer = {(out, j): (operator.getitem, (name, j), field) for j in range(len(ranks) - 1)}
        fields.append(da.Array(HighLevelGraph({**graph.layers, out: layer}, {**graph.dependencies, out: {name}}),
                               out, chunks, meta=_meta(like)))
    return tuple(fields)


def _meta(x: da.Array) -> Any:
    return meta_from_array(x._meta, ndim=1, dtype=x.dtype)


def _samples(spec: _Merge, start: int, g: int, chunk: Any) -> np.ndarray:
    """The order keys at this input's positions ``0, g, 2g, ...`` that fall in this chunk (from ``start``)."""
    return np.ascontiguousarray(spec.okeys(every(chunk, g, -start % g)))


def _plan(g: int, lengths: list[int], inner: np.ndarray, samples_a: list, samples_b: list):
    return corank.plan_windows([np.concatenate(samples_a), np.concatenate(samples_b)], lengths, inner, g)


def _windows(spec: _Merge, side: int, start: int, plan: tuple[np.ndarray, np.ndarray], chunk: Any) -> list:
    """This chunk's part of every boundary's window on its input: order keys, one array per boundary."""
    lo, hi = (np.clip(bound[:, side] - start, 0, len(chunk)) for bound in plan)
    return [to_numpy(spec.okeys(chunk[a:b])) for a, b in zip(lo.tolist(), hi.tolist())]


def _splits(ranks: np.ndarray, lengths: list[int], plan, windows_a: list, windows_b: list) -> np.ndarray:
    """The exact co-rank of every output boundary, as two-way split vectors (rows ``0 … J``)."""
    windows = [np.concatenate([part[j] for j in range(len(ranks) - 2) for part in side])
               for side in (windows_a, windows_b)]
    found = corank.split_vectors(lengths, ranks[1:-1], plan, windows)
    return corank.merge_path_splits(ranks, found[:, 0], *lengths)


def _merge(spec: _Merge, splits: np.ndarray, j: int, reads: np.ndarray, *inputs: Any) -> Any:
    """Output chunk ``j``: its slices of both inputs, checked for order, merged and decoded.

    ``reads`` has a row ``(side, chunk, offset, size)`` for every chunk of
    ``inputs`` (each followed by its values' chunk, if any).
    """
    step = len(inputs) // len(reads) if len(reads) else 1  # 2: each chunk is followed by its values' chunk
    sides: list[list] = [[], []]
    for (s, c, offset, size), at in zip(reads.tolist(), range(0, len(inputs), step)):
        sides[s].append((c, offset, size, inputs[at], inputs[at + 1] if step == 2 else None))
    keys, values, okeys = [], [], []
    for s, chunks in enumerate(sides):
        start, stop = int(splits[j, s]), int(splits[j + 1, s])
        first = max(start - 1, 0)  # the element before: its join with this slice is checked here
        raw, vals, at = [], [], []
        for c, offset, size, chunk, vchunk in chunks:
            _check_length(spec.names[s], c, size, chunk)
            a, b = max(first, offset) - offset, min(stop, offset + size) - offset
            if a < b:
                raw.append(chunk[a:b])
                vals.append(None if vchunk is None else vchunk[a:b])
                at.append(offset + a)
        encoded = [spec.okeys(x) for x in raw]
        _check_sorted(spec, s, raw, encoded, at)
        if first < start:
            raw[0], vals[0], encoded[0] = raw[0][1:], None if vals[0] is None else vals[0][1:], encoded[0][1:]
        keys += raw
        values += vals
        okeys += encoded
    backend = get_backend(spec.backend)
    carried = values[0] is not None
    if spec.dtype.kind == "c":  # composite keys do not decode: carry positions, gather keys and values
        xp = namespace(keys[0])
        starts = np.cumsum([0] + [len(k) for k in keys]).tolist()
        _, positions = backend.merge_runs([(k, xp.arange(a, a + len(k), dtype=np.int64))
                                           for k, a in zip(okeys, starts)])
        # concatenate would make big-endian dtypes native: keep the declared ones
        merged = xp.concatenate(keys, dtype=spec.dtype)[positions]
        return (merged, xp.concatenate(values, dtype=values[0].dtype)[positions]) if carried else merged
    merged, merged_values = backend.merge_runs(list(zip(okeys, values)))
    merged = order.decode(merged, spec.dtype, spec.descending, "tied")
    if spec.dtype.kind == "f":
        _restore_ties(spec, backend, merged, okeys, keys)
    return (merged, merged_values) if carried else merged


def _restore_ties(spec: _Merge, backend: Any, merged: Any, okeys: list, keys: list) -> None:
    """Write back the exact bits of the zeros and NaNs: each class's run, the pieces' in merge order."""
    bits = np.dtype(f"u{spec.dtype.itemsize}")
    xp = namespace(merged)
    for tie in spec.tie_classes():
        needle = np.array([tie])
        lo = hi = 0
        parts = []
        for o, k in zip(okeys, keys):
            left, right = (int(backend.searchsorted(o, needle, side)[0]) for side in ("left", "right"))
            lo, hi = lo + left, hi + right
            parts.append(k[left:right].view(bits))  # bits: concatenate would swap big-endian floats to native
        if hi > lo:  # equal order keys: the merged run of the class is the pieces' runs, in order
            merged.view(bits)[lo:hi] = xp.concatenate(parts)


def _check_length(name: str, c: int, size: int, chunk: Any) -> None:
    """The co-ranks trust the declared chunk lengths: a chunk that loads another length stops here."""
    if len(chunk) != size:
        raise ValueError(f"chunk {c} of {name} loaded {len(chunk)} elements, but its dask array declares "
                         f"{size}: fix the source of that chunk, or declare the array's real chunks")


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
    """Whether a key of these consecutive pieces precedes its predecessor, asked of the device once.

    Each question about a piece of GPU memory waits for the device; the
    answers stay there until all of them are asked.  Rows (complex keys)
    are answered by :func:`_first_descent` alone.
    """
    pieces = [o for o in okeys if len(o)]
    if not pieces:
        return False
    if pieces[0].ndim == 2:
        return True
    xp = namespace(pieces[0])
    found = [xp.any(o[1:] < o[:-1]) for o in pieces]
    found += [xp.any(o[:1] < before[-1:]) for before, o in zip(pieces, pieces[1:])]
    return bool(xp.stack(found).any())


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
