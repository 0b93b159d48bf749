// CTA blocksort: NT threads sort one tile of NV = NT * VT keys (and values).
#pragma once

#include "thread_merge.cuh"
#include "thread_sort.cuh"
#include "block_transfer.cuh"

namespace gpusort {

// On entry thread tid holds tile elements VT * tid + i in registers (thread
// order); on return the threads hold the sorted tile, also in thread order.
// keys_shared and values_shared hold NV elements each and may alias: the
// function keeps their uses apart with barriers.  Shared memory must be free
// on entry (no thread still reading it).
//
// First each thread sorts its own VT keys in registers; then log2(NT) passes
// each merge pairs of sorted lists in shared memory, doubling their length:
// in the pass for `coop`, coop consecutive threads merge two lists of
// VT * coop / 2 keys, each thread finding its first output by a merge path
// search and then merging exactly VT keys serially.
template <int NT, int VT, class Key, class Value, class Order>
__device__ __forceinline__ void block_sort(Key (&keys)[VT], Value (&values)[VT], Key* keys_shared,
                                           Value* values_shared, int tid, Order precedes) {
  static_assert(NT >= 32 && (NT & (NT - 1)) == 0,
                "blocksort merges pairs of lists log2(NT) times: NT must be a power of two, "
                "at least one warp");
  static_assert(VT % 2 == 1,
                "VT must be odd: thread t's keys start at VT * t in shared memory, and an odd "
                "stride puts the 32 lanes of a warp in 32 different banks");

  thread_sort(keys, values, precedes);

  // Rolled on purpose: the passes differ only in integer bounds, and
  // unrolling would multiply code size and compile time, not speed.
#pragma unroll 1
  for (int coop = 2; coop <= NT; coop *= 2) {
    thread_to_shared<VT>(keys, tid, keys_shared);
    __syncthreads();
    const int first = tid & ~(coop - 1);  // first thread working on my pair of lists
    const int a_begin = VT * first;
    const int a_end = a_begin + VT * (coop / 2);
    const int b_end = a_begin + VT * coop;
    int sources[VT];
    thread_merge<VT>(keys_shared, a_begin, a_end, b_end, VT * (tid - first), keys, sources,
                     precedes);
    if constexpr (has_values<Value>) {
      __syncthreads();  // values_shared may alias keys_shared
      thread_to_shared<VT>(values, tid, values_shared);
      __syncthreads();
#pragma unroll
      for (int i = 0; i < VT; ++i) values[i] = values_shared[sources[i]];
    }
    __syncthreads();  // all reads of this pass done before the next one writes
  }
}

}  // namespace gpusort
