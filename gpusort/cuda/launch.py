"""Thin host launchers: one kernel each (a merge pass: its partition, then its merge).

They take buffers the dispatchers (:mod:`gpusort.cuda.dispatch`) have
sized, and :class:`Tiles`, where a pass's tiles lie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpusort.cuda import tuning
from gpusort.cuda.tuning import GATHER_NT, NULL, PARTITION_LANES, PARTITION_NT, VERIFY_NT, merge_passes
from gpusort.cuda.build import Encoding, Kernels, Packing, sm_count, verify_kernels


def scan(keys, hashed: int, ordered: int, descending: bool) -> tuple[int, int | None]:
    """One pass over 1-D CuPy ``keys``: the checksum of ``keys[:hashed]`` and the first out-of-order pair.

    The checksum is the sum, mod 2**64, of SplitMix64's finalizer of every
    key's bits zero-extended to 64 (:mod:`gpusort.verification` computes the
    same on the host).  The pair is the first ``i < ordered - 1`` with
    ``keys[i + 1]`` before ``keys[i]`` in the kernels' order (NaN last,
    ``-0.0`` tied with ``0.0``; ``descending`` reverses the numbers), or
    ``None``.  One small module a dtype, so a first verification compiles in
    well under a second; the host reads back two numbers.
    """
    import cupy

    key = np.dtype(np.uint8) if keys.dtype == np.bool_ else np.dtype(keys.dtype)
    device = keys.device.id
    kernel = verify_kernels(device, key)[bool(descending)]
    out = cupy.asarray(np.array([0, ordered], dtype=np.int64))  # a copy up: no fill kernel to compile
    span = max(hashed, ordered - 1)
    if span > 0:
        grid = min(-(-span // VERIFY_NT), 8 * sm_count(device))
        kernel((grid,), (VERIFY_NT,), (cupy.ascontiguousarray(keys).view(key), np.int64(hashed), np.int64(ordered),
                                      out[:1].view(np.uint64), out[1:]))
    checksum, bad = out.get().tolist()
    return checksum % 2**64, None if bad >= ordered else bad


@dataclass(frozen=True)
class Tiles:
    """Where the tiles of a sort lie (kernels/segments.cuh), and the merge levels that sort them.

    Either one segment from 0 (``offsets`` null): ``ceil(n / nv)`` tiles;
    or the buckets of a bucket pass: bucket ``b`` holds keys
    ``[offsets[b], offsets[b + 1])`` and tiles ``first_tile[b]`` to
    ``first_tile[b + 1] - 1``, ``tile_bucket`` maps each tile to its bucket.
    """

    count: int  # tiles in all
    levels: int  # merge levels of the longest segment
    offsets: Any = NULL
    tile_bucket: Any = NULL
    first_tile: Any = NULL

    @classmethod
    def whole(cls, n: int, nv: int, segment: int | None = None) -> "Tiles":
        """The tiles of ``n`` keys from 0; with ``segment``, the levels of one segment."""
        return cls(-(-n // nv), merge_passes(min(n, segment or n), nv) if n else 0)

    @property
    def args(self) -> tuple:
        """The kernels' last three arguments."""
        return self.offsets, self.tile_bucket, self.first_tile


