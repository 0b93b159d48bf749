"""The bucket pass: sample sort's partition, which large keys-only sorts begin with.

Keys split into :data:`~gpusort.cuda.tuning.BUCKETS` buckets by sampled
splitters, and the blocksort and merge passes then sort every bucket on
its own (:class:`~gpusort.cuda.launch.Tiles`), in fewer merge levels.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpusort.cuda import tuning
from gpusort.cuda.tuning import (
    BUCKETS, BUCKET_COUNT_VT, BUCKET_CTAS, BUCKET_SAMPLE, BUCKET_VT, NULL, SAMPLE_FENCE, SPLITTERS_NT,
    exact_word, merge_passes,
)
from gpusort.cuda.build import Encoding, Kernels, Packing, kernels
from gpusort.cuda.launch import Tiles, blocksort, gather_rows


def _splitters(k: Kernels | Packing | Encoding, sample, descending: bool):
    """A bucket pass's splitters from its ``sample`` of ``BUCKETS * BUCKET_SAMPLE`` keys, as its count compares them.

    Returns :data:`~gpusort.cuda.tuning.BUCKETS` keys, every :data:`~gpusort.cuda.tuning.BUCKET_SAMPLE`-th of the
    sample's stable sort (the first is its least key, no splitter).  The
    blocksort sorts the sample's tiles and ``sample_splitters`` finds each
    key's place in their merge (kernels/kernel_splitters.cuh): two launches
    where merging the tiles took ten.  An :class:`~gpusort.cuda.build.Encoding`'s count compares
    exact keys, so its own blocksort loads the sample as exact keys; other
    counts compare keys in their own order, which the keys' own module sorts.
    """
    import cupy

    exact = isinstance(k, Encoding)
    first = k if exact else kernels(sample.dtype, 0, descending)
    n = sample.size
    sorted_tiles = cupy.empty(n, exact_word(sample.dtype) if exact else sample.dtype)
    blocksort(first, sample, NULL, sorted_tiles, NULL, Tiles.whole(n, first.nv))
    splitters = cupy.empty(BUCKETS, sorted_tiles.dtype)
    k.sample_splitters((-(-n // SPLITTERS_NT),), (SPLITTERS_NT,),
                       (sorted_tiles, np.int64(n), np.int64(first.nv), np.int64(BUCKET_SAMPLE), splitters),
                       shared_mem=-(-n // SAMPLE_FENCE) * sorted_tiles.itemsize)
    return splitters


def _sample(k: Kernels | Packing | Encoding, parts: list, stride: int, count: int):
    """Keys ``stride // 2 + i * stride`` (``i < count``) of the parts end to end, gathered in one launch (a row a part)."""
    import cupy

    sources, starts, counts = [], [], []
    taken, first, at = 0, stride // 2, 0  # first: the next sampled key; at: the part's first key
    for part in parts:
        if taken == count:
            break
        if first < at + part.size:
            c = min(count - taken, -(-(at + part.size - first) // stride))
            sources.append(part), starts.append(first - at), counts.append(c)
            taken, first = taken + c, first + c * stride
        at += part.size
    return gather_rows(k, sources, starts, stride, counts, cupy.empty(count, parts[0].dtype))


def _span_length(n: int) -> int:
    """Keys a CTA of a pass over ``n`` keys counts and scatters: whole tiles of both, about BUCKET_CTAS spans in all."""
    tile = BUCKETS * math.lcm(BUCKET_COUNT_VT, *BUCKET_VT.values())  # the scatter's and the count's tiles divide it
    return tile * -(-n // (tile * BUCKET_CTAS))


def cut_spans(starts: np.ndarray, ends: np.ndarray, span: int) -> tuple[np.ndarray, ...]:
    """Ranges ``[starts[r], ends[r])`` cut into CTA spans of ``span`` keys, each range's last one short.

    Returns each span's range, first key and past-the-last key, and each
    range's first span (one more entry: the spans in all).  An empty range
    has no span.

    Examples
    --------
    >>> owner, begins, ends, first = cut_spans(np.array([0, 5, 5]), np.array([5, 5, 12]), 4)
    >>> owner.tolist(), begins.tolist(), ends.tolist(), first.tolist()
    ([0, 0, 2, 2], [0, 4, 5, 9], [4, 5, 9, 12], [0, 2, 2, 4])
    """
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    per = -(-(ends - starts) // span)
    first = np.concatenate(([0], np.cumsum(per))).astype(np.int64)
    owner = np.repeat(np.arange(starts.size, dtype=np.int64), per)
    begins = starts[owner] + (np.arange(owner.size, dtype=np.int64) - first[owner]) * span
    return owner, begins, np.minimum(begins + span, ends[owner]), first


def _spans(parts: list, span: int):
    """The bucket pass's CTAs' ``bucket_span`` table (kernels/block_buckets.cuh) over ``parts`` end to end: spans within a part."""
    import cupy

    sizes = np.array([part.size for part in parts], np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    owner, begins, ends, _ = cut_spans(starts, starts + sizes, span)
    # Where key 0 would lie in each part's array (modulo 2**64): indices stay the input's own.
    bases = np.array([(part.data.ptr - int(at) * part.itemsize) % 2**64 for part, at in zip(parts, starts)], np.uint64)
    return cupy.asarray(span_rows(bases[owner], begins, ends))


def span_rows(bases: Any, begins: np.ndarray, ends: np.ndarray, segments: Any = 0, firsts: Any = 0) -> np.ndarray:
    """``bucket_span`` rows as four int64 words: the base address (uint64), begin, end, and the segment and its first span as two int32."""
    rows = np.empty((begins.size, 4), np.int64)
    rows[:, 0] = np.asarray(bases, np.uint64).view(np.int64)
    rows[:, 1], rows[:, 2] = begins, ends
    rows[:, 3] = np.asarray(segments, np.int64) + (np.asarray(firsts, np.int64) << 32)  # little-endian: segment, first
    return rows


@dataclass(frozen=True)
class Buckets:
    """A bucket pass done by :func:`bucket_pass`: the keys grouped by bucket, and where the buckets lie."""

    tiles: Tiles
    keys: Any  # the keys (or packed words) scattered bucket by bucket, each bucket in input order
    splitters: Any  # BUCKETS - 1 sampled keys as the count compares them, in order (_splitters)
    #: Sub-buckets (:func:`_split_buckets`): bucket b's BUCKETS - 1 splitters are
    #: row b of this (BUCKETS, BUCKETS - 1) array, and the tiles are the
    #: sub-buckets', BUCKETS a bucket; None: one pass.
    sub_splitters: Any = None
    #: Memory of as many keys that the sort may use as it likes: the caller's
    #: ``spare`` that the pass did not write, or the first pass's output once
    #: the second wrote into the spare (or into new memory); None: none.
    free: Any = None


#: int32 fields of a bucket pass's summary (kernels/kernel_buckets.cuh,
#: bucket_summary): tiles, merge levels, whether the scatter ran, and the
#: bases' ticket, which the host reads back with the rest and ignores.
_SUMMARY_FIELDS = 4


def bucket_pass(k: Kernels | Packing | Encoding, keys, descending: bool, out_dtype: np.dtype,
                spare: Any = None) -> Buckets | None:
    """``keys`` scattered into buckets for a keys-only sort into tiles of ``k.nv``, or ``None`` where that does not pay.

    ``keys``: a contiguous 1-D CuPy array, or a list of them, which the pass
    reads where they lie as if end to end (a task's chunks: no joined copy).

    Sample sort's partition.  Every ``n / (BUCKETS * BUCKET_SAMPLE)``-th
    key is sampled; every :data:`~gpusort.cuda.tuning.BUCKET_SAMPLE`-th key of the sample's sort
    is a splitter (:func:`_splitters`), and a key's bucket is how many
    splitters it does not precede (kernels/bucket_search.cuh).  Buckets are
    ranges of the order, so sorting each on its own sorts the whole, in
    ``log2`` of the largest bucket's tiles merge levels instead of the whole
    sort's: eight fewer for evenly spread keys.  The count compares what
    ``k`` loads.  The scatter writes ``out_dtype`` keys (through ``k``'s
    load policy: a packed argsort's words; a float sort's keep their bits)
    into new memory, and runs only where it saves
    :data:`~gpusort.cuda.tuning.BUCKET_LEVELS_SAVED` levels (keys of a few values, or all equal,
    fill one bucket and save none).

    The kernels decide that themselves (kernels/kernel_buckets.cuh): the
    host launches every step, the scatter included, and then reads back the
    summary (tiles, levels, scatter or not: :func:`_read_summary`) while the
    scatter runs, so the GPU never waits on that read.  ``None`` also below
    :data:`~gpusort.cuda.tuning.BUCKET_MIN_BYTES` of ``out_dtype`` (or four samples).

    Buckets that still take :data:`~gpusort.cuda.tuning.SUBBUCKET_MIN_LEVELS` merge levels or more
    are split again, each into BUCKETS sub-buckets (:func:`_split_buckets`),
    written into ``spare`` (a CuPy array of ``n`` ``out_dtype`` keys the
    caller no longer needs) where given.
    """
    import cupy

    parts = [part for part in (keys if isinstance(keys, (list, tuple)) else [keys]) if part.size]
    n = sum(part.size for part in parts)
    sample_size = BUCKETS * BUCKET_SAMPLE
    small = n * np.dtype(out_dtype).itemsize < tuning.threshold("BUCKET_MIN_BYTES") or n < 4 * sample_size
    if small or k.bucket_count is None:
        return None
    stride = n // sample_size
    splitters = _splitters(k, _sample(k, parts, stride, sample_size), descending)

    span = _span_length(n)
    # Where the CTAs read: one array's spans they find themselves; several arrays' come as a table.
    at = (NULL, parts[0]) if len(parts) == 1 else (_spans(parts, span), NULL)
    at += (np.int64(n), np.int64(span))
    ctas = -(-n // span) if len(parts) == 1 else len(at[0])
    counts = cupy.empty((BUCKETS, ctas), np.int32)
    buckets = cupy.empty(n, np.uint8)
    summary = cupy.empty(_SUMMARY_FIELDS, np.int32)
    k.bucket_count((ctas,), (BUCKETS,), (*at, splitters, np.int64(1), np.int64(0), counts, buckets, summary))
    bases, totals = cupy.empty((BUCKETS, ctas), np.int64), cupy.empty(BUCKETS, np.int64)
    offsets, first_tile = cupy.empty(BUCKETS + 1, np.int64), cupy.empty(BUCKETS + 1, np.int32)
    max_levels = np.int32(merge_passes(n, k.nv) - tuning.threshold("BUCKET_LEVELS_SAVED"))
    k.bucket_bases((BUCKETS,), (BUCKETS,), (counts, np.int64(ctas), bases, totals, np.int64(k.nv), max_levels,
                                            offsets, first_tile, summary))
    tabled = cupy.cuda.Event(disable_timing=True)
    tabled.record()
    tile_bucket = cupy.empty(-(-n // k.nv) + BUCKETS, np.int32)  # tiles: at most one partial tile a bucket
    out = cupy.empty(n, out_dtype)
    k.bucket_scatter((ctas,), (BUCKETS,), (*at, buckets, bases, offsets, summary, first_tile, tile_bucket, out,
                                           np.int32(1)))
    (count, levels, scatter, _), outer = _read_summary(summary, tabled, offsets)
    if not scatter:
        return None
    done = Buckets(Tiles(count, levels, offsets, tile_bucket, first_tile), out, splitters[1:], free=spare)
    if levels >= tuning.threshold("SUBBUCKET_MIN_LEVELS"):
        return _split_buckets(k, done, outer, buckets, spare) or done
    return done


def _split_buckets(k: Kernels | Packing | Encoding, done: Buckets, outer: np.ndarray, buckets,
                   spare: Any) -> Buckets | None:
    """The buckets of a bucket pass (``done``; ``outer``: its offsets on the host) each split into BUCKETS sub-buckets.

    A second count and scatter, segment by segment: every bucket is sampled
    with a tile of ``nv`` keys at even strides, the tiles are blocksorted at
    once, and every ``nv / BUCKETS``-th key of bucket b's sorted tile is a
    splitter of it.  The count's CTAs each read a span of one bucket
    (``bucket_span``'s segment) and search its splitters;
    ``kernel_bucket_subtables`` turns the counts into the sub-buckets'
    offsets and tiles, and the scatter moves every key to its sub-bucket,
    still in input order (so the sort stays stable).  Evenly spread keys
    then take about eight merge levels fewer again.  ``buckets`` (the
    first count's bytes) is rewritten with the sub-buckets.  ``None`` where
    the tiles are not a multiple of BUCKETS keys, or where the kernels find
    that the sub-buckets save fewer than
    :data:`~gpusort.cuda.tuning.BUCKET_LEVELS_SAVED` levels.
    """
    import cupy

    # What the first scatter wrote is what this pass reads: words (a packed
    # argsort), or what the first count read (keys, or floats' bits).
    sub = kernels(done.keys.dtype, 0, False) if getattr(k, "scatters_words", False) else k
    nv, keys, n = sub.nv, done.keys, done.keys.size
    if nv % BUCKETS or sub.bucket_subtables is None:
        return None
    sample = cupy.zeros(BUCKETS * nv, keys.dtype)  # a bucket of fewer than nv keys leaves zeros: any key will do
    sizes = np.diff(outer)
    strides = np.maximum(1, sizes // nv)
    gather_rows(sub, [keys] * BUCKETS, outer[:-1] + strides // 2, strides, np.minimum(nv, sizes), sample,
                at=np.arange(BUCKETS, dtype=np.int64) * nv)
    tiles = cupy.empty(sample.size, keys.dtype)  # as the count compares them (a float sort's: exact words)
    blocksort(sub, sample, NULL, tiles, NULL, Tiles.whole(sample.size, nv))

    span = _span_length(n)
    segment, begins, ends, first_span = cut_spans(outer[:-1], outer[1:], span)
    table = cupy.asarray(span_rows(keys.data.ptr, begins, ends, segment, first_span[segment]))
    ctas = segment.size
    counts = cupy.empty((BUCKETS, ctas), np.int32)
    summary = cupy.empty(_SUMMARY_FIELDS, np.int32)
    at = (table, NULL, np.int64(n), np.int64(span))
    sub.bucket_count((ctas,), (BUCKETS,), (*at, tiles, np.int64(nv // BUCKETS), np.int64(nv), counts, buckets,
                                           summary))
    bases, totals = cupy.empty((BUCKETS, ctas), np.int64), cupy.empty(BUCKETS, np.int64)
    sub.bucket_bases((BUCKETS,), (BUCKETS,), (counts, np.int64(ctas), bases, totals, np.int64(nv), np.int32(0),
                                              NULL, NULL, summary))
    offsets = cupy.empty(BUCKETS * BUCKETS + 1, np.int64)
    first_tile = cupy.empty(BUCKETS * BUCKETS + 1, np.int32)
    segment_tiles = cupy.empty(2 * BUCKETS, np.int32)
    max_levels = np.int32(done.tiles.levels - tuning.threshold("BUCKET_LEVELS_SAVED"))
    sub.bucket_subtables((BUCKETS,), (BUCKETS,), (counts, np.int64(ctas), cupy.asarray(first_span.astype(np.int32)),
                                                  done.tiles.offsets, np.int64(nv), max_levels, offsets, first_tile,
                                                  segment_tiles, summary))
    tabled = cupy.cuda.Event(disable_timing=True)
    tabled.record()
    tile_bucket = cupy.empty(-(-n // nv) + BUCKETS * BUCKETS, np.int32)
    out = spare if spare is not None else cupy.empty(n, keys.dtype)
    sub.bucket_scatter((ctas,), (BUCKETS,), (*at, buckets, bases, offsets, summary, first_tile, tile_bucket, out,
                                             np.int32(BUCKETS)))
    (count, levels, scatter, _), _ = _read_summary(summary, tabled)
    if not scatter:
        return None
    return Buckets(Tiles(count, levels, offsets, tile_bucket, first_tile), out, done.splitters,
                   tiles.reshape(BUCKETS, nv)[:, nv // BUCKETS::nv // BUCKETS].copy(), free=keys)  # not the whole sample


_side = threading.local()


def _read_summary(summary, after, offsets=None) -> tuple[list[int], np.ndarray | None]:
    """A bucket pass's summary (``_SUMMARY_FIELDS`` int32 on the GPU, ready once the event ``after`` has passed).

    Copied on a side stream into pinned memory, both kept for the thread
    and device: the host launches the scatter before it waits here, and the
    stream that runs the scatter never waits on the copy.  With ``offsets``
    (the buckets' BUCKETS + 1 offsets, ready by then too), a copy of them as well.
    """
    import cupy
    import cupyx

    device = cupy.cuda.Device().id
    kept = _side.__dict__.setdefault("kept", {})
    if device not in kept:
        kept[device] = (cupy.cuda.Stream(non_blocking=True), cupyx.empty_pinned(_SUMMARY_FIELDS, np.int32),
                        cupyx.empty_pinned(BUCKETS + 1, np.int64))
    stream, pinned, pinned_offsets = kept[device]
    stream.wait_event(after)
    summary.get(stream=stream, out=pinned, blocking=False)
    if offsets is not None:
        offsets.get(stream=stream, out=pinned_offsets, blocking=False)
    stream.synchronize()
    return pinned.tolist(), None if offsets is None else pinned_offsets.copy()
