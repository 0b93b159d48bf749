// A warp's sum, on every architecture the kernels build for (__reduce_add_sync
// needs sm_80 and adds 32-bit integers only).
#pragma once

#include "types.cuh"

namespace gpusort {

// The sum of x over the 32 lanes of a warp, in every lane; all lanes call it.
__device__ __forceinline__ i64 warp_sum(i64 x) {
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) x += __shfl_xor_sync(~0u, x, d);
  return x;
}

}  // namespace gpusort
