// Multiway Merge Path: where a cross-diagonal cuts the merge of K sorted runs,
// O(log n) rounds deep with K independent reads a round.
//
// Elements are ordered by (key, run, position), which is the stable merge's
// order.  For a granularity h (a power of two) call the elements at
// positions h - 1, 2h - 1, ... of each run its h-samples, and let T(h) be
// the floor(diag / h) smallest h-samples of all runs.  Every run's share of
// T(h) is a prefix of its h-samples, so T(h) is a vector a of multiples of
// h; T(1) is the first diag outputs, the answer.  Going from T(2h) to T(h)
// (the idea of Varman et al. 1991 and of MCSTL's multiseq_partition):
// T(2h) taken as h-samples is every h-sample left of a, 2 floor(diag / 2h)
// of them, one short of floor(diag / h) or not; the one missing is the
// smallest next h-sample of a run.  Then, while the largest taken h-sample
// follows the smallest untaken one, the two trade places.  The result is
// the set of smallest h-samples of its size: T(h).  Trades are few (below
// one a round on random keys), and each reads two elements.
//
// Runs are read as if padded with elements after every key (ordered among
// themselves by run and position), so every run has an h-sample wherever
// the rounds look; they are never read, and no pad is among the answer's
// diag <= sum(counts) elements.
#pragma once

#include "types.cuh"

namespace gpusort {

namespace detail {

// One run's element as the search sees it: a key, or a pad past the run's end.
template <class Key>
struct probe {
  Key key;
  bool pad;
  i64 position;
};

template <class Key>
__device__ __forceinline__ probe<Key> probe_at(const Key* run, i64 count, i64 position) {
  probe<Key> p{Key(), position >= count, position};
  if (!p.pad) p.key = run[position];
  return p;
}

// x (of run rx) strictly before y (of run ry) in (key, run, position) order.
template <class Key, class Order>
__device__ __forceinline__ bool probe_precedes(const probe<Key>& x, int rx, const probe<Key>& y,
                                               int ry, Order precedes) {
  if (x.pad != y.pad) return y.pad;
  if (!x.pad) {
    if (precedes(x.key, y.key)) return true;
    if (precedes(y.key, x.key)) return false;
  }
  return rx != ry ? rx < ry : x.position < y.position;
}

}  // namespace detail

// splits[r] <- how many elements of runs[r][0, counts[r]) are among the first
// `diag` outputs of their stable K-way merge (ties: lower run first), for
// 0 <= diag <= sum(counts).
template <int K, class Key, class Order>
__device__ __forceinline__ void multiway_path(const Key* const (&runs)[K], const i64 (&counts)[K],
                                              i64 diag, i64 (&splits)[K], Order precedes) {
  using detail::probe;
  using detail::probe_at;
  // The loops below run over constant r and test r against the run they act
  // on, so every per-run array stays in registers.
  const auto before = [&](const probe<Key>& x, int rx, const probe<Key>& y, int ry) {
    return detail::probe_precedes(x, rx, y, ry, precedes);
  };
  probe<Key> last[K], next[K];  // last taken h-sample (if any), first untaken one
#pragma unroll
  for (int r = 0; r < K; ++r) splits[r] = 0;
  if (diag <= 0) return;
  // h = 2^shift; shifts, not 64-bit divisions, which the GPU runs in software.
  int shift = 0;
  while (i64(2) << shift <= diag) ++shift;  // T(2h) is empty: floor(diag / 2h) = 0
  for (; shift >= 0; --shift) {
    const i64 h = i64(1) << shift;
    i64 taken = 0;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      next[r] = probe_at(runs[r], counts[r], splits[r] + h - 1);
      taken += splits[r] >> shift;
    }
    // `take` moves run t's next h-sample into the set; `give` moves run g's
    // last one out of it.
    const auto take = [&](int t) {
#pragma unroll
      for (int r = 0; r < K; ++r)
        if (r == t) {
          splits[r] += h;
          last[r] = next[r];
          next[r] = probe_at(runs[r], counts[r], splits[r] + h - 1);
        }
    };
    const auto give = [&](int g) {
#pragma unroll
      for (int r = 0; r < K; ++r)
        if (r == g) {
          splits[r] -= h;
          next[r] = last[r];
          if (splits[r]) last[r] = probe_at(runs[r], counts[r], splits[r] - 1);
        }
    };
    // The run of the smallest next h-sample, and that h-sample.
    const auto smallest_next = [&](probe<Key>& least) {
      int s = 0;
      least = next[0];
#pragma unroll
      for (int r = 1; r < K; ++r)
        if (before(next[r], r, least, s)) {
          s = r;
          least = next[r];
        }
      return s;
    };
    probe<Key> least, most;
    if ((diag >> shift) > taken) take(smallest_next(least));
    for (;;) {
      int l = -1;  // the run of the largest taken h-sample, `most`
#pragma unroll
      for (int r = 0; r < K; ++r)
        if (splits[r] && (l < 0 || before(most, l, last[r], r))) {
          l = r;
          most = last[r];
        }
      const int s = smallest_next(least);
      if (l < 0 || !before(least, s, most, l)) break;
      give(l);
      take(s);
    }
  }
}

}  // namespace gpusort
