// Entry point: where a float sort by exact keys (exact_keys.cuh) left ties
// of different bits, which the float order keeps in input order.
#pragma once

#include "exact_keys.cuh"

namespace gpusort {

// The first i in [0, count) where pred(sorted[i]) holds, count if none; pred
// is false then true along `sorted`.  One warp: each round tests 32 points
// spread over what is left, so a search of 2^24 keys waits on 5 reads, not 24.
template <class Key, class Pred>
__device__ __forceinline__ i64 warp_partition_point(const Key* sorted, i64 count, Pred pred,
                                                    int lane) {
  i64 lo = 0, hi = count;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const i64 span = hi - lo;
    const bool holds = pred(sorted[lo + span * (lane + 1) / 33]);
    const unsigned ballot = __ballot_sync(~0u, holds);
    if (!ballot) {
      lo += span * 32 / 33 + 1;  // past the last point
    } else {
      const int f = __ffs(ballot) - 1;  // the first point where it holds
      hi = lo + span * (f + 1) / 33;
      if (f > 0) lo += span * f / 33 + 1;
    }
  }
  return lo;
}

// Three warps; `sorted` holds count floats in exact-key order.  ties <- {lo,
// hi, nans_at, zeros_mixed, nans_mixed}: the zeros are [lo, hi) and the NaNs
// [nans_at, count); a group is mixed where its first and last bits differ
// (exact keys put -0.0 and 0.0 at its two ends, NaNs by their bits).
template <class Float, class Order>
__global__ void __launch_bounds__(96) kernel_tie_bounds(const Float* sorted, i64 count, i64* ties) {
  using L = detail::ieee_layout<Float>;
  __shared__ i64 at[3];
  const Order precedes;
  const Float zero = detail::of_bits<Float>(0u), nan = Order::template last<Float>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  i64 found;
  if (warp == 0) found = warp_partition_point(sorted, count, [&](Float x) { return !precedes(x, zero); }, lane);
  else if (warp == 1) found = warp_partition_point(sorted, count, [&](Float x) { return precedes(zero, x); }, lane);
  else found = warp_partition_point(sorted, count, [&](Float x) { return !precedes(x, nan); }, lane);
  if (lane == 0) at[warp] = found;
  __syncthreads();
  if (threadIdx.x == 0) {
    const i64 lo = at[0], hi = at[1], nans_at = at[2];
    ties[0] = lo;
    ties[1] = hi;
    ties[2] = nans_at;
    ties[3] = hi - lo > 1 && L::bits(sorted[lo]) != L::bits(sorted[hi - 1]);
    ties[4] = count - nans_at > 1 && L::bits(sorted[nans_at]) != L::bits(sorted[count - 1]);
  }
}

}  // namespace gpusort
