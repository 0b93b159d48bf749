"""The host dispatchers: sort and merge CuPy arrays with gpusort's kernels.

:func:`mergesort`, :func:`packed_argsort`, :func:`exact_sort`,
:func:`merge` and :func:`merge_tree` size the buffers, run the passes
(:mod:`gpusort.cuda.launch`) and keep the ping-pong parity.  Large
keys-only sorts begin with a bucket pass (:mod:`gpusort.cuda.buckets`).
``mergesort``'s ``segment=`` sorts many equal segments at once (the rows
of an N-D sort, padded by :mod:`gpusort.gpu` to
:func:`~gpusort.cuda.tuning.segment_length` with
:func:`~gpusort.cuda.tuning.last_key`).

They take contiguous 1-D CuPy arrays of the kernels' own types (checking
user input is :mod:`gpusort.gpu`'s job).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gpusort.arrays import join_into
from gpusort.cuda import tuning
from gpusort.cuda.tuning import NULL, TIE_CTAS, TIE_NT, TIE_VT, WORD, exact_word, pass_plan
from gpusort.cuda.build import Encoding, Kernels, Packing, encoding, kernels, packing
from gpusort.cuda.launch import Tiles, blocksort, merge_pass, merge_pass_four
from gpusort.cuda.buckets import bucket_pass


def mergesort(keys, values=None, *, descending: bool = False, positions: bool = False,
              overwrite_input: bool = False, segment: int | None = None):
    """Stable sort of ``keys`` (and ``values`` with them) into new arrays.

    ``keys`` is a contiguous 1-D CuPy array of a :data:`~gpusort.cuda.tuning.KEY_TYPES` dtype;
    ``values`` is ``None`` or a contiguous array of a :data:`~gpusort.cuda.tuning.VALUE_DTYPES`
    dtype and the same length.  With ``positions=True`` the values are the
    keys' positions (argsort), uint32 or uint64, made by the blocksort rather
    than read.  Returns ``(keys, values)``; ``values`` is ``None`` for a
    keys-only sort.

    ``overwrite_input=True`` lets the passes use the inputs' memory as one
    of their two ping-pong buffers (the result may be the input arrays):
    the sort then holds two copies of the data, not three, which is what
    lets the out-of-core path keep two steps on a GPU at once.

    ``segment`` (a :func:`~gpusort.cuda.tuning.segment_length`, ``nv * 2**m``, that divides the
    length) sorts every ``segment`` consecutive keys on their own: the
    blocksort's tiles never cross a segment, and a pass over runs of ``L``
    keys merges runs that start at multiples of ``2L`` (two-way) or ``4L``
    (four-way) together (kernels/merge_pass.cuh), so the merge levels that
    stay inside a segment are exactly the first ``m``; the sort stops there
    instead of at ``ceil(log2(n / nv))``.  Positions (``positions=True``)
    still count from the start of ``keys``.

    A keys-only sort of :data:`~gpusort.cuda.tuning.BUCKET_MIN_BYTES` or more without
    ``segment`` may begin with a bucket pass (:func:`~gpusort.cuda.buckets.bucket_pass`).
    Keys only, ``keys`` may also be a list of arrays of one dtype, sorted as
    their concatenation: the bucket pass reads them where they lie, so no
    joined copy is made (they are joined where it does not run).  They are
    never written.
    """
    import cupy

    parts = list(keys) if isinstance(keys, (list, tuple)) else None
    if parts is not None and (not parts or values is not None or positions or segment is not None):
        raise ValueError("mergesort sorts a list of key arrays keys only, without segment, and at least one: "
                         "join them first")
    n = keys.size if parts is None else sum(part.size for part in parts)
    dtype = keys.dtype if parts is None else parts[0].dtype
    if positions:
        values_dtype = np.dtype(np.uint32 if n < 2**32 else np.uint64)
    elif values is not None:
        values_dtype = values.dtype
    else:
        values_dtype = None
    k = kernels(dtype, values_dtype.itemsize if values_dtype else 0, descending)
    if segment is not None:
        span = segment // k.nv
        if segment % k.nv or span & (span - 1) or n % segment:
            raise ValueError(f"segment={segment} must be nv * 2**m (nv = {k.nv}) and divide the "
                             f"{n} keys: pad the segments to segment_length(length, {k.nv})")
    if parts is not None:
        # The sort's second buffer, made up front as the join it replaces was:
        # made mid-sort, from a UCX cluster's RMM pool, it cost more than the join.
        keys, overwrite_input = cupy.empty(n, dtype), True
    buckets = None
    if values_dtype is None and segment is None:
        # Reusing, the input's memory may take the second bucket pass's scatter.
        buckets = bucket_pass(k, keys if parts is None else parts, descending, dtype,
                              spare=keys if overwrite_input else None)
    if parts is not None and not buckets:  # the blocksort reads them joined, by the copy engine
        join_into(keys, parts)
    tiles = buckets.tiles if buckets else Tiles.whole(n, k.nv, segment)
    four_way = k.merge_four is not None and n >= tuning.threshold("FOUR_WAY_MIN_KEYS")
    plan = pass_plan(tiles.levels, four_way=four_way)
    # Ping-pong parity: every merge pass reads one buffer and writes the other,
    # so the blocksort writes buffer `len(plan) % 2` and the last pass lands
    # in buffer 0, which is returned.
    passes = len(plan)
    src = passes % 2

    def buffers(given, dtype, first=None, free=None):
        """The ping-pong buffers; ``first``, where given, is the one the blocksort writes.

        The other is ``free`` (memory the bucket pass let go of), or the
        input where it may be reused, or new memory.
        """
        bufs = [None] * (2 if passes else 1)
        bufs[src] = first if first is not None else cupy.empty(n, dtype)
        if passes:
            if free is None and overwrite_input:
                free = given
            bufs[1 - src] = free if free is not None else cupy.empty(n, dtype)
        return bufs

    key_bufs = buffers(keys, dtype, *((buckets.keys, buckets.free) if buckets else ()))
    value_bufs = buffers(values, values_dtype) if values_dtype else [NULL, NULL]
    if buckets:
        blocksort(k, key_bufs[src], NULL, key_bufs[src], NULL, tiles)  # in place, bucket by bucket
    elif n:
        blocksort(k, keys, NULL if values is None else values, key_bufs[src], value_bufs[src], tiles)
    _merge_levels(k, plan, key_bufs, value_bufs, tiles)
    return key_bufs[0], value_bufs[0] if values_dtype else None


def packed_argsort(keys, *, descending: bool = False):
    """int64 positions that sort 1-D ``keys`` stably, by a keys-only sort of packed words.

    ``keys``: a contiguous CuPy array of a :func:`~gpusort.cuda.tuning.packs` dtype, fewer than
    2**32 of them.  Each key's radix word and its position are packed into
    one :data:`~gpusort.cuda.tuning.WORD` as the first kernel loads the keys (the blocksort, or
    the scatter of a bucket pass), and the last kernel stores the positions
    (kernels/packed_positions.cuh): no pass of its own packs or unpacks.
    Holds two arrays of ``keys.size`` words; the positions are returned in
    the memory of one of them.
    """
    n = keys.size
    if n >= 2**32:
        raise ValueError(f"packed_argsort packs positions into 32 bits: {n} keys are too many; "
                         "sort them with mergesort(keys, positions=True)")
    k, pack = kernels(WORD, 0, False), packing(keys.dtype, descending)
    last = _Last(pack.blocksort_positions, k.blocksort_positions, k.merge_positions, k.merge_four_positions)
    return _sort_words(keys, descending, k, pack, WORD, last).view(np.int64)


def exact_sort(keys, *, descending: bool = False):
    """1-D :data:`~gpusort.cuda.tuning.EXACT_FLOATS` ``keys`` sorted stably (NaN last), by their exact order keys, into new memory.

    A keys-only sort of unsigned integers (kernels/exact_keys.cuh): the
    first kernel (the blocksort, or a bucket pass's count and the blocksort
    after its scatter) loads each float as its exact key, the last stores it
    back as the float's bits, so no pass of its own encodes or decodes.
    Exact keys order what the float order ties: -0.0 before 0.0 (after it,
    descending) and NaNs by their bits.  ``kernel_tie_bounds`` finds these
    groups, and where one holds more than one bit pattern, two more kernels
    rewrite it with the input's members in input order, which makes the sort
    stable (kernels/kernel_ties.cuh).  The host reads back nothing of that;
    a bucket pass's summary is the sort's only read.
    """
    import cupy

    word = exact_word(keys.dtype)
    k, enc = kernels(word, 0, False), encoding(keys.dtype, descending)
    last = _Last(enc.blocksort_bits, enc.blocksort_bits, enc.merge_bits, None)
    out = _sort_words(keys, descending, k, enc, word, last).view(keys.dtype)
    n = out.size
    if n:
        ties = cupy.empty(5, np.int64)
        enc.tie_bounds((1,), (96,), (out, np.int64(n), ties))
        tile = TIE_NT * TIE_VT
        span = tile * -(-n // (tile * TIE_CTAS))
        ctas = -(-n // span)
        counts = cupy.empty(2 * ctas, np.int32)
        enc.tie_count((ctas,), (TIE_NT,), (keys, np.int64(n), np.int64(span), ties, counts))
        enc.tie_gather((ctas,), (TIE_NT,), (keys, np.int64(n), np.int64(span), ties, counts, out))
    return out


class _Last(NamedTuple):
    """The kernels that may end a sort of words and store its result instead of words (:func:`_sort_words`)."""

    blocksort: Any  # of keys, when one tile is the whole sort
    bucket_blocksort: Any  # in place, of what the scatter wrote, when every bucket is one tile
    merge: Any
    merge_four: Any  # None: the sort merges two ways only


def _sort_words(keys, descending: bool, k: Kernels, first: Packing | Encoding, word: np.dtype, last: _Last):
    """A keys-only sort of ``keys`` as words of ``word``, into the memory it returns (words: the caller views it).

    ``first``'s kernels load keys as words (its bucket pass's scatter, or the
    blocksort after it, or its blocksort), ``k`` sorts the words, and
    whichever of ``last`` runs last stores the result instead of words.
    Holds two arrays of ``keys.size`` words.
    """
    import cupy

    n = keys.size
    # A packed argsort's count compares the keys in their own order (a bucket
    # of keys is the same bucket of their words), a float sort's their exact
    # keys (_splitters).
    buckets = bucket_pass(first, keys, descending, word)  # first.nv is the word module's
    tiles = buckets.tiles if buckets else Tiles.whole(n, k.nv)
    four_way = last.merge_four is not None and n >= tuning.threshold("FOUR_WAY_MIN_KEYS")
    plan = pass_plan(tiles.levels, four_way=four_way)
    # Ping-pong parity as in mergesort: the last pass lands in buffer 0, returned.
    src = len(plan) % 2
    bufs = [None] * (2 if plan else 1)
    bufs[src] = buckets.keys if buckets else cupy.empty(n, word)
    if plan:  # memory the bucket pass let go of, or new
        bufs[1 - src] = buckets.free if buckets and buckets.free is not None else cupy.empty(n, word)
    if buckets:  # in place, bucket by bucket, from words, or from floats' bits (Encoding.scatters_words)
        blocksort(k if first.scatters_words else first, bufs[src], NULL, bufs[src], NULL, tiles,
                  kernel=None if plan else last.bucket_blocksort)
    elif n:
        blocksort(first, keys, NULL, bufs[src], NULL, tiles, kernel=None if plan else last.blocksort)
    _merge_levels(k, plan, bufs, [NULL, NULL], tiles, last=(last.merge, last.merge_four))
    return bufs[0]


def _merge_levels(k: Kernels, plan: list[int], key_bufs, value_bufs, tiles: Tiles, last: tuple = (None, None)) -> None:
    """The merge passes of ``plan`` over sorted ``tiles`` in buffer ``len(plan) % 2``, ping-ponging to buffer 0.

    ``last``: the two-way and four-way merges for the last pass, where it
    stores something other than keys (:func:`_sort_words`); ``None``: ``k``'s.
    """
    import cupy

    if not plan:
        return
    n = key_bufs[0].size
    # The partitions: per tile, one int64 for a two-way pass, four for a four-way one.
    splits = cupy.empty((4 if 4 in plan else 1) * tiles.count, np.int64)
    src, run = len(plan) % 2, k.nv
    for index, ways in enumerate(plan):
        dst = 1 - src
        two, four = last if index == len(plan) - 1 else (None, None)
        if ways == 4:
            merge_pass_four(k, key_bufs[src], run, n, splits, key_bufs[dst], tiles, kernel=four)
        else:
            merge_pass(k, key_bufs[src], value_bufs[src], _at(key_bufs[src], run), _at(value_bufs[src], run),
                       run, n, n - run, splits, key_bufs[dst], value_bufs[dst], tiles, kernel=two)
        src, run = dst, ways * run


def merge(a_keys, a_values, b_keys, b_values, *, descending: bool = False, out=None):
    """Stable merge of two sorted arrays (``a``'s element first on ties).

    Keys and values as in :func:`mergesort`; ``a_values`` and ``b_values``
    are both ``None`` or both arrays of one dtype.  Writes into ``out``
    (``(keys, values)`` of the total length, not overlapping the inputs) or
    new arrays; returns ``(keys, values)``.
    """
    import cupy

    na, nb = a_keys.size, b_keys.size
    n = na + nb
    has_values = a_values is not None
    k = kernels(a_keys.dtype, a_values.dtype.itemsize if has_values else 0, descending)
    if out is None:
        out = cupy.empty(n, a_keys.dtype), cupy.empty(n, a_values.dtype) if has_values else None
    out_keys, out_values = out
    if n:
        tiles = Tiles.whole(n, k.nv)
        merge_pass(k, a_keys, a_values if has_values else NULL, b_keys,
                   b_values if has_values else NULL, max(na, nb), na, nb,
                   cupy.empty(tiles.count, np.int64), out_keys, out_values if has_values else NULL, tiles)
    return out_keys, out_values


def merge_tree(runs, *, descending: bool = False, scratch=None):
    """Stable merge of sorted ``runs`` (``(keys, values)`` pairs, ``values`` ``None`` or all arrays).

    Pairwise merges of neighbouring runs, level by level (ceil(log2 k)
    passes), ping-ponging between two buffers of the total length: each
    level writes its runs at the offsets they had in the level before, so a
    level is one buffer.  ``scratch`` is the second buffer, ``(keys,
    values)``: pass the runs' own concatenation when the runs are its
    consecutive slices (their memory is free once the first level has read
    them), and the merge holds two copies of the data instead of three.
    Without it the result is always new memory.
    """
    import cupy

    runs = [run for run in runs if run[0].size] or list(runs[:1])
    keys0, values0 = runs[0]
    n = sum(k.size for k, _ in runs)
    if len(runs) == 1:
        if scratch is not None:
            return runs[0]
        return keys0.copy(), None if values0 is None else values0.copy()

    def new():
        return cupy.empty(n, keys0.dtype), None if values0 is None else cupy.empty(n, values0.dtype)

    buffers = [new(), scratch if scratch is not None else new()]
    level, write = runs, 0
    while len(level) > 1:
        out_keys, out_values = buffers[write]
        merged, at = [], 0
        for i in range(0, len(level), 2):
            pair = level[i:i + 2]
            size = sum(k.size for k, _ in pair)
            into = (out_keys[at:at + size], None if out_values is None else out_values[at:at + size])
            if len(pair) == 2:
                merge(*pair[0], *pair[1], descending=descending, out=into)
            else:  # the odd run out moves to the same offset of the other buffer
                for dst, src in zip(into, pair[0]):
                    if src is not None:
                        dst[...] = src
            merged.append(into)
            at += size
        level, write = merged, 1 - write
    return level[0]


def _at(array, start: int):
    """A pointer to ``array[start]`` (the null pointer of a keys-only sort stays null).

    Not a view: making one costs microseconds of host time a merge pass,
    which small sorts, bound by launching, feel.
    """
    return array if array is NULL else np.uint64(array.data.ptr + start * array.itemsize)
