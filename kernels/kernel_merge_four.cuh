// Entry point: the fine half of a four-way merge pass, one tile of NV
// outputs per CTA, keys only.
#pragma once

#include "block_merge_four.cuh"
#include "merge_pass.cuh"
#include "order.cuh"

namespace gpusort {

// out[tile] <- the tile's slice of its group's merge (see merge_pass.cuh),
// with splits from kernel_partition_four, written through the Store policy
// (packed_positions.cuh: the last pass of a packed argsort stores positions).
// Launch bounds ask for 1024 threads an SM: left to itself the compiler
// takes registers enough to fit only three CTAs of 256 an SM, and the merge
// runs slower with 8-byte keys.
template <int NT, int VT, class Key, class Order, class Store = as_is>
__global__ void __launch_bounds__(NT, 1024 / NT)
    kernel_merge_four(const Key* keys, i64 run_length, i64 count, const i64* splits,
                      typename Store::template output<Key>* out, const i64* offsets,
                      const int* tile_bucket, const int* first_tile) {
  constexpr int NV = NT * VT;
  static_assert(NV < (1 << 30), "tile positions are ints: NT * VT must stay far below 2^31");
  __shared__ Key shared[NV];
  static_assert(sizeof(shared) <= 48 * 1024,
                "a CTA gets at most 48 KB of static shared memory: lower NT or VT for this key "
                "size (gpusort/cuda/tuning.py, TUNING)");

  const i64 tile = blockIdx.x;
  const tile_place at = segments{offsets, tile_bucket, first_tile}.place(tile, NV, count);
  const run_group group = merge_pass_four{run_length, at.count}.group_at(at.out);
  const i64 diag = at.out - group.begin;
  const i64 group_count = group.counts[0] + group.counts[1] + group.counts[2] + group.counts[3];
  // The group's last tile ends at the runs' ends; any other tile where the next begins.
  const bool last = diag + NV >= group_count;
  const Key* runs[4];
  int counts[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const i64 begin = splits[4 * tile + r];
    const i64 end = last ? group.counts[r] : splits[4 * (tile + 1) + r];
    runs[r] = keys + at.base + group.begin + r * run_length + begin;
    counts[r] = int(end - begin);
  }
  block_merge_four<NT, VT, Store>(runs, counts, out + at.base + group.begin + diag, shared,
                                  threadIdx.x, Order());
}

}  // namespace gpusort
