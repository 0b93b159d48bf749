// Which runs a merge pass pairs up, and where each pair's output goes; and
// the same for a four-way pass, which groups four runs.
//
// A pass merges pair after pair of sorted runs.  Pair p merges
//   a[2pL, 2pL + L) with b[2pL, 2pL + L), each clipped to its list's length,
// into out[2pL, ...), where L is the run length.  Two uses:
//   - a mergesort pass over runs of length L in src: a = src, b = src + L,
//     a_count = n, b_count = n - L, so pair p is runs 2p and 2p + 1;
//   - a merge of two separate sorted arrays: a single pair, L >= both counts.
// Tiles of NV outputs never straddle two pairs: in a mergesort pass 2L is a
// multiple of NV, and a single merge has one pair.  In a sort of buckets
// (segments.cuh) each bucket is such a mergesort pass of its own, with
// positions counted from the bucket's start.
#pragma once

#include "segments.cuh"

namespace gpusort {

struct run_pair {
  i64 begin;    // offset of the pair in a, in b and in the output
  i64 a_count;  // length of its run from a
  i64 b_count;  // length of its run from b
};

struct merge_pass {
  i64 run_length;
  i64 a_count;
  i64 b_count;

  // The pass over tile `at`'s segment: a bucket's, or the one given.
  static __device__ __forceinline__ merge_pass of(const segments& segs, const tile_place& at,
                                                  i64 run_length, i64 a_count, i64 b_count) {
    return segs.bucketed() ? merge_pass{run_length, at.count, at.count - run_length}
                           : merge_pass{run_length, a_count, b_count};
  }

  // The pair that output position `out` belongs to.
  __device__ __forceinline__ run_pair pair_at(i64 out) const {
    const i64 begin = out / (2 * run_length) * (2 * run_length);
    return {begin, clamp(a_count - begin), clamp(b_count - begin)};
  }

 private:
  __device__ __forceinline__ i64 clamp(i64 rest) const {
    return rest < 0 ? 0 : rest < run_length ? rest : run_length;
  }
};

// A four-way mergesort pass over runs of length L in src: group g merges
// runs 4g .. 4g + 3, src[4gL + rL, 4gL + rL + L) clipped to the count, into
// out[4gL, ...).  4L is a multiple of NV, so tiles never straddle groups.
struct run_group {
  i64 begin;      // offset of the group in src and in the output
  i64 counts[4];  // length of each of its runs
};

struct merge_pass_four {
  i64 run_length;
  i64 count;

  // The group that output position `out` belongs to.
  __device__ __forceinline__ run_group group_at(i64 out) const {
    run_group g;
    g.begin = out / (4 * run_length) * (4 * run_length);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const i64 rest = count - g.begin - r * run_length;
      g.counts[r] = rest < 0 ? 0 : rest < run_length ? rest : run_length;
    }
    return g;
  }
};

}  // namespace gpusort
