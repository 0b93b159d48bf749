// A partition point found by a group of lanes instead of one thread.
//
// A binary search waits on one read after another, log2(n) of them; where a
// kernel has only a few thousand searches to do (a merge pass's partition
// of a mid-sized sort), the GPU sits idle through that chain.  A group of
// LANES lanes tests LANES points a round, which cuts what is
// left LANES + 1 ways: a search of 2^17 positions waits on 6 rounds with 8
// lanes, 4 with 32, for LANES times the reads of a round.
#pragma once

#include "types.cuh"

namespace gpusort {

// The first i in [lo, hi) where pred(i) holds, hi if none; pred is false then
// true along [lo, hi).  The LANES lanes of a group (a power of two, at most
// 32, aligned in their warp) call it together with the same lo, hi and pred;
// `lane` is the caller's lane in its warp.  LANES == 1 is a binary search.
template <int LANES, class Pred>
__device__ __forceinline__ i64 group_partition_point(i64 lo, i64 hi, Pred pred, int lane) {
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "LANES: 1, 2, 4 .. 32");
  if constexpr (LANES == 1) {
    while (lo < hi) {
      const i64 mid = lo + (hi - lo) / 2;
      if (pred(mid))
        hi = mid;
      else
        lo = mid + 1;
    }
  } else {
    const int rank = lane % LANES, first = lane - rank;
    const unsigned group = LANES == 32 ? ~0u : ((1u << LANES) - 1) << first;
    while (lo < hi) {
      const i64 span = hi - lo;
      const bool holds = pred(lo + span * (rank + 1) / (LANES + 1));
      const unsigned ballot = __ballot_sync(group, holds) >> first;
      if (!ballot) {
        lo += span * LANES / (LANES + 1) + 1;  // past the last point
      } else {
        const int f = __ffs(ballot) - 1;  // the first point where it holds
        hi = lo + span * (f + 1) / (LANES + 1);
        if (f > 0) lo += span * f / (LANES + 1) + 1;
      }
    }
  }
  return lo;
}

}  // namespace gpusort
