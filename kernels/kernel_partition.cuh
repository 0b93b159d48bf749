// Entry point: the coarse half of a merge pass, one merge path search in
// global memory per tile.
#pragma once

#include "merge_path.cuh"
#include "merge_pass.cuh"
#include "order.cuh"

namespace gpusort {

// a_starts[t] <- how many elements of its pair's a run precede output tile t
// (tile t starts at output position t * nv).  The merge kernel reads the
// tile's a range as [a_starts[t], a_starts[t + 1]) and its b range from the
// diagonal, so partitioning and merging each do a fixed amount of work.
template <class Key, class Order>
__global__ void kernel_partition(const Key* a, const Key* b, i64 run_length, i64 a_count,
                                 i64 b_count, i64 nv, i64 tiles, i64* a_starts) {
  const i64 tile = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tile >= tiles) return;
  const run_pair pair = merge_pass{run_length, a_count, b_count}.pair_at(tile * nv);
  a_starts[tile] = merge_path(a + pair.begin, pair.a_count, b + pair.begin, pair.b_count,
                              tile * nv - pair.begin, Order());
}

}  // namespace gpusort
