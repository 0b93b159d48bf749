// Entry point: one pass over an array that should be sorted, for
// gpusort/verification.py.  It adds a 64-bit mix of every key's bits into an
// order-independent checksum, and finds the first position whose next key
// comes before it in the order (NaN last, -0.0 tied with 0.0, NaNs tied).
#pragma once

#include "order.cuh"
#include "types.cuh"

namespace gpusort {

namespace detail {

// A key's bits, zero-extended to 64: integers of every width, f16's bits,
// floats' and doubles' bits, as the host's checksum reads them.
template <class Key>
__device__ __forceinline__ unsigned long long key_bits(Key x) {
  static_assert(sizeof(Key) <= 8, "keys are at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &x, sizeof(Key));  // little-endian: the low bytes
  return bits;
}

// SplitMix64's finalizer after its increment: one bit changed in a key
// changes about half the bits of its term.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace detail

// keys[0, hashed) go into *checksum; the first i < ordered - 1 with
// keys[i + 1] before keys[i] goes into *first_bad (which holds `ordered`,
// meaning none, when launched).  A grid-stride loop: any grid covers any n.
template <int NT, class Key, class Order>
__global__ void __launch_bounds__(NT) kernel_verify(const Key* keys, i64 hashed, i64 ordered,
                                                    unsigned long long* checksum, i64* first_bad) {
  const Order precedes;
  unsigned long long sum = 0;
  i64 bad = ordered;
  const i64 end = hashed > ordered - 1 ? hashed : ordered - 1;
  const i64 stride = (i64)gridDim.x * NT;
  for (i64 i = (i64)blockIdx.x * NT + threadIdx.x; i < end; i += stride) {
    const Key key = keys[i];
    if (i < hashed) sum += detail::mix64(detail::key_bits(key));
    // A thread's indices only grow: its first out-of-order pair is its least.
    if (bad == ordered && i + 1 < ordered && precedes(keys[i + 1], key)) bad = i;
  }
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) {
    sum += __shfl_xor_sync(~0u, sum, d);
    const i64 other = __shfl_xor_sync(~0u, bad, d);
    bad = other < bad ? other : bad;
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(checksum, sum);
    if (bad < ordered) atomicMin(first_bad, bad);
  }
}

}  // namespace gpusort
