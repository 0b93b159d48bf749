// The few types every kernel file needs.  NVRTC compiles without the C++
// standard library, so nothing here includes one.
#pragma once

namespace gpusort {

using i64 = long long;

// IEEE binary16 keys travel as their bits; order.cuh compares them.
struct f16 {
  unsigned short bits;
};
static_assert(sizeof(f16) == 2, "f16 must be stored as exactly its 16 bits");

// The value type of a keys-only sort: kernels compile every value move away
// (has_values), so the keys-only path is the key-value path, not a copy of it.
struct no_value {};

template <class Value>
constexpr bool has_values = true;
template <>
constexpr bool has_values<no_value> = false;

}  // namespace gpusort
