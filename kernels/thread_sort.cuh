// One thread sorts the VT keys it holds in registers.
#pragma once

#include "types.cuh"

namespace gpusort {

template <class T>
__device__ __forceinline__ void swap(T& x, T& y) {
  const T t = x;
  x = y;
  y = t;
}

// Keys that compare equal only when they are the same bits: integers, and
// the unsigned words that float and packed sorts compare (exact_keys.cuh,
// packed_positions.cuh).  Floats tie -0.0 with +0.0 and NaN with NaN
// (order.cuh), so which of two tied floats comes first shows in the output.
template <class Key>
constexpr bool ties_are_identical = true;
template <>
constexpr bool ties_are_identical<f16> = false;
template <>
constexpr bool ties_are_identical<float> = false;
template <>
constexpr bool ties_are_identical<double> = false;

// Odd-even transposition sort: VT rounds of compare-exchange between
// neighbours, alternately starting at 0 and 1.  It takes O(VT^2) compares
// where a sorting network would take O(VT log^2 VT), but it only ever swaps
// neighbours and only when the right one strictly precedes, so it is stable,
// and every index is a compile-time constant, so keys stay in registers.
template <int VT, class Key, class Value, class Order>
__device__ __forceinline__ void odd_even_transposition_sort(Key (&keys)[VT], Value (&values)[VT],
                                                            Order precedes) {
#pragma unroll
  for (int round = 0; round < VT; ++round) {
#pragma unroll
    for (int i = round & 1; i + 1 < VT; i += 2) {
      if (precedes(keys[i + 1], keys[i])) {
        swap(keys[i], keys[i + 1]);
        if constexpr (has_values<Value>) swap(values[i], values[i + 1]);
      }
    }
  }
}

namespace detail {

// Batcher's merge exchange (Knuth, TAOCP 5.2.2, Algorithm M), its loops
// unrolled by templates so that every index is a compile-time constant and
// the keys stay in registers.  One row of step M3: compare-exchange keys
// I and I + D for every I with (I & P) == R.
template <int P, int R, int D, int I, int VT, class Key, class Order>
__device__ __forceinline__ void exchange_row(Key (&keys)[VT], Order precedes) {
  if constexpr (I + D < VT) {
    if constexpr ((I & P) == R) {
      if (precedes(keys[I + D], keys[I])) swap(keys[I], keys[I + D]);
    }
    exchange_row<P, R, D, I + 1>(keys, precedes);
  }
}

// Steps M3-M4 for one P: the rows for (R, D) = (0, P), then (P, Q - P) as Q halves down to P.
template <int P, int Q, int R, int D, int VT, class Key, class Order>
__device__ __forceinline__ void exchange_rows(Key (&keys)[VT], Order precedes) {
  exchange_row<P, R, D, 0>(keys, precedes);
  if constexpr (Q != P) exchange_rows<P, Q / 2, P, Q - P>(keys, precedes);
}

// Step M5: P from the largest power of two below VT down to 1.
template <int P, int TOP, int VT, class Key, class Order>
__device__ __forceinline__ void merge_exchange(Key (&keys)[VT], Order precedes) {
  if constexpr (P > 0) {
    exchange_rows<P, TOP, 0, P>(keys, precedes);
    merge_exchange<P / 2, TOP>(keys, precedes);
  }
}

// 2^(ceil(log2 VT) - 1): the largest power of two below VT.
template <int VT>
constexpr int top_power = VT <= 2 ? 1 : 2 * top_power<(VT + 1) / 2>;

}  // namespace detail

// The VT keys (and values) in order.  Keys alone whose ties are identical
// need no stable sort, and take a sorting network: Batcher's merge
// exchange, 122 compares for 23 keys where odd-even transposition takes
// 253.  Everything else takes odd-even transposition, which is stable.
template <int VT, class Key, class Value, class Order>
__device__ __forceinline__ void thread_sort(Key (&keys)[VT], Value (&values)[VT], Order precedes) {
  if constexpr (!has_values<Value> && ties_are_identical<Key> && VT > 1) {
    constexpr int top = detail::top_power<VT>;
    detail::merge_exchange<top, top>(keys, precedes);
  } else {
    odd_even_transposition_sort(keys, values, precedes);
  }
}

}  // namespace gpusort
