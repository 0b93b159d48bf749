// Entry points of a bucket pass: split the keys of a sort into BUCKETS
// buckets by sampled splitters, so that a keys-only sort then sorts each
// bucket on its own (segments.cuh): eight fewer merge levels for evenly
// spread keys, at the cost of a count and a scatter pass.
//
// Reduce, scan, scatter.  CTA c counts the keys of each bucket in its span
// of the input (bucket_span: a range of one array, or of one of several)
// and writes every key's bucket as a byte (kernel_bucket_count);
// kernel_bucket_bases scans each bucket's counts over the spans;
// kernel_bucket_scatter moves span c's keys of bucket b to the bucket's
// offset plus that scan, tile by tile, each tile staged by bucket
// (block_buckets.cuh) so that every bucket is written in runs.
// Spans go in order and each tile is staged stably, so every bucket keeps
// its keys in input order: the sort stays stable.  The bytes save the
// scatter a second search.
//
// The host learns only the summary of the tables (which kernel_bucket_bases'
// last CTA makes), and learns it while the GPU scatters: every table a later
// kernel needs is made here, and the scatter reads the decision to scatter
// itself, so the host never waits on the pass.
#pragma once

#include "block_buckets.cuh"
#include "order.cuh"
#include "segments.cuh"

namespace gpusort {

// counts[b * gridDim.x + c] <- how many keys of span c (span_of) fall in
// bucket b; buckets[i] <- the bucket of key i.  Segment s's splitter p is
// splitters[s * tree_stride + p * step]: kernel_sample_splitters' (one
// segment, step 1), or every step-th key of segment s's sorted sample tile
// (sub-buckets; bucket_search.cuh).  Keys are compared as the Load policy
// reads them: a float sort compares its exact keys, one instruction where a
// float compare takes several.
template <int NT, int VT, class Key, class Order, class Load = as_is>
__global__ void __launch_bounds__(NT)
    kernel_bucket_count(const bucket_span* spans, const void* keys_at, i64 count, i64 span_keys,
                        const Key* splitters, i64 step, i64 tree_stride, int* counts,
                        unsigned char* buckets, bucket_summary* summary) {
  static_assert(NT == BUCKETS, "one thread a bucket");
  constexpr int WARPS = NT / 32;
  __shared__ Key tree[BUCKETS];
  __shared__ int histograms[WARPS][BUCKETS];  // one a warp: fewer lanes contend for a counter
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const bucket_span span = span_of(spans, keys_at, count, span_keys, blockIdx.x);
  if (tid < BUCKETS - 1) place_splitter(splitters + span.segment * tree_stride, step, tid, tree);
  if (blockIdx.x == 0 && tid == 0) summary->bases_done = 0u;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) histograms[w][tid] = 0;
  __syncthreads();

  const auto* keys = span.keys<typename Load::template input<Key>>();
  for (i64 tile = span.begin; tile < span.end; tile += NT * VT) {
    const int tile_count = int(span.end - tile < NT * VT ? span.end - tile : NT * VT);
    int bucket[VT];
    search_tile<VT, Load>(keys, tile, tile_count, tree, bucket, warp, lane, Order());
#pragma unroll
    for (int r = 0; r < VT; ++r) {
      if (bucket[r] < BUCKETS) {
        atomicAdd(&histograms[warp][bucket[r]], 1);
        buckets[tile + stage_position<VT>(warp, r, lane)] = (unsigned char)bucket[r];
      }
    }
  }
  __syncthreads();
  int total = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) total += histograms[w][tid];
  counts[i64(tid) * gridDim.x + blockIdx.x] = total;
}

// CTA b: bases[b * spans + c] <- how many keys of bucket b the spans before
// c have (an exclusive scan of row b of kernel_bucket_count's counts), and
// totals[b] <- the bucket's keys.  The last CTA to finish then makes the
// tables and the summary (block_bucket_tables): a launch fewer, which a sort
// bound by launching feels.  Sub-buckets make theirs with
// kernel_bucket_subtables instead (`offsets` null).
template <int NT>
__global__ void __launch_bounds__(NT)
    kernel_bucket_bases(const int* counts, i64 spans, i64* bases, i64* totals, i64 nv,
                        int max_levels, i64* offsets, int* first_tile, bucket_summary* summary) {
  __shared__ bool last;
  __shared__ i64 warp_sums[NT / 32];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const i64 row = i64(blockIdx.x) * spans;
  i64 carry = 0;
  for (i64 c0 = 0; c0 < spans; c0 += NT) {
    const i64 c = c0 + tid;
    const i64 x = c < spans ? counts[row + c] : 0;
    i64 scan = x;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const i64 y = __shfl_up_sync(~0u, scan, d);
      if (lane >= d) scan += y;
    }
    if (lane == 31) warp_sums[warp] = scan;
    __syncthreads();
    i64 before = carry;
    for (int w = 0; w < warp; ++w) before += warp_sums[w];
    for (int w = 0; w < NT / 32; ++w) carry += warp_sums[w];
    if (c < spans) bases[row + c] = before + scan - x;
    __syncthreads();
  }
  if (tid == 0) {
    totals[blockIdx.x] = carry;
    __threadfence();  // the total, then the ticket
    last = offsets && atomicAdd(&summary->bases_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last) {
    __threadfence();
    block_bucket_tables<NT>(totals, nv, max_levels, offsets, first_tile, summary, tid);
  }
}

