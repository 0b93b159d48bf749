// Entry point: the coarse half of a merge pass, one merge path search in
// global memory per tile.
#pragma once

#include "merge_path.cuh"
#include "merge_pass.cuh"
#include "order.cuh"
#include "segments.cuh"

namespace gpusort {

// a_starts[t] <- how many elements of its pair's a run precede output tile t
// (tile t starts at output position t * nv, or where segments.cuh places it).
// The merge kernel reads the tile's a range as [a_starts[t], a_starts[t + 1])
// and its b range from the diagonal, so partitioning and merging each do a
// fixed amount of work.  LANES lanes search for each tile (group_search.cuh):
// one where tiles are many, more where the GPU would wait on few searches.
template <int LANES, class Key, class Order>
__global__ void kernel_partition(const Key* a, const Key* b, i64 run_length, i64 a_count,
                                 i64 b_count, i64 nv, i64 tiles, i64* a_starts, const i64* offsets,
                                 const int* tile_bucket, const int* first_tile) {
  const i64 tile = (i64(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
  if (tile >= tiles) return;  // the whole group: its lanes share the tile
  const segments segs{offsets, tile_bucket, first_tile};
  const tile_place at = segs.place(tile, nv, a_count);
  const run_pair pair = merge_pass::of(segs, at, run_length, a_count, b_count).pair_at(at.out);
  const i64 begin = at.base + pair.begin;
  const i64 a_start = group_merge_path<LANES>(a + begin, pair.a_count, b + begin, pair.b_count,
                                              at.out - pair.begin, Order(), threadIdx.x % 32);
  if (threadIdx.x % LANES == 0) a_starts[tile] = a_start;
}

}  // namespace gpusort
