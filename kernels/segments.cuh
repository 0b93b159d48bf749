// Where each tile of a sort lies: in one segment that starts at 0, or in the
// buckets a bucket pass (kernel_buckets.cuh) scattered the keys into.
//
// A sort of buckets sorts every bucket on its own: tiles of NV keys start at
// each bucket's first key (its last tile is partial), and a merge pass pairs
// runs that start at multiples of 2L from the bucket's start, exactly as a
// sort of one segment does from 0.  The tiles of all buckets are numbered
// one after the other; bucket b's are first_tile[b] .. first_tile[b + 1] - 1,
// so the tile after a bucket's last begins where that bucket ends.
#pragma once

#include "types.cuh"

namespace gpusort {

struct tile_place {
  i64 base;   // where the tile's segment starts
  i64 count;  // the segment's length
  i64 out;    // the tile's first position, from base
};

struct segments {
  const i64* offsets;      // bucket b is [offsets[b], offsets[b + 1]); nullptr: one segment
  const int* tile_bucket;  // the bucket of each tile
  const int* first_tile;   // the first tile of each bucket

  __device__ __forceinline__ bool bucketed() const { return offsets != nullptr; }

  // Tile `tile` of NV keys; `count` is the length of the one segment.
  __device__ __forceinline__ tile_place place(i64 tile, i64 nv, i64 count) const {
    if (!bucketed()) return {0, count, tile * nv};
    const int b = tile_bucket[tile];
    const i64 begin = offsets[b];
    return {begin, offsets[b + 1] - begin, (tile - first_tile[b]) * nv};
  }
};

// The bucket whose tiles first_tile[b] .. first_tile[b + 1] - 1 hold tile t:
// the last bucket whose first tile is at most t (empty buckets come before
// it).  first_tile has `buckets` + 1 entries, `buckets` a power of two.
__device__ __forceinline__ int bucket_of_tile(const int* first_tile, int t, int buckets) {
  int b = 0;
  for (int step = buckets / 2; step >= 1; step /= 2) {
    if (first_tile[b + step] <= t) b += step;
  }
  return b;
}

}  // namespace gpusort
