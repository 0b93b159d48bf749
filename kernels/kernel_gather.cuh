// Entry point: many strided gathers in one launch, a CTA a row: the samples a
// bucket pass takes of a task's parts or of its buckets, and the ends of
// parts that tell whether they are in order already.  One launch and one
// table where a pitched copy (cudaMemcpy2DAsync) a row cost ~10 us of the
// GPU and more of the host, 320 of them a large sort: 3 ms in one process,
// 12-20 ms in a Dask worker that talks UCX, where each copy call waits on
// the host for longer.
#pragma once

#include "types.cuh"

namespace gpusort {

// One row: out[at + j] <- source[start + j * step] for j < count, where
// `base` is the address of the source array's element 0.  The host builds
// the rows (gpusort/cuda/launch.py, gather_rows).
struct gather_row {
  unsigned long long base;
  i64 start, step, count, at;
};

// Word: the unsigned integer of the elements' width; the gather moves bits.
template <int NT, class Word>
__global__ void __launch_bounds__(NT) kernel_gather_rows(const gather_row* rows, Word* out) {
  const gather_row row = rows[blockIdx.x];
  const Word* source = reinterpret_cast<const Word*>(row.base);
  for (i64 j = threadIdx.x; j < row.count; j += NT) out[row.at + j] = source[row.start + j * row.step];
}

}  // namespace gpusort
