"""What gpusort's kernels are instantiated for, and the launch shapes of every pass.

The C++ types of the key and value dtypes, the (architecture, key size,
value size) -> (NT, VT) table (:data:`TUNING`), the thresholds that choose
a pass (four-way merges, the bucket pass) and the pure arithmetic of a
sort's levels (:func:`merge_passes`, :func:`pass_plan`,
:func:`segment_length`).  Plain NumPy: nothing here needs a GPU.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np


#: C++ type of each key dtype.  bool travels as uint8 (False < True).
KEY_TYPES: dict[np.dtype, str] = {
    np.dtype(np.int8): "signed char",
    np.dtype(np.int16): "short",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.uint64): "unsigned long long",
    np.dtype(np.float16): "gpusort::f16",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}


#: Values are moved, never compared: one unsigned type per width (0: keys only).
VALUE_TYPES: dict[int, str] = {
    0: "gpusort::no_value",
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
}


VALUE_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


ORDERS: dict[bool, str] = {False: "gpusort::ascending", True: "gpusort::descending"}


#: (compute capability, key bytes, value bytes) -> (NT threads per CTA, VT keys per thread).
#: NT * VT is the blocksort tile, which sets the number of merge passes,
#: ceil(log2(n / (NT * VT))): each row takes the largest tile whose registers
#: do not spill (ptxas -v, benchmarks/NOTES.md) and whose shared memory fits
#: the 48 KB a CTA gets statically.  VT is odd (shared-memory banks).  Keys
#: and values of 1 to 4 bytes take one 32-bit register each, so they share
#: the rows for 4 bytes; value bytes 0 is a keys-only sort.  An architecture
#: missing here uses the nearest one below it.
TUNING: dict[tuple[int, int, int], tuple[int, int]] = {
    # Keys-only 4-byte: the largest tile that neither spills registers nor
    # exceeds the static shared memory, and the fastest of an (NT, VT) sweep
    # (benchmarks/NOTES.md has the sweep).
    (90, 4, 0): (256, 23),
    (90, 4, 4): (512, 17),  # argsort of fewer than 2**32 keys: uint32 positions
    (90, 4, 8): (256, 17),  # 512 x 17 eight-byte values would need 68 KB of shared memory
    # Keys-only 8-byte (int64, float64, packed argsort words): 256 x 23 is the
    # fastest of the same sweep with four-way passes, ahead of 256 x 15, 17,
    # 19, 21 and 512 x 11.  Rows of a power of two pad by up to 44% with its
    # tile of 5888 (6% with 256 x 17's 4352), as 4-byte rows already do.
    (90, 8, 0): (256, 23),
    (90, 8, 4): (256, 17),
    (90, 8, 8): (256, 17),
}


_FALLBACK = (128, 11)  # pre-Hopper and unknown devices: small and safe


#: Key sizes whose keys-only sorts merge four runs a pass (kernels/kernel_merge_four.cuh).
#: A four-way pass moves the data once for two levels of merging but executes
#: about twice the instructions of a two-way pass, more so for 4-byte keys.
#: With 8-byte keys the two-way pass waits on memory, so much of that work
#: hides behind it and the sort gains.  With 4-byte keys it does not: a
#: four-way pass takes longer than the two two-way passes it replaces
#: (benchmarks/NOTES.md).
FOUR_WAY_KEY_SIZES = frozenset({8})


#: Sorts of fewer keys merge two ways: a four-way pass's partition, a chain of
#: dependent reads per tile, takes longer than a two-way one's, which small
#: sorts do not win back.  The threshold sits where int64 sorts and int32
#: argsorts cross over.
FOUR_WAY_MIN_KEYS = 2**25


#: Threads per CTA of the partition kernel (one merge path search per thread,
#: or per group of PARTITION_LANES threads).
PARTITION_NT = 128


#: Passes of at most this many tiles search each tile's partition with
#: PARTITION_LANES lanes, not one (kernels/group_search.cuh): a few thousand
#: searches leave the GPU waiting on each one's chain of reads, where more
#: lanes cut the chain for more reads in all.
PARTITION_GROUP_TILES, PARTITION_LANES = 8192, 8


#: The thresholds above that choose a pass at each call, which :func:`forced` may set for a block.
THRESHOLDS = ("FOUR_WAY_MIN_KEYS", "PARTITION_GROUP_TILES", "BUCKET_MIN_BYTES", "BUCKET_LEVELS_SAVED",
              "SUBBUCKET_MIN_LEVELS")
_forced: contextvars.ContextVar[dict[str, int]] = contextvars.ContextVar("gpusort_forced_thresholds", default={})


def threshold(name: str) -> int:
    """The threshold ``name`` (one of :data:`THRESHOLDS`): as :func:`forced` sets it here, else its value above."""
    return _forced.get().get(name, globals()[name])


@contextlib.contextmanager
def forced(**thresholds: int) -> Iterator[None]:
    """Thresholds of :data:`THRESHOLDS` at other values inside the block, in this context (thread, task) only.

    Small sorts then take the passes that only large ones take by default
    (``benchmarks/gpu_smoke.py`` under compute-sanitizer); the module's
    values do not change.

    >>> with forced(FOUR_WAY_MIN_KEYS=0):
    ...     threshold("FOUR_WAY_MIN_KEYS")
    0
    >>> threshold("FOUR_WAY_MIN_KEYS") == FOUR_WAY_MIN_KEYS
    True
    """
    unknown = sorted(set(thresholds) - set(THRESHOLDS))
    if unknown:
        raise ValueError(f"cannot force {unknown}: the thresholds a call reads are {THRESHOLDS}; "
                         "the others are compiled into the kernels or fixed at import")
    token = _forced.set({**_forced.get(), **thresholds})
    try:
        yield
    finally:
        _forced.reset(token)


#: Buckets of a bucket pass (kernels/bucket_search.cuh), one per thread of its CTAs.
BUCKETS = 256


#: Keys per thread of a bucket pass's scatter tiles, by the size of the keys
#: it writes: the tile staged by bucket fits the 48 KB of a CTA.
BUCKET_VT = {1: 24, 2: 24, 4: 24, 8: 12}


#: Keys per thread of its count pass, any key size.
BUCKET_COUNT_VT = 12


#: Keys-only sorts that move at least this many bytes of keys (or words)
#: take a bucket pass: with the host never waiting on the pass, it clearly
#: pays from this size and hardly at all at half of it ...
BUCKET_MIN_BYTES = 2**26


#: ... and scatter them when that takes at least this many merge levels off
#: the sort: the scatter itself costs about as much as two to three merge
#: levels, so it must save more than that.
BUCKET_LEVELS_SAVED = 4


#: Buckets that still take this many merge levels (the largest one's) are
#: split again, each into BUCKETS sub-buckets (gpusort/cuda/buckets.py,
#: _split_buckets): a second count and scatter take about eight levels off.
#: From 9 levels on, a sub-bucket holds two tiles or more on average; below,
#: the padding of its partial last tile (every sub-bucket has one) costs the
#: blocksort and the merges more than the levels save (one H200, int64:
#: 2**27 7.30 ms without against 13.18 with; 2**28 14.64 / 17.04; 2**29
#: 31.22 / 30.68; 2**30 64.08 / 60.23; 2**31 136.59 / 119.64).
SUBBUCKET_MIN_LEVELS = 9


#: Sampled keys per bucket: the splitters are every BUCKET_SAMPLE-th of the
#: sorted sample.  The largest of 256 buckets of evenly spread keys must stay
#: within 256 / 178 times the mean for 2**k keys (a bucket of 2**(k - 8) keys
#: fills 178 of the 256 tiles of 5888 its levels allow): a quarter of these
#: samples a bucket leaves the largest bucket at that edge, costing a level.
BUCKET_SAMPLE = 256


#: Threads per CTA of the sample's splitters (kernels/kernel_splitters.cuh), one a key,
#: and every how many keys of the sample its searches keep in shared memory (a
#: warp's width: it divides every tile).  The fences of 8-byte keys must fit
#: the 48 KB of dynamic shared memory a launch gets without asking: a sample
#: of at most 48 KB / 8 * SAMPLE_FENCE keys (tests/test_kernels_compile.py).
SPLITTERS_NT, SAMPLE_FENCE = 512, 32


#: Threads per CTA of a batch of strided gathers (kernels/kernel_gather.cuh), a
#: row a CTA: a bucket's sample (a tile, 5888 keys) in 23 steps of the CTA.
GATHER_NT = 256


#: Threads per CTA, loads in flight per thread, and CTAs of the count of a float
#: sort's tie groups (kernels/kernel_ties.cuh): one pass over the input.
TIE_NT, TIE_VT, TIE_CTAS = 256, 8, 1024


#: CTAs a bucket pass aims at: each counts and scatters a span of whole tiles.
BUCKET_CTAS = 1024


NULL = np.uint64(0)
"""The value pointers of a keys-only launch (and of a blocksort that makes positions)."""


def launch_box(arch: int, key_size: int, value_size: int = 0) -> tuple[int, int]:
    """(NT, VT) for compute capability ``arch`` (e.g. 90), keys and values of these sizes."""
    row = (max(key_size, 4), value_size and max(value_size, 4))
    known = [a for a, *sizes in TUNING if tuple(sizes) == row and a <= arch]
    return TUNING[(max(known), *row)] if known else _FALLBACK


#: The word a packed argsort sorts (kernels/packed_positions.cuh): a key's
#: 32-bit radix word above its 32-bit position, ascending.
WORD = np.dtype(np.uint64)


#: Floats sorted as their exact order keys, unsigned integers of their width
#: (kernels/exact_keys.cuh): one-instruction compares instead of several.
EXACT_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def exact_word(key: np.dtype) -> np.dtype:
    """The unsigned integer an :data:`EXACT_FLOATS` key is sorted as.

    Examples
    --------
    >>> exact_word(np.float32), exact_word(np.float16)
    (dtype('uint32'), dtype('uint16'))
    """
    return np.dtype(f"u{np.dtype(key).itemsize}")


def packs(key: np.dtype) -> bool:
    """Whether :func:`~gpusort.cuda.dispatch.packed_argsort` takes keys of this dtype: kernel keys of at most 4 bytes.

    Examples
    --------
    >>> packs(np.float32), packs(np.uint8), packs(np.int64), packs(np.complex64)
    (True, True, False, False)
    """
    key = np.dtype(key)
    return key in KEY_TYPES and key.itemsize <= 4


#: Threads per CTA of top-k's fused pass (kernels/kernel_beyond.cuh), and keys
#: each thread loads before it compares any, so that enough loads are in
#: flight to read at the memory's speed: at one key a thread the pass waits
#: on each load, and at four it comes close to a probe that only compares.
BEYOND_NT, BEYOND_VT = 256, 4

#: Threads per CTA of the verification kernel (kernels/kernel_verify.cuh).
VERIFY_NT = 256


def segment_length(length: int, nv: int) -> int:
    """The smallest ``nv * 2**m`` that holds ``length`` keys: the padded row of a segmented sort.

    Segments of this length, laid end to end, are what :func:`~gpusort.cuda.dispatch.mergesort`'s
    ``segment=`` sorts: tiles of ``nv`` never cross one, and the merge passes
    that pair runs of ``nv`` to ``segment / 2`` keys pair them only inside one.
    Past one tile the pad is less than ``length`` (at most 2x the memory).

    Examples
    --------
    >>> segment_length(16384, 8704), segment_length(8704, 8704), segment_length(100, 8704)
    (17408, 8704, 8704)
    """
    return nv << merge_passes(length, nv)


def last_key(dtype: Any, descending: bool) -> Any:
    """A key that sorts after every key of ``dtype`` in the kernels' order (``Order::last``, kernels/order.cuh).

    NaN for floats (last in both directions); the largest integer ascending,
    the smallest descending.  The sort is stable, so a real key equal to it
    stays ahead of it: pads written after a row's keys stay at its end.

    Examples
    --------
    >>> last_key(np.float32, True), last_key(np.int16, False), last_key(np.uint8, True)
    (np.float32(nan), np.int16(32767), np.uint8(0))
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(np.nan)
    info = np.iinfo(dtype)
    return dtype.type(info.min if descending else info.max)


def pass_plan(levels: int, four_way: bool) -> list[int]:
    """The ways of each merge pass that takes sorted tiles through ``levels`` doublings of the run.

    Four-way passes (keys-only sorts of :data:`FOUR_WAY_KEY_SIZES`, at least
    :data:`FOUR_WAY_MIN_KEYS` keys in all) do two
    levels in one pass over the data; an odd level left over is one two-way
    pass, run first.  Other sorts merge two ways per pass.

    Examples
    --------
    >>> pass_plan(5, four_way=True), pass_plan(4, four_way=True), pass_plan(3, four_way=False)
    ([2, 4, 4], [4, 4], [2, 2, 2])
    """
    if not four_way:
        return [2] * levels
    return [2] * (levels % 2) + [4] * (levels // 2)


def merge_passes(keys: int, run: int) -> int:
    """Merge levels (two-way passes) that take sorted runs of ``run`` keys to one of ``keys``: ceil(log2(keys / run)).

    :func:`pass_plan` says how many passes run them.

    Examples
    --------
    >>> merge_passes(2**28, 5888), merge_passes(17408, 4352), merge_passes(100, 5888)
    (16, 2, 0)
    """
    return (max(1, -(-keys // run)) - 1).bit_length()
