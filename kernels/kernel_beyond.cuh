// Top-k's fused pass (gpusort/engine/select.py through the CuPy backend): how many
// keys lie beyond a pivot, and those keys as order keys, in one pass that
// encodes each key in registers.  Every key beyond the pivot takes the next
// slot of one counter; past `room` they are only counted.  The pivot makes
// them few, so the counter is rarely busy.  Keys that are order keys already
// (integers) pass through; floats become their exact order keys.
#pragma once

#include "float_keys.cuh"

namespace gpusort {

// U: the keys' integer type (a float's unsigned bits).  complement: "beyond" is
// below, tested as the complements above the pivot's.  The pivot is read
// on the device, so the host never waits for it.
template <int NT, int VT, class U>
__global__ void __launch_bounds__(NT)
    kernel_beyond(const U* x, long long n, const U* pivot_at, bool is_float, U sign, U nans, bool complement,
                  unsigned long long room, U* out, unsigned long long* slot) {
  const U pivot = *pivot_at;
  const long long tile = (long long)VT * NT;
  for (long long base = blockIdx.x * tile; base < n; base += tile * gridDim.x) {
    U v[VT];
#pragma unroll
    for (int j = 0; j < VT; ++j) {
      const long long i = base + j * NT + threadIdx.x;
      v[j] = i < n ? x[i] : (U)0;
    }
#pragma unroll
    for (int j = 0; j < VT; ++j) {
      const U o = is_float ? gpusort_exact_key(v[j], sign, nans, false) : v[j];
      const U s = complement ? (U)~o : o;
      if (base + j * NT + threadIdx.x < n && s > pivot) {
        const unsigned long long at = atomicAdd(slot, 1ULL);
        if (at < room) out[at] = o;
      }
    }
  }
}

}  // namespace gpusort
