// Entry point: sort every tile of NV = NT * VT keys (and values).
#pragma once

#include "block_sort.cuh"
#include "order.cuh"
#include "segments.cuh"

namespace gpusort {

// keys_out[tile] <- sorted keys_in[tile] for every tile of NV elements, the
// values moved with them; keys are read through the Load policy and written
// through the Store policy (packed_positions.cuh: a packed argsort loads
// keys as packed words, and stores positions where the blocksort is its only
// pass).  values_in == nullptr means "the keys' positions"
// (argsort): each value is then its key's index in keys_in, made here
// instead of read.  A segment's last tile is padded with Order::last() keys
// (see order.cuh), so block_sort always sorts full tiles.  Tiles lie where
// `segments` (segments.cuh) says: over the whole input, or in buckets; a
// bucketed blocksort sorts in place (keys_in == keys_out), each CTA reading
// its tile before it writes it.
template <int NT, int VT, class Key, class Value, class Order, class Load = as_is,
          class Store = as_is>
__global__ void __launch_bounds__(NT)
    kernel_blocksort(const typename Load::template input<Key>* keys_in, const Value* values_in,
                     i64 count, typename Store::template output<Key>* keys_out,
                     Value* values_out, const i64* offsets, const int* tile_bucket,
                     const int* first_tile) {
  constexpr int NV = NT * VT;
  __shared__ union {
    Key keys[NV];
    Value values[NV];
  } shared;
  static_assert(sizeof(shared) <= 48 * 1024,
                "a CTA gets at most 48 KB of static shared memory: lower NT or VT for this key "
                "and value size (gpusort/cuda/tuning.py, TUNING)");

  const int tid = threadIdx.x;
  const tile_place at = segments{offsets, tile_bucket, first_tile}.place(blockIdx.x, NV, count);
  const i64 tile_begin = at.base + at.out;
  const int tile_count = at.count - at.out < NV ? int(at.count - at.out) : NV;

  Key keys[VT];
  Value values[VT];
  load_to_thread_order<NT, VT, Load>(keys_in, tile_begin, tile_count, Order::template last<Key>(),
                                     keys, shared.keys, tid);
  if constexpr (has_values<Value>) {
    if (values_in) {
      __syncthreads();
      load_to_thread_order<NT, VT, as_is>(values_in, tile_begin, tile_count, Value(), values,
                                          shared.values, tid);
    } else {
#pragma unroll
      for (int i = 0; i < VT; ++i) values[i] = Value(tile_begin + VT * tid + i);
    }
  }
  __syncthreads();

  block_sort<NT, VT>(keys, values, shared.keys, shared.values, tid, Order());

  store_from_thread_order<NT, VT, Store>(keys, tile_count, keys_out + tile_begin, shared.keys,
                                         tid);
  if constexpr (has_values<Value>) {
    __syncthreads();
    store_from_thread_order<NT, VT, as_is>(values, tile_count, values_out + tile_begin,
                                           shared.values, tid);
  }
}

}  // namespace gpusort
