// One thread's share of a merge in shared memory: exactly VT outputs.
#pragma once

#include "merge_path.cuh"

namespace gpusort {

// Serial merge of VT elements from shared[a, a_end) and shared[b, b_end)
// into registers, with each output's shared-memory position in `sources`
// (the caller gathers values through them).  The loop is unrolled, so
// `keys` and `sources` are indexed by constants and live in registers; only
// the shared-memory reads are dynamic.  Each step reads one new key, from
// the list it just took from, and never past that list's end: a thread whose
// window runs past the tile's last element keeps producing (unused) outputs
// without touching memory it does not own.  Tags (merge_path.cuh) count
// positions in `shared`.
template <int VT, class Key, class Order, class Tags = untagged>
__device__ __forceinline__ void serial_merge(const Key* shared, int a, int a_end, int b, int b_end,
                                             Key (&keys)[VT], int (&sources)[VT], Order precedes,
                                             Tags tags = Tags()) {
  Key a_key{}, b_key{};
  if (a < a_end) a_key = shared[a];
  if (b < b_end) b_key = shared[b];
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    // Ties take a: a holds the earlier elements, so the merge is stable.
    const bool take_a =
        b >= b_end || (a < a_end && !precedes_at(b_key, b, a_key, a, precedes, tags));
    keys[i] = take_a ? a_key : b_key;
    sources[i] = take_a ? a : b;
    const int next = (take_a ? a : b) + 1;
    if (take_a)
      a = next;
    else
      b = next;
    if (next < (take_a ? a_end : b_end)) {
      const Key key = shared[next];
      if (take_a)
        a_key = key;
      else
        b_key = key;
    }
  }
}

// Outputs [diag, diag + VT) of merging shared[a_begin, a_end) with
// shared[a_end, b_end): a merge path search inside the tile, then the serial
// merge from where it lands.  Tags count positions from a_begin and a_end.
template <int VT, class Key, class Order, class Tags = untagged>
__device__ __forceinline__ void thread_merge(const Key* shared, int a_begin, int a_end, int b_end,
                                             int diag, Key (&keys)[VT], int (&sources)[VT],
                                             Order precedes, Tags tags = Tags()) {
  const int a_taken = merge_path(shared + a_begin, a_end - a_begin, shared + a_end, b_end - a_end,
                                 diag, precedes, tags);
  serial_merge<VT>(shared, a_begin + a_taken, a_end, a_end + diag - a_taken, b_end, keys, sources,
                   precedes, tags.shifted(a_begin, a_end));
}

}  // namespace gpusort
