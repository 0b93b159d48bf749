// CTA merge of one tile: two sorted ranges in global memory, at most NV
// elements together, merged into one output range.
#pragma once

#include "thread_merge.cuh"
#include "block_transfer.cuh"

namespace gpusort {

// out[0, a_count + b_count) <- stable merge of a[0, a_count), b[0, b_count),
// the keys written through the Store policy (packed_positions.cuh).
// keys_shared holds NV keys and sources_shared NV ints; they may alias.
// Shared memory must be free on entry.
//
// The ranges come in coalesced into shared memory (a, then b); each thread
// finds its VT outputs by a merge path search inside the tile and merges them
// serially into registers; the keys go out through shared memory, coalesced.
// Values never enter shared memory: each output's value is read from the
// list position its key came from, and consecutive outputs mostly come from
// consecutive positions, so those reads coalesce well too.
template <int NT, int VT, class Store, class Key, class Value, class Out, class Order>
__device__ __forceinline__ void block_merge(const Key* a_keys, const Value* a_values, int a_count,
                                            const Key* b_keys, const Value* b_values, int b_count,
                                            Out* out_keys, Value* out_values, Key* keys_shared,
                                            int* sources_shared, int tid, Order precedes) {
  const int count = a_count + b_count;
  load_two_to_shared<NT, VT>(a_keys, a_count, b_keys, b_count, keys_shared, tid);
  __syncthreads();

  Key keys[VT];
  int sources[VT];  // positions in keys_shared: < a_count from a, else from b
  const int diag = VT * tid < count ? VT * tid : count;
  thread_merge<VT>(keys_shared, 0, a_count, count, diag, keys, sources, precedes);
  __syncthreads();

  store_from_thread_order<NT, VT, Store>(keys, count, out_keys, keys_shared, tid);
  if constexpr (has_values<Value>) {
    __syncthreads();  // sources_shared may alias keys_shared
    thread_to_shared<VT>(sources, tid, sources_shared);
    __syncthreads();
    Value strided[VT];
#pragma unroll
    for (int i = 0; i < VT; ++i) {
      const int j = NT * i + tid;
      if (j < count) {
        const int s = sources_shared[j];
        strided[i] = s < a_count ? a_values[s] : b_values[s - a_count];
      }
    }
#pragma unroll
    for (int i = 0; i < VT; ++i) {
      const int j = NT * i + tid;
      if (j < count) out_values[j] = strided[i];
    }
  }
}

}  // namespace gpusort
