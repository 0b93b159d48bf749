// Moving a tile between global memory, shared memory and registers.
//
// Global memory is touched in "strided" order: in round i, thread tid
// handles tile element NT * i + tid, so each warp reads or writes 32
// consecutive elements at once (coalesced).  Merging works in "thread
// order": thread tid holds elements VT * tid + i, i = 0 .. VT-1, in
// registers.  Shared memory converts one order into the other; with VT odd,
// the 32 lanes of a warp reading at stride VT fall into 32 different banks.
//
// Barriers: each function begins by writing shared memory, so the caller
// must make sure no thread still reads it; a function that writes then
// reads shared memory has its own barrier in between.
#pragma once

#include "packed_positions.cuh"

namespace gpusort {

template <int VT, class T>
__device__ __forceinline__ void thread_to_shared(const T (&x)[VT], int tid, T* shared) {
#pragma unroll
  for (int i = 0; i < VT; ++i) shared[VT * tid + i] = x[i];
}

template <int VT, class T>
__device__ __forceinline__ void shared_to_thread(const T* shared, int tid, T (&x)[VT]) {
#pragma unroll
  for (int i = 0; i < VT; ++i) x[i] = shared[VT * tid + i];
}

// x (thread order) <- elements [begin, begin + count) of global, read
// through the Load policy (packed_positions.cuh); elements past count are
// `pad`.
template <int NT, int VT, class Load, class In, class T>
__device__ __forceinline__ void load_to_thread_order(const In* global, i64 begin, int count, T pad,
                                                     T (&x)[VT], T* shared, int tid) {
  T strided[VT];  // every load is issued before the first store waits on one
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    strided[i] = j < count ? Load::template load<T>(global, begin + j) : pad;
  }
#pragma unroll
  for (int i = 0; i < VT; ++i) shared[NT * i + tid] = strided[i];
  __syncthreads();
  shared_to_thread<VT>(shared, tid, x);
}

// global[0, count) <- x (thread order), written through the Store policy.
template <int NT, int VT, class Store, class T, class Out>
__device__ __forceinline__ void store_from_thread_order(const T (&x)[VT], int count, Out* global,
                                                        T* shared, int tid) {
  thread_to_shared<VT>(x, tid, shared);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    if (j < count) Store::store(global, j, shared[j]);
  }
}

// shared[0, a_count + b_count) <- a[0, a_count) followed by b[0, b_count).
template <int NT, int VT, class T>
__device__ __forceinline__ void load_two_to_shared(const T* a, int a_count, const T* b, int b_count,
                                                   T* shared, int tid) {
  T strided[VT];
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    if (j < a_count)
      strided[i] = a[j];
    else if (j < a_count + b_count)
      strided[i] = b[j - a_count];
  }
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    if (j < a_count + b_count) shared[j] = strided[i];
  }
}

// shared[0, sum(counts)) <- ranges[0][0, counts[0]), then ranges[1] and so
// on.  Kept apart from load_two_to_shared: the two-way pass runs slower
// when its load goes through a general one like this.
template <int NT, int VT, int K, class T>
__device__ __forceinline__ void load_ranges_to_shared(const T* const (&ranges)[K],
                                                      const int (&counts)[K], T* shared, int tid) {
  int begins[K];  // where each range starts in shared memory
  begins[0] = 0;
#pragma unroll
  for (int r = 1; r < K; ++r) begins[r] = begins[r - 1] + counts[r - 1];
  const int count = begins[K - 1] + counts[K - 1];
  T strided[VT];
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    const T* range = ranges[0];
    int at = j;
#pragma unroll
    for (int r = 1; r < K; ++r)
      if (j >= begins[r]) {
        range = ranges[r];
        at = j - begins[r];
      }
    if (j < count) strided[i] = range[at];
  }
#pragma unroll
  for (int i = 0; i < VT; ++i) {
    const int j = NT * i + tid;
    if (j < count) shared[j] = strided[i];
  }
}

}  // namespace gpusort
