// The order keys are sorted in: ascending or descending, stable, NaN last in
// both directions (as NumPy puts it), and -0.0 tied with +0.0.  The kernels
// compare keys (operator()); a packed argsort (packed_positions.cuh) sorts
// each key's radix word instead, an unsigned integer in the same order
// (radix()).
//
// float32 and float16 are compared as sign-magnitude integers, not with
// float compare instructions: CuPy compiles with -ftz=true, which makes
// `a < b` on float32 flush subnormals to zero, while NumPy orders them (and
// float16 has no compare of its own).  The integer form is exact and treats
// -0.0 and +0.0 as one number.  -ftz touches only float32, so doubles use
// the hardware compare: the integer form would make float64 sorts slower
// than int64 ones.
#pragma once

#include "types.cuh"

namespace gpusort {

namespace detail {

// Bit layout of a floating-point key, widened to a machine word.
template <class Key>
struct ieee_layout;
template <>
struct ieee_layout<f16> {
  using bits_t = unsigned int;  // 16 bits, widened: no promotion surprises
  using signed_t = int;
  static constexpr bits_t sign = 0x8000u;
  static constexpr bits_t inf = 0x7c00u;
  static __device__ __forceinline__ bits_t bits(f16 x) { return x.bits; }
};
template <>
struct ieee_layout<float> {
  using bits_t = unsigned int;
  using signed_t = int;
  static constexpr bits_t sign = 0x80000000u;
  static constexpr bits_t inf = 0x7f800000u;
  static __device__ __forceinline__ bits_t bits(float x) { return __float_as_uint(x); }
};

// a strictly before b; NaNs tie with each other and follow every number.
template <bool Descending, class Key>
__device__ __forceinline__ bool ieee_precedes(Key a, Key b) {
  using L = ieee_layout<Key>;
  using S = typename L::signed_t;
  const auto ma = L::bits(a) & ~L::sign, mb = L::bits(b) & ~L::sign;
  if (ma > L::inf) return false;  // a is NaN
  if (mb > L::inf) return true;   // b is NaN, a is not
  const S va = (L::bits(a) & L::sign) ? -S(ma) : S(ma);  // -0.0 -> 0
  const S vb = (L::bits(b) & L::sign) ? -S(mb) : S(mb);
  return Descending ? vb < va : va < vb;
}

// last_key: the pad key of order<Descending>, picked by overloading on a
// typed null pointer.  Integers: the largest (smallest when descending).
template <bool Descending, class Key>
__device__ __forceinline__ Key last_key(const Key*) {
  const bool is_signed = Key(-1) < Key(0);
  const Key lowest = is_signed ? Key(1ull << (8 * sizeof(Key) - 1)) : Key(0);
  return Descending ? lowest : Key(~lowest);
}
// Floats: a NaN, which is last in both directions.
template <bool Descending>
__device__ __forceinline__ f16 last_key(const f16*) { return f16{0x7e00u}; }
template <bool Descending>
__device__ __forceinline__ float last_key(const float*) { return __uint_as_float(0x7fc00000u); }
template <bool Descending>
__device__ __forceinline__ double last_key(const double*) {
  return __longlong_as_double(0x7ff8000000000000ll);
}

// Radix words are 32 bits: keys of up to 4 bytes (what a packed argsort
// packs).  Only the key's own low 8 * sizeof(Key) bits vary.

// Integers: two's complement with the sign bit flipped is offset binary,
// whose unsigned order is the signed one; descending complements it.
template <bool Descending, class Key>
__device__ __forceinline__ unsigned int integer_radix(Key x) {
  static_assert(sizeof(Key) <= 4, "radix words are 32 bits");
  using U = unsigned int;
  constexpr int bits = 8 * sizeof(Key);
  constexpr U mask = bits == 32 ? ~U(0) : (U(1) << bits) - 1;
  const bool is_signed = Key(-1) < Key(0);
  U u = U(x) & mask;
  if (is_signed) u ^= U(1) << (bits - 1);
  return Descending ? ~u & mask : u;
}

// Floats: the usual flip (negative: all bits; positive: the sign bit), after
// -0.0 becomes +0.0; every NaN is the largest word in both directions (the
// numbers' words, complemented or not, stay below it: their largest is +inf's).
template <bool Descending, class Key>
__device__ __forceinline__ unsigned int ieee_radix(Key x) {
  using L = ieee_layout<Key>;
  using U = typename L::bits_t;
  constexpr U mask = L::sign | (L::sign - 1);
  U b = L::bits(x);
  const U magnitude = b & (L::sign - 1);
  if (magnitude > L::inf) return mask;
  if (magnitude == 0) b = 0;
  const U u = (b & L::sign) ? ~b & mask : b | L::sign;
  return Descending ? ~u & mask : u;
}

}  // namespace detail

// The comparator every kernel takes as its Order parameter.
template <bool Descending>
struct order {
  static constexpr bool descending = Descending;

  // Integer keys (bool travels as unsigned char).
  template <class Key>
  __device__ __forceinline__ bool operator()(Key a, Key b) const {
    return Descending ? b < a : a < b;
  }
  __device__ __forceinline__ bool operator()(f16 a, f16 b) const {
    return detail::ieee_precedes<Descending>(a, b);
  }
  __device__ __forceinline__ bool operator()(float a, float b) const {
    return detail::ieee_precedes<Descending>(a, b);
  }
  __device__ __forceinline__ bool operator()(double a, double b) const {
    const bool ordered = Descending ? b < a : a < b;  // false if either is NaN
    return ordered || (b != b && a == a);             // a number precedes NaN
  }

  // The radix word of a key of up to 4 bytes: radix(a) < radix(b) exactly
  // when a precedes b, and the words are equal exactly when neither does.
  template <class Key>
  static __device__ __forceinline__ unsigned int radix(Key a) {
    return detail::integer_radix<Descending>(a);
  }
  static __device__ __forceinline__ unsigned int radix(f16 a) {
    return detail::ieee_radix<Descending>(a);
  }
  static __device__ __forceinline__ unsigned int radix(float a) {
    return detail::ieee_radix<Descending>(a);
  }

  // A key that no key comes after.  A partial tile is padded with it; the
  // stable sort keeps real keys equal to it ahead of the pads (a sort of
  // keys whose ties are identical bits need not: thread_sort.cuh), so the
  // pads are exactly the tile's tail and are never stored.
  template <class Key>
  static __device__ __forceinline__ Key last() {
    return detail::last_key<Descending>(static_cast<const Key*>(nullptr));
  }
};

using ascending = order<false>;
using descending = order<true>;

}  // namespace gpusort
