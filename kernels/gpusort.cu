// gpusort's GPU mergesort: the translation unit gpusort/cuda/build.py compiles
// (through NVRTC) and tests/test_kernels_compile.py builds with nvcc.
//
// Two phases, after Modern GPU: a CTA blocksort turns the input into sorted
// tiles of NV = NT * VT keys, then merge passes multiply the sorted run
// length until one run is left (ping-pong between two buffers, partition
// then merge in each pass).  A two-way pass doubles it; a four-way pass
// (keys only) quadruples it, reading and writing every key once as a
// two-way pass does; gpusort/cuda/tuning.py says for which keys it pays.  Merging two sorted arrays is one two-way pass.
// Large keys-only sorts start with a bucket pass (a sample sort's
// partition): keys split into 256 buckets by sampled splitters, each bucket
// then sorted on its own by the same blocksort and merge passes, which
// place their tiles by bucket (segments.cuh).  float16 and float32 keys are
// sorted as unsigned integers, their exact order keys (exact_keys.cuh).
//
// Files, by the layer their name gives:
//   types.cuh, order.cuh       key and value types; the order (NaN last)
//   packed_positions.cuh       keys in and out as they are, or packed with
//                              their positions (an argsort)
//   float_keys.cuh             a float's bits as its order key, in registers
//                              (also the preamble of CuPy's fused kernels)
//   exact_keys.cuh             float16/float32 keys in and out as their exact
//                              order keys (unsigned integers)
//   segments.cuh               where each tile lies: from 0, or in a bucket
//   bucket_search.cuh          the bucket of a key (splitters)
//   group_search.cuh           a partition point searched by a group of lanes
//   warp_sum.cuh               a warp's sum, on every architecture
//   merge_path.cuh             merge path search, a key's rank in a merge
//   multiway_path.cuh          the same over K runs
//   thread_*.cuh               one thread, registers: sort VT keys, merge VT
//   block_*.cuh                one CTA: move a tile, sort a tile, merge a tile,
//                              stage a tile by bucket
//   merge_pass.cuh             which runs a merge pass pairs (or groups) up
//   kernel_*.cuh               __global__ entry points, thin (kernel_gather:
//                              many strided gathers, a bucket pass's samples)
// verify.cu and beyond.cu are translation units of kernel_verify.cuh and
// kernel_beyond.cuh (top-k's fused pass) alone.
// Templates: NT, VT (tuning, chosen by gpusort/cuda/tuning.py), Key (signed char
// .. unsigned long long, gpusort::f16, float, double), Value (no_value or an
// unsigned integer of the values' width: values are moved, never compared)
// and Order (gpusort::ascending or gpusort::descending).
#include "version.cuh"
#include "kernel_blocksort.cuh"
#include "kernel_merge.cuh"
#include "kernel_partition.cuh"
#include "kernel_merge_four.cuh"
#include "kernel_partition_four.cuh"
#include "kernel_buckets.cuh"
#include "kernel_splitters.cuh"
#include "kernel_gather.cuh"
#include "kernel_ties.cuh"
#include "kernel_verify.cuh"
#include "kernel_beyond.cuh"
