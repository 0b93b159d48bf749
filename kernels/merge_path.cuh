// Merge Path search: where a cross-diagonal cuts the merge of two sorted lists.
//
// Merge Path (Green, McColl, Bader, "GPU Merge Path", ICS 2012; Odeh, Green,
// Mwassi, Shmueli, Birk, "Merge Path - parallel merging made simple", IPDPSW
// 2012): the first `diag` outputs of merge(a, b) are exactly a[0, i) and
// b[0, diag - i) for one i, found by a binary search along the diagonal.
// Splitting the output at evenly spaced diagonals gives every tile, and every
// thread, the same amount of work whatever the data.
#pragma once

#include "types.cuh"

namespace gpusort {

// The number of a's elements among the first `diag` outputs of the stable
// merge of a[0, a_count) and b[0, b_count): ties take a's element first.
// Works on global memory (Index = i64) and shared memory (Index = int).
template <class Index, class Key, class Order>
__device__ __forceinline__ Index merge_path(const Key* a, Index a_count, const Key* b,
                                            Index b_count, Index diag, Order precedes) {
  Index lo = diag > b_count ? diag - b_count : 0;
  Index hi = diag < a_count ? diag : a_count;
  while (lo < hi) {
    const Index mid = (lo + hi) >> 1;
    // a[mid] is among the first diag outputs unless b[diag - 1 - mid],
    // which would be output together with a[0, mid), strictly precedes it.
    if (precedes(b[diag - 1 - mid], a[mid]))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace gpusort