// CTA g of BUCKETS, one a segment: the tables of a pass that splits every
// bucket of the pass before (`outer`: BUCKETS + 1 offsets) into BUCKETS
// sub-buckets, from its counts over spans that each lie in one segment
// (block_subbucket_tables); the last CTA to finish adds up the segments'
// tiles and writes the summary (block_subbucket_finish).
template <int NT>
__global__ void __launch_bounds__(NT)
    kernel_bucket_subtables(const int* counts, i64 spans, const int* first_span, const i64* outer,
                            i64 nv, int max_levels, i64* offsets, int* first_tile,
                            int* segment_tiles, bucket_summary* summary) {
  const int tid = threadIdx.x;
  if (block_subbucket_tables<NT>(counts, spans, first_span, outer, nv, offsets, first_tile,
                                 segment_tiles, summary, blockIdx.x, tid))
    block_subbucket_finish<NT>(outer, max_levels, offsets, first_tile, segment_tiles, summary,
                               tid);
}

// out[offsets[s * BUCKETS + b] + bases[b * gridDim.x + c] - bases[b *
// gridDim.x + first] ...] <- span c's keys of bucket b (span_of: of segment
// s, whose first span is `first`; one segment: s = first = 0), in input order, read through the Load policy (packed_positions.cuh: a
// packed argsort packs its words here), their buckets from
// kernel_bucket_count; and tile_bucket[t] <- the bucket of tile t of the
// sort after it (segments.cuh), the tiles spread over the CTAs; nothing where
// the summary says not to scatter.  Two CTAs an SM: left alone the compiler
// takes enough registers a thread to fit only one CTA of 256; bounded, it
// fits two and spills nothing (check with ptxas -v when this kernel changes).
template <int NT, int VT, class Out, class Load = as_is>
__global__ void __launch_bounds__(NT, 2)
    kernel_bucket_scatter(const bucket_span* spans, const void* keys_at, i64 count, i64 span_keys,
                          const unsigned char* buckets, const i64* bases, const i64* offsets,
                          const bucket_summary* summary, const int* first_tile, int* tile_bucket,
                          Out* out, int segments) {
  constexpr int NV = NT * VT;
  __shared__ i64 shift[BUCKETS];  // the tile's key j of bucket b goes to shift[b] + j
  __shared__ bucket_stage<NT, VT, Out> stage;
  static_assert(sizeof(shift) + sizeof(stage) <= 48 * 1024,
                "a CTA gets at most 48 KB of static shared memory: lower VT for this key size "
                "(gpusort/cuda/tuning.py, BUCKET_VT)");
  if (!summary->scatter) return;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int buckets_in_all = segments * BUCKETS, tiles = first_tile[buckets_in_all];
  for (int t = blockIdx.x * NT + tid; t < tiles; t += gridDim.x * NT)
    tile_bucket[t] = bucket_of_tile(first_tile, t, buckets_in_all);
  const bucket_span span = span_of(spans, keys_at, count, span_keys, blockIdx.x);
  // Where bucket tid's next key goes.
  const i64* row = bases + i64(tid) * gridDim.x;
  i64 cursor = offsets[i64(span.segment) * BUCKETS + tid] + row[blockIdx.x] - row[span.first];
#pragma unroll
  for (int w = 0; w < NT / 32; ++w) {
    stage.warp_counts[w][tid] = 0;
    stage.peers[w][tid] = 0u;
  }
  __syncthreads();

  const auto* keys = span.keys<typename Load::template input<Out>>();
  for (i64 tile = span.begin; tile < span.end; tile += NV) {
    const int tile_count = int(span.end - tile < NV ? span.end - tile : NV);
    Out x[VT];
    int bucket[VT];
    load_tile<VT, Load>(keys, buckets, tile, tile_count, x, bucket, warp, lane);
    const int total = block_stage<NT, VT>(x, bucket, stage, tid);
    shift[tid] = cursor - stage.starts[tid];
    cursor += total;
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) stage.warp_counts[w][tid] = 0;
    __syncthreads();
    // The next tile writes the stage only after block_stage's first
    // barrier, which every thread reaches after this loop.
    for (int j = tid; j < tile_count; j += NT) out[shift[stage.buckets[j]] + j] = stage.keys[j];
  }
}

}  // namespace gpusort