def every(keys, step: int, start: int = 0, count: int | None = None, out=None):
    """``keys[start::step][:count]`` of CuPy ``keys`` (1-D, or rows), gathered by one pitched copy.

    Into ``out`` if given (a GPU array, or a NumPy array: then the caller
    synchronizes before reading it), else into a new GPU array.  CuPy would
    gather a strided view with a copy kernel that it compiles on its first
    use in a process, which a first sort would pay; only a view with a
    stride of zero or less (reversed, broadcast) or rows that are not
    contiguous takes that gather.
    """
    import cupy

    available = max(0, -(-(keys.shape[0] - start) // step))
    count = available if count is None else min(count, available)
    shape = (count,) + keys.shape[1:]
    row = keys.itemsize * math.prod(keys.shape[1:])
    if keys.strides[0] <= 0 or not keys[:1].flags.c_contiguous:  # CuPy's own gather
        picked = keys[start::step][:count]
        if out is None:
            return cupy.ascontiguousarray(picked)
        if isinstance(out, cupy.ndarray):
            out[...] = picked
        else:
            picked.get(out=out)
        return out
    if out is None:
        out = cupy.empty(shape, keys.dtype)
    if count:
        dst = out.data.ptr if isinstance(out, cupy.ndarray) else out.ctypes.data
        cupy.cuda.runtime.memcpy2DAsync(dst, row, keys.data.ptr + start * keys.strides[0],
                                        keys.strides[0] * step, row, count,
                                        cupy.cuda.runtime.memcpyDefault, cupy.cuda.get_current_stream().ptr)
    return out


def gather_rows(k: Kernels | Packing | Encoding, sources: Sequence[Any], starts, steps, counts, out, at=None):
    """``out[at[r] + j] = sources[r][starts[r] + j * steps[r]]`` for ``j < counts[r]``: every row ``r`` in one launch.

    ``sources``: contiguous 1-D CuPy arrays as wide as ``out`` (a row each;
    rows may share one); ``at`` defaults to the rows end to end from 0.
    ``k``: a keys-only module whose keys are that wide (its ``gather_rows``,
    kernels/kernel_gather.cuh).  One launch and one small upload, where
    :func:`every` takes a copy call a row.  Returns ``out``.
    """
    import cupy

    counts = np.asarray(counts, np.int64)
    at = np.concatenate(([0], np.cumsum(counts)[:-1])) if at is None else np.asarray(at, np.int64)
    if any(source.itemsize != out.itemsize for source in sources):
        raise ValueError(f"gather_rows moves {out.itemsize}-byte keys: every source must be as wide as out")
    rows = np.empty((counts.size, 5), np.int64)  # kernels/kernel_gather.cuh's gather_row
    rows[:, 0] = np.array([source.data.ptr for source in sources], np.uint64).view(np.int64)
    rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4] = starts, steps, counts, at
    rows = rows[counts > 0]
    if rows.size:
        k.gather_rows((len(rows),), (GATHER_NT,), (cupy.asarray(rows), out))
    return out


def blocksort(k: Kernels | Packing, keys, values, out_keys, out_values, tiles: Tiles, kernel=None) -> None:
    """Sort every tile of ``k.nv`` keys where ``tiles`` places them (kernels/kernel_blocksort.cuh); null ``values``: positions.

    ``kernel``: one of ``k``'s blocksorts other than ``k.blocksort``.
    """
    (kernel or k.blocksort)((tiles.count,), (k.nt,), (keys, values, np.int64(keys.size), out_keys, out_values,
                                                     *tiles.args))


def merge_pass(k: Kernels, a_keys, a_values, b_keys, b_values, run: int, a_count: int,
               b_count: int, a_starts, out_keys, out_values, tiles: Tiles, kernel=None) -> None:
    """One merge pass (kernels/merge_pass.cuh): partition, then merge tile by tile.

    ``a_starts`` (int64, at least one per output tile) receives the partition;
    ``kernel``: ``k.merge`` (the default), or a last pass's that stores something else (:class:`~gpusort.cuda.dispatch._Last`).
    """
    runs = (np.int64(run), np.int64(a_count), np.int64(b_count))
    few = tiles.count <= tuning.threshold("PARTITION_GROUP_TILES")
    lanes, partition = (PARTITION_LANES, k.partition_group) if few else (1, k.partition)
    partition((-(-tiles.count * lanes // PARTITION_NT),), (PARTITION_NT,),
              (a_keys, b_keys, *runs, np.int64(k.nv), np.int64(tiles.count), a_starts, *tiles.args))
    (kernel or k.merge)((tiles.count,), (k.nt,), (a_keys, a_values, b_keys, b_values, *runs, a_starts, out_keys,
                                                 out_values, *tiles.args))


def merge_pass_four(k: Kernels, keys, run: int, count: int, splits, out_keys, tiles: Tiles, kernel=None) -> None:
    """One four-way merge pass over runs of ``run`` keys (kernels/merge_pass.cuh), keys only.

    ``splits`` (int64, four per output tile) receives the partition;
    ``kernel``: ``k.merge_four`` (the default), or a last pass's that stores something else (:class:`~gpusort.cuda.dispatch._Last`).
    """
    k.partition_four(
        (-(-tiles.count // PARTITION_NT),),
        (PARTITION_NT,),
        (keys, np.int64(run), np.int64(count), np.int64(k.nv), np.int64(tiles.count), splits, *tiles.args),
    )
    (kernel or k.merge_four)((tiles.count,), (k.nt,), (keys, np.int64(run), np.int64(count), splits, out_keys,
                                                      *tiles.args))
