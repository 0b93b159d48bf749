// Which bucket of a bucket pass (kernel_buckets.cuh) a key falls in: one
// thread, a binary search over splitters in shared memory.
#pragma once

#include "types.cuh"

namespace gpusort {

// A bucket pass splits the keys into this many buckets, one per thread of
// its CTA, a byte each.  256 buckets take eight merge levels off a sort of
// evenly spread keys, and a tile of the scatter still writes each bucket's
// keys in runs of 12 (8-byte keys) to 24 on average.
constexpr int BUCKETS = 256;

// The BUCKETS - 1 splitters (in order) as a search tree in breadth-first
// (Eytzinger) order, as a bucket pass keeps them in shared memory: node e
// (1-based) has children 2e and 2e + 1, so the nodes a search step visits
// lie side by side.  In sorted order the search's later steps read
// splitters 32 apart, all in one bank.  tree[0] is unused.

// tree <- splitter i, splitters[(i + 1) * step] (kernel_splitters.cuh's
// with step 1; every step-th key of a sorted sample tile for sub-buckets),
// at its node; called by threads i = 0 .. BUCKETS - 2.
template <class Key>
__device__ __forceinline__ void place_splitter(const Key* splitters, i64 step, int i, Key* tree) {
  // Splitter i is the (i + 1)-th node in order of the perfect tree of
  // BUCKETS - 1 nodes: (i + 1) = odd * 2^z puts it z levels above the leaves.
  const int p = i + 1, z = __ffs(p) - 1, depth = 7 - z;
  static_assert(BUCKETS == 256, "the tree of splitters has 8 levels");
  tree[(1 << depth) + (p >> (z + 1))] = splitters[p * step];
}

// How many splitters `key` does not precede: keys equal to a splitter go
// above it, so equal keys share a bucket, and the bucket never decreases
// along the order.
template <class Key, class Order>
__device__ __forceinline__ int bucket_of(Key key, const Key* tree, Order precedes) {
  int e = 1;
#pragma unroll
  for (int level = 0; level < 8; ++level) e = 2 * e + !precedes(key, tree[e]);
  return e - BUCKETS;
}

}  // namespace gpusort
