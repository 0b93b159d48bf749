// A float's bits as its order key, in registers: gpusort/keys/order.py's schemes
// "exact" and "tied" (its encode does the same with array operations).
//
// U is the unsigned integer of the float's width; sign and nans are the
// constants of order.FloatBits (the sign bit, and how many NaN patterns one
// sign has), inf and nan the bits of +inf and of the canonical NaN.  The
// sort's exact_keys.cuh loads float16/float32 keys through
// gpusort_exact_key; CuPy's fused kernels (gpusort/gpu.py, the top-k pass
// of kernel_beyond.cuh) include this file as their preamble.  Free functions
// outside any namespace: CuPy's elementwise kernels name them as they are.
#pragma once

// Every bit set where x's top bit is set, else none.
template <class U>
__device__ __forceinline__ U gpusort_all_if_top(U x) {
  return ((x >> (8 * sizeof(U) - 1)) & 1) ? (U)~(U)0 : (U)0;
}

// Scheme "exact": a bijection onto unsigned integers that sort ascending
// (descending: largest first), every NaN last in both directions.
template <class U>
__device__ __forceinline__ U gpusort_exact_key(U x, U sign, U nans, bool descending) {
  U t = (U)(x ^ (gpusort_all_if_top(x) | sign));  // negatives flipped, positives' sign set
  if (descending) t = (U)~t;
  return (U)(t - nans);  // the NaNs at the bottom rotate to the top
}

// Scheme "tied": as "exact", with -0.0 made 0.0 and every NaN one NaN, so
// that keys the float order ties are equal.
template <class U>
__device__ __forceinline__ U gpusort_tied_key(U x, U sign, U nans, U inf, U nan, bool descending) {
  const U magnitude = (U)(x & (U)~sign);
  x = magnitude == 0 ? (U)0 : magnitude > inf ? nan : x;  // one zero, one NaN
  return gpusort_exact_key(x, sign, nans, descending);
}

// Position i of a row-major (rows, length) array packed into one unsigned
// word: (the row number,) the key, the position in its row, each at its
// shift (gpusort/keys/composite.py's Layout); row_shift < 0: no row number.
template <class U, class T>
__device__ __forceinline__ U gpusort_pack_position(T key, long long i, long long length, int row_shift,
                                                   int key_shift, int index_shift) {
  const U row = row_shift < 0 ? U(0) : U(i / length) << row_shift;
  return row | (U(key) << key_shift) | (U(i % length) << index_shift);
}

// The position a packed word holds at shift, under mask.
template <class U>
__device__ __forceinline__ long long gpusort_unpack_position(U packed, int shift, U mask) {
  return (long long)((packed >> shift) & mask);
}
