// Entry points: where a float sort by exact keys (exact_keys.cuh) left ties
// of different bits, which the float order keeps in input order, and their
// rewrite with the input's members in input order.
#pragma once

#include "exact_keys.cuh"
#include "group_search.cuh"
#include "warp_sum.cuh"

namespace gpusort {

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
  // A warp a search: 5 dependent reads for 2^24 keys, not 24 (group_search.cuh).
  const auto search = [&](auto pred) { return group_partition_point<32>(0, count, pred, lane); };
  if (warp == 0) found = search([&](i64 i) { return !precedes(sorted[i], zero); });
  else if (warp == 1) found = search([&](i64 i) { return precedes(zero, sorted[i]); });
  else found = search([&](i64 i) { return !precedes(sorted[i], nan); });
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

// The two tie groups: the zeros (group 0) and the NaNs (group 1).
template <class Float>
__device__ __forceinline__ bool in_tie_group(Float x, int group) {
  using L = detail::ieee_layout<Float>;
  const auto magnitude = L::bits(x) & ~L::sign;
  return group ? magnitude > L::inf : magnitude == 0;
}

// Rewriting the mixed groups of kernel_tie_bounds' `ties` with the input's
// members in input order takes two kernels, which do nothing where no group
// is mixed: the host launches them without reading `ties` back.

// counts[g * gridDim.x + c] <- the members of group g in span c, keys[c *
// span, (c + 1) * span), for each mixed group g; NT threads a CTA, VT loads
// each in flight.
template <int NT, int VT, class Float>
__global__ void __launch_bounds__(NT)
    kernel_tie_count(const Float* keys, i64 count, i64 span, const i64* ties, int* counts) {
  __shared__ int warp_sums[2][NT / 32];
  const bool zeros = ties[3], nans = ties[4];
  if (!zeros && !nans) return;
  const i64 begin = i64(blockIdx.x) * span;
  const i64 end = begin + span < count ? begin + span : count;
  int mine[2] = {0, 0};
  for (i64 tile = begin; tile < end; tile += NT * VT) {
#pragma unroll
    for (int r = 0; r < VT; ++r) {
      const i64 i = tile + r * NT + threadIdx.x;
      if (i < end) {
        const Float x = keys[i];
        mine[0] += zeros && in_tie_group(x, 0);
        mine[1] += nans && in_tie_group(x, 1);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int sum = int(warp_sum(mine[g]));
    if (threadIdx.x % 32 == 0) warp_sums[g][threadIdx.x / 32] = sum;
  }
  __syncthreads();
  if (threadIdx.x < 2) {
    int total = 0;
    for (int w = 0; w < NT / 32; ++w) total += warp_sums[threadIdx.x][w];
    counts[threadIdx.x * gridDim.x + blockIdx.x] = total;
  }
}

// sorted[ties[0] ...] (the zeros) and sorted[ties[2] ...] (the NaNs) <- the
// members of each mixed group in keys[0, count), in input order, span by
// span as kernel_tie_count counted them.  A span without members is not read
// again: a group is usually a few keys.
template <int NT, class Float>
__global__ void __launch_bounds__(NT)
    kernel_tie_gather(const Float* keys, i64 count, i64 span, const i64* ties, const int* counts,
                      Float* sorted) {
  __shared__ int warp_sums[NT / 32];
  __shared__ i64 base;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const i64 begin = i64(blockIdx.x) * span;
  const i64 end = begin + span < count ? begin + span : count;
  for (int group = 0; group < 2; ++group) {
    const int* spans = counts + group * gridDim.x;
    if (!ties[3 + group] || spans[blockIdx.x] == 0) continue;
    i64 before = 0;  // the group's members in the spans before this one
    for (int c = tid; c < int(blockIdx.x); c += NT) before += spans[c];
    before = warp_sum(before);
    if (tid == 0) base = ties[group ? 2 : 0];
    __syncthreads();
    if (lane == 0) atomicAdd(reinterpret_cast<unsigned long long*>(&base), (unsigned long long)before);
    __syncthreads();
    i64 at = base;
    for (i64 tile = begin; tile < end; tile += NT) {
      const i64 i = tile + tid;
      const Float x = i < end ? keys[i] : Float();
      const bool member = i < end && in_tie_group(x, group);
      const unsigned ballot = __ballot_sync(~0u, member);
      if (lane == 0) warp_sums[warp] = __popc(ballot);
      __syncthreads();
      i64 mine = at, total = 0;
      for (int w = 0; w < NT / 32; ++w) {
        if (w < warp) mine += warp_sums[w];
        total += warp_sums[w];
      }
      if (member) sorted[mine + __popc(ballot & ((1u << lane) - 1))] = x;
      at += total;
      __syncthreads();
    }
  }
}

}  // namespace gpusort
