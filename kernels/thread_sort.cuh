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

}  // namespace gpusort
