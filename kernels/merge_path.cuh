// Merge Path search: where a cross-diagonal cuts the merge of two sorted lists.
//
// Merge Path (Green, McColl, Bader, "GPU Merge Path", ICS 2012; Odeh, Green,
// Mwassi, Shmueli, Birk, "Merge Path - parallel merging made simple", IPDPSW
// 2012): the first `diag` outputs of merge(a, b) are exactly a[0, i) and
// b[0, diag - i) for one i, found by a binary search along the diagonal.
// Splitting the output at evenly spaced diagonals gives every tile, and every
// thread, the same amount of work whatever the data.
#pragma once

#include "group_search.cuh"

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

// merge_path in global memory, searched by a group of LANES lanes
// (group_search.cuh); every lane of the group gets the answer.
template <int LANES, class Key, class Order>
__device__ __forceinline__ i64 group_merge_path(const Key* a, i64 a_count, const Key* b,
                                                i64 b_count, i64 diag, Order precedes, int lane) {
  const i64 lo = diag > b_count ? diag - b_count : 0;
  const i64 hi = diag < a_count ? diag : a_count;
  return group_partition_point<LANES>(
      lo, hi, [&](i64 i) { return precedes(b[diag - 1 - i], a[i]); }, lane);
}

// How many elements of sorted[0, count) come before `key` where sorted is
// merged stably with a run holding key: those that precede it, and with
// ties_first (sorted is the earlier run) those equal to it too.  One lane's
// partition point (group_search.cuh): the first element that comes after.
template <class Key, class Order>
__device__ __forceinline__ int merged_rank(const Key* sorted, int count, Key key, bool ties_first,
                                           Order precedes) {
  return int(group_partition_point<1>(
      0, count,
      [&](i64 i) { return ties_first ? precedes(key, sorted[i]) : !precedes(sorted[i], key); }, 0));
}

// merged_rank over sorted[0, count) whose every FENCE-th element is also in
// `fences` (fences[j] = sorted[j * FENCE], in shared memory): the fences
// narrow the search to the FENCE - 1 elements between two of them, which
// lie in one or two cache lines of `sorted`.
template <int FENCE, class Key, class Order>
__device__ __forceinline__ int fenced_rank(const Key* sorted, const Key* fences, int count,
                                           Key key, bool ties_first, Order precedes) {
  // Fences [0, c) come before key and fence c does not: so does every
  // element up to fence c - 1, and none from fence c on.
  const int c = merged_rank(fences, (count + FENCE - 1) / FENCE, key, ties_first, precedes);
  const int lo = c ? (c - 1) * FENCE + 1 : 0;
  const int hi = c * FENCE < count ? c * FENCE : count;
  return lo + merged_rank(sorted + lo, hi - lo, key, ties_first, precedes);
}

}  // namespace gpusort
