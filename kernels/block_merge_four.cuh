// CTA merge of one tile from four sorted ranges, at most NV keys together,
// in two levels of two-way merging in shared memory.
#pragma once

#include "thread_merge.cuh"
#include "block_transfer.cuh"

namespace gpusort {

// out[0, sum(counts)) <- stable merge of runs[0] .. runs[3] (ties: lower
// run first), keys only, written through the Store policy
// (packed_positions.cuh).  keys_shared holds NV keys and must be free on
// entry.
//
// Level 1 merges runs 0 and 1 into X and runs 2 and 3 into Y as *one*
// two-way merge, so every thread merges exactly VT keys whichever of X and
// Y they fall in: shared memory holds a = run 0 ++ run 2 and b = run 1 ++
// run 3, and the merge orders by (pair, key) (pair_tags, merge_path.cuh),
// which puts X, then Y, in thread order.  Level 2 merges X with Y.
template <int NT, int VT, class Store, class Key, class Out, class Order>
__device__ __forceinline__ void block_merge_four(const Key* const (&runs)[4], const int (&counts)[4],
                                                 Out* out, Key* keys_shared, int tid,
                                                 Order precedes) {
  const int a_count = counts[0] + counts[2];
  const int count = a_count + counts[1] + counts[3];
  const Key* const ranges[4] = {runs[0], runs[2], runs[1], runs[3]};
  const int range_counts[4] = {counts[0], counts[2], counts[1], counts[3]};
  load_ranges_to_shared<NT, VT>(ranges, range_counts, keys_shared, tid);
  __syncthreads();

  Key keys[VT];
  int sources[VT];  // unused: keys only
  const int diag = VT * tid < count ? VT * tid : count;
  thread_merge<VT>(keys_shared, 0, a_count, count, diag, keys, sources, precedes,
                   pair_tags{counts[0], counts[1]});
  __syncthreads();
  thread_to_shared<VT>(keys, tid, keys_shared);  // X then Y; past `count`, never read
  __syncthreads();
  thread_merge<VT>(keys_shared, 0, counts[0] + counts[1], count, diag, keys, sources, precedes);
  __syncthreads();
  store_from_thread_order<NT, VT, Store>(keys, count, out, keys_shared, tid);
}

}  // namespace gpusort
