// Entry point: the fine half of a merge pass, one tile of NV outputs per CTA.
#pragma once

#include "block_merge.cuh"
#include "merge_pass.cuh"
#include "order.cuh"

namespace gpusort {

// out[tile] <- the tile's slice of its pair's merge (see merge_pass.cuh),
// with a_starts from kernel_partition.  Value pointers are null in a
// keys-only merge and never offset then.  Keys are written through the Store
// policy (packed_positions.cuh: the last pass of a packed argsort stores
// positions).
template <int NT, int VT, class Key, class Value, class Order, class Store = as_is>
__global__ void __launch_bounds__(NT)
    kernel_merge(const Key* a_keys, const Value* a_values, const Key* b_keys,
                 const Value* b_values, i64 run_length, i64 a_count, i64 b_count,
                 const i64* a_starts, typename Store::template output<Key>* out_keys,
                 Value* out_values, const i64* offsets, const int* tile_bucket,
                 const int* first_tile) {
  constexpr int NV = NT * VT;
  static_assert(NV < (1 << 30), "tile positions are ints: NT * VT must stay far below 2^31");
  __shared__ union {
    Key keys[NV];
    int sources[NV];
  } shared;
  static_assert(sizeof(shared) <= 48 * 1024,
                "a CTA gets at most 48 KB of static shared memory: lower NT or VT for this key "
                "and value size (gpusort/cuda/tuning.py, TUNING)");

  const i64 tile = blockIdx.x;
  const segments segs{offsets, tile_bucket, first_tile};
  const tile_place at = segs.place(tile, NV, a_count);
  const run_pair pair = merge_pass::of(segs, at, run_length, a_count, b_count).pair_at(at.out);
  const i64 diag = at.out - pair.begin;  // first output of this tile, within its pair
  const i64 pair_count = pair.a_count + pair.b_count;
  const i64 diag_end = diag + NV < pair_count ? diag + NV : pair_count;
  // The pair's last tile ends at the runs' ends; any other tile where the next begins.
  const i64 a0 = a_starts[tile];
  const i64 a1 = diag_end == pair_count ? pair.a_count : a_starts[tile + 1];
  const i64 b0 = diag - a0, b1 = diag_end - a1;

  const i64 begin = at.base + pair.begin;
  const i64 a_at = begin + a0, b_at = begin + b0, out_at = begin + diag;
  if constexpr (has_values<Value>) {
    a_values += a_at;
    b_values += b_at;
    out_values += out_at;
  }
  block_merge<NT, VT, Store>(a_keys + a_at, a_values, int(a1 - a0), b_keys + b_at, b_values,
                      int(b1 - b0), out_keys + out_at, out_values, shared.keys, shared.sources,
                      threadIdx.x, Order());
}

}  // namespace gpusort
