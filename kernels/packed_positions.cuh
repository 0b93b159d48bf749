// How a tile's keys come into a blocksort and leave a merge: as they are, or,
// for an argsort, packed with their positions into one word.
//
// A packed argsort sorts one 64-bit word per key: the key's radix word
// (order.cuh) in the high half, its position in the low half.  The words
// are distinct, their order is the keys' order with ties in input order
// (what stability asks), and a keys-only sort moves them faster than a
// key-value sort moves keys and positions.  Packing as the blocksort loads
// and unpacking as the last pass stores saves three elementwise passes over
// the words: make the radix words, pack, unpack.  Positions take the low
// 32 bits, so a packed argsort holds fewer than 2**32 keys of at most 4
// bytes.
//
// Policies: load<Key>(p, i) gives element i of the input as a Key; store(p,
// i, key) writes a Key as element i of the output; input<Key> and
// output<Key> are the element types of those arrays.
#pragma once

#include "order.cuh"

namespace gpusort {

struct as_is {
  template <class Key>
  using input = Key;
  template <class Key>
  using output = Key;
  template <class Key>
  static __device__ __forceinline__ Key load(const Key* p, i64 i) {
    return p[i];
  }
  template <class Key>
  static __device__ __forceinline__ void store(Key* p, i64 i, Key key) {
    p[i] = key;
  }
};

// Loads In keys (sorted by KeyOrder) as packed words.
template <class In, class KeyOrder>
struct pack_positions {
  template <class Word>
  using input = In;
  template <class Word>
  static __device__ __forceinline__ Word load(const In* p, i64 i) {
    static_assert(sizeof(Word) == 8 && sizeof(In) <= 4,
                  "a packed word is a 32-bit radix word above a 32-bit position");
    return Word(KeyOrder::radix(p[i])) << 32 | (unsigned int)i;  // i < 2**32: the low word alone
  }
};

// Stores a packed word's position as an int64.
struct unpack_positions {
  template <class Word>
  using output = long long;
  template <class Word>
  static __device__ __forceinline__ void store(long long* p, i64 i, Word word) {
    p[i] = (long long)(unsigned int)word;
  }
};

}  // namespace gpusort
