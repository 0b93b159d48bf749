// How float16 and float32 keys come into a sort and leave it: as their exact
// order keys, unsigned integers of the same width.
//
// The kernels compare these floats as sign-magnitude integers (order.cuh),
// several instructions a compare; an unsigned integer compares in one, so a
// float sort runs at an integer sort's speed on these keys instead.  The
// map is gpusort/keys/order.py's scheme "exact" (float_keys.cuh's
// gpusort_exact_key): a bijection, so the last kernel stores the input's
// own bits, inverting it here; NaNs of either sign go last in both
// directions.  Unlike the float order it orders -0.0 just before 0.0 (after
// it when descending) and NaNs by their bits: ties the float order keeps
// in input order, which kernel_tie_bounds finds for the host to restore.
//
// A policy of packed_positions.cuh's kind, both ways: load<Word>(p, i)
// gives float i as its exact key, store(p, i, word) writes a key back as
// the float's bits.
#pragma once

#include "float_keys.cuh"
#include "order.cuh"

namespace gpusort {

namespace detail {
template <class Float>
__device__ __forceinline__ Float of_bits(unsigned int b);
template <>
__device__ __forceinline__ float of_bits<float>(unsigned int b) { return __uint_as_float(b); }
template <>
__device__ __forceinline__ f16 of_bits<f16>(unsigned int b) { return f16{(unsigned short)b}; }
}  // namespace detail

template <class Float, bool Descending>
struct exact_keys {
  using L = detail::ieee_layout<Float>;
  using bits_t = typename L::bits_t;
  static constexpr bits_t sign = L::sign;
  static constexpr bits_t mask = sign | (sign - 1);
  static constexpr bits_t nans = (sign - 1) - L::inf;  // NaN bit patterns of one sign

  template <class Word>
  using input = Float;
  template <class Word>
  using output = Float;

  template <class Word>
  static __device__ __forceinline__ Word load(const Float* p, i64 i) {
    static_assert(sizeof(Word) == sizeof(Float), "an exact key is as wide as its float");
    return gpusort_exact_key<Word>(Word(L::bits(p[i])), Word(sign), Word(nans), Descending);
  }

  template <class Word>
  static __device__ __forceinline__ void store(Float* p, i64 i, Word word) {
    bits_t t = (bits_t(word) + nans) & mask;
    if (Descending) t = ~t & mask;
    p[i] = detail::of_bits<Float>((t & sign) ? t ^ sign : ~t & mask);  // a set top bit: not negative
  }
};

}  // namespace gpusort
