// Entry point: the coarse half of a four-way merge pass, one multiway merge
// path search in global memory per tile.
#pragma once

#include "merge_pass.cuh"
#include "multiway_path.cuh"
#include "order.cuh"

namespace gpusort {

// splits[4t + r] <- how many elements of run r of its group precede output
// tile t (tile t starts at output position t * nv, or where segments.cuh
// places it).
template <class Key, class Order>
__global__ void kernel_partition_four(const Key* keys, i64 run_length, i64 count, i64 nv,
                                      i64 tiles, i64* splits, const i64* offsets,
                                      const int* tile_bucket, const int* first_tile) {
  const i64 tile = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tile >= tiles) return;
  const tile_place at = segments{offsets, tile_bucket, first_tile}.place(tile, nv, count);
  const run_group group = merge_pass_four{run_length, at.count}.group_at(at.out);
  const Key* runs[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) runs[r] = keys + at.base + group.begin + r * run_length;
  i64 found[4];
  multiway_path<4>(runs, group.counts, at.out - group.begin, found, Order());
#pragma unroll
  for (int r = 0; r < 4; ++r) splits[4 * tile + r] = found[r];
}

}  // namespace gpusort
