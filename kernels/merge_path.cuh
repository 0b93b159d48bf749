// Merge Path search: where a cross-diagonal cuts the merge of two sorted lists.
//
// Merge Path (Green, McColl, Bader, "GPU Merge Path", ICS 2012; Odeh, Green,
// Mwassi, Shmueli, Birk, "Merge Path - parallel merging made simple", IPDPSW
// 2012): the first `diag` outputs of merge(a, b) are exactly a[0, i) and
// b[0, diag - i) for one i, found by a binary search along the diagonal.
// Splitting the output at evenly spaced diagonals gives every tile, and every
// thread, the same amount of work whatever the data.
#pragma once

#include "types.cuh"

namespace gpusort {

// Tags let one two-way merge do two at once (block_merge_four.cuh): with
// a = p ++ q and b = r ++ s, ordering elements by (tag, key), where the tag
// says "from q or s", merges p with r, then q with s.  A plain merge is
// untagged; its tags are constant and compile away.
struct untagged {
  template <class Index>
  __device__ __forceinline__ bool a(Index) const { return false; }
  template <class Index>
  __device__ __forceinline__ bool b(Index) const { return false; }
  __device__ __forceinline__ untagged shifted(int, int) const { return {}; }
};

struct pair_tags {
  int a_second;  // where the second merge's part of a begins (q), counted from a's start
  int b_second;  // the same for b (s)
  __device__ __forceinline__ bool a(int i) const { return i >= a_second; }
  __device__ __forceinline__ bool b(int j) const { return j >= b_second; }
  // The same tags for positions counted from a_begin and b_begin instead.
  __device__ __forceinline__ pair_tags shifted(int a_begin, int b_begin) const {
    return {a_begin + a_second, b_begin + b_second};
  }
};

// b's element j (key bk) strictly precedes a's element i (key ak).
template <class Index, class Key, class Order, class Tags>
__device__ __forceinline__ bool precedes_at(Key bk, Index j, Key ak, Index i, Order precedes,
                                            Tags tags) {
  const bool ta = tags.a(i), tb = tags.b(j);
  return ta != tb ? tb < ta : precedes(bk, ak);
}

// The number of a's elements among the first `diag` outputs of the stable
// merge of a[0, a_count) and b[0, b_count): ties take a's element first.
// Works on global memory (Index = i64) and shared memory (Index = int).
template <class Index, class Key, class Order, class Tags = untagged>
__device__ __forceinline__ Index merge_path(const Key* a, Index a_count, const Key* b,
                                            Index b_count, Index diag, Order precedes,
                                            Tags tags = Tags()) {
  Index lo = diag > b_count ? diag - b_count : 0;
  Index hi = diag < a_count ? diag : a_count;
  while (lo < hi) {
    const Index mid = (lo + hi) >> 1;
    // a[mid] is among the first diag outputs unless b[diag - 1 - mid],
    // which would be output together with a[0, mid), strictly precedes it.
    if (precedes_at(b[diag - 1 - mid], diag - 1 - mid, a[mid], mid, precedes, tags))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace gpusort
