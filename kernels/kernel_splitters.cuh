// Entry point: a bucket pass's splitters (kernel_buckets.cuh) from its
// sample, sorted tile by tile by the blocksort, without merging the tiles.
//
// The key at index i of sorted tile t has, in the stable sort of the whole
// sample, i keys of its own tile before it, every key of an earlier tile
// that does not follow it and every key of a later tile that precedes it:
// its place in the stable merge of the tiles, which is the stable sort,
// since the tiles lie in input order.  One thread a key, one search a tile,
// one launch: merging the tiles would take a merge pass a level, two
// launches each, and leave the sample's sort bound by launching.
// Every FENCE-th key of the sample is kept in shared memory, so that a
// search reads one or two cache lines of a tile, not log2(nv) lines one
// after another.
#pragma once

#include "bucket_search.cuh"
#include "merge_path.cuh"
#include "order.cuh"

namespace gpusort {

// splitters[p / step] <- the key at place p of the stable sort of the sample,
// for every p a multiple of step below BUCKETS * step (a bucket pass's
// sample is exactly that long); the sample is `count` keys in tiles of nv,
// a multiple of FENCE, each sorted (the last may be partial).  Dynamic
// shared memory: ceil(count / FENCE) keys.
template <int NT, int FENCE, class Key, class Order>
__global__ void __launch_bounds__(NT)
    kernel_sample_splitters(const Key* tiles, i64 count, i64 nv, i64 step, Key* splitters) {
  extern __shared__ __align__(16) unsigned char fence_memory[];
  Key* fences = reinterpret_cast<Key*>(fence_memory);
  for (i64 f = threadIdx.x; f * FENCE < count; f += NT) fences[f] = tiles[f * FENCE];
  __syncthreads();
  const i64 i = i64(blockIdx.x) * NT + threadIdx.x;
  if (i >= count) return;
  const Key key = tiles[i];
  const i64 own = i / nv;
  i64 place = i - own * nv;
  for (i64 begin = 0, t = 0; begin < count; begin += nv, ++t) {
    if (t != own) {
      const int size = int(count - begin < nv ? count - begin : nv);
      place += fenced_rank<FENCE>(tiles + begin, fences + begin / FENCE, size, key, t < own,
                                  Order());
    }
  }
  if (place % step == 0 && place / step < BUCKETS) splitters[place / step] = key;
}

}  // namespace gpusort
