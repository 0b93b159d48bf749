// One CTA of a bucket pass: find each key's bucket, stage a tile in shared
// memory grouped by bucket, stably, and make the tables of the buckets.
//
// Warp w owns tile positions [32 VT w, 32 VT (w + 1)) and reads them in VT
// rounds of 32 consecutive keys (lane l of round r holds position
// 32 VT w + 32 r + l): coalesced, and (warp, round, lane) is the keys'
// order, so ranks counted in that order keep ties in input order.
#pragma once

#include "bucket_search.cuh"
#include "packed_positions.cuh"

namespace gpusort {

// Tile position of round r's key in lane `lane` of warp `warp`.
template <int VT>
__device__ __forceinline__ int stage_position(int warp, int r, int lane) {
  return 32 * VT * warp + 32 * r + lane;
}

// bucket[r] <- the bucket of tile position stage_position(warp, r, lane) of
// keys[begin, begin + count), read through the Load policy, by splitters
// (bucket_search.cuh); BUCKETS past `count`.
template <int VT, class Load, class In, class Key, class Order>
__device__ __forceinline__ void search_tile(const In* keys, i64 begin, int count,
                                            const Key* tree, int (&bucket)[VT], int warp, int lane,
                                            Order precedes) {
  Key x[VT];  // every load is issued before the first search waits on one
#pragma unroll
  for (int r = 0; r < VT; ++r) {
    const int j = stage_position<VT>(warp, r, lane);
    if (j < count) x[r] = Load::template load<Key>(keys, begin + j);
  }
#pragma unroll
  for (int r = 0; r < VT; ++r) {
    const int j = stage_position<VT>(warp, r, lane);
    bucket[r] = j < count ? bucket_of(x[r], tree, precedes) : BUCKETS;
  }
}

// x[r], bucket[r] <- the key at stage_position(warp, r, lane) of
// keys[begin, begin + count), read through the Load policy, and its bucket
// from `buckets`; BUCKETS past `count`.
template <int VT, class Load, class In, class Out>
__device__ __forceinline__ void load_tile(const In* keys, const unsigned char* buckets, i64 begin,
                                          int count, Out (&x)[VT], int (&bucket)[VT], int warp,
                                          int lane) {
#pragma unroll
  for (int r = 0; r < VT; ++r) {
    const int j = stage_position<VT>(warp, r, lane);
    if (j < count) x[r] = Load::template load<Out>(keys, begin + j);
    bucket[r] = j < count ? buckets[begin + j] : BUCKETS;
  }
}

// The shared memory of block_stage for NT threads: the tile grouped by
// bucket, each key's bucket, and the counts that place them.
template <int NT, int VT, class Out>
struct bucket_stage {
  static constexpr int WARPS = NT / 32;
  static_assert(NT * VT < 65536, "warp_counts hold tile positions in 16 bits");
  Out keys[NT * VT];
  unsigned char buckets[NT * VT];
  unsigned peers[WARPS][BUCKETS];  // a round's lanes of each bucket; zero between rounds
  // A warp's keys of each bucket so far, then where they go in `keys`;
  // zero between tiles.
  unsigned short warp_counts[WARPS][BUCKETS];
  int starts[BUCKETS];  // where each bucket's keys start in `keys`
  int warp_totals[WARPS];
};

// stage.keys[0, count) <- the tile (x, bucket from load_tile) grouped by
// bucket, ties in input order; stage.buckets likewise; stage.starts.
// `bucket` is overwritten.
// Returns how many keys of bucket `tid` the tile has (NT == BUCKETS: thread
// b speaks for bucket b).  Ends with a barrier; the caller zeroes column
// `tid` of warp_counts before the next tile.
template <int NT, int VT, class Out>
__device__ __forceinline__ int block_stage(const Out (&x)[VT], int (&bucket)[VT],
                                           bucket_stage<NT, VT, Out>& stage, int tid) {
  static_assert(NT == BUCKETS, "the stage gives each thread one bucket");
  constexpr int WARPS = bucket_stage<NT, VT, Out>::WARPS;
  const int warp = tid / 32, lane = tid % 32;
  const unsigned before_me = (1u << lane) - 1;
  // Ranks within the warp, round by round: a key follows the warp's earlier
  // keys of its bucket and its round's lower lanes.  The lanes that share a
  // bucket are found by an atomic OR into a shared mask, as CUB's
  // BlockRadixRankMatchEarlyCounts does.  Each rank joins its bucket in
  // bucket[r] (rank << 9 | bucket: buckets take 9 bits with BUCKETS, "no
  // key"), a register per key fewer.
#pragma unroll
  for (int r = 0; r < VT; ++r) {
    const int b = bucket[r];
    const bool real = b < BUCKETS;
    if (real) atomicOr(&stage.peers[warp][b], 1u << lane);
    __syncwarp();
    const unsigned peers = real ? stage.peers[warp][b] : 0u;
    const int seen = real ? stage.warp_counts[warp][b] : 0;
    bucket[r] = (seen + __popc(peers & before_me)) << 9 | b;
    __syncwarp();
    if (real && (peers & before_me) == 0) {  // the bucket's first lane speaks for it
      stage.warp_counts[warp][b] = (unsigned short)(seen + __popc(peers));
      stage.peers[warp][b] = 0u;
    }
    __syncwarp();
  }
  __syncthreads();

  // Bucket `tid`: its start in the tile (an exclusive scan of the totals
  // over the CTA), then where each warp's keys of it begin.
  int total = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) total += stage.warp_counts[w][tid];
  int scan = total;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int y = __shfl_up_sync(~0u, scan, d);
    if (lane >= d) scan += y;
  }
  if (lane == 31) stage.warp_totals[warp] = scan;
  __syncthreads();
  int start = scan - total;
  for (int w = 0; w < warp; ++w) start += stage.warp_totals[w];
  stage.starts[tid] = start;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const int c = stage.warp_counts[w][tid];
    stage.warp_counts[w][tid] = (unsigned short)start;
    start += c;
  }
  __syncthreads();

#pragma unroll
  for (int r = 0; r < VT; ++r) {
    const int b = bucket[r] & 511;
    if (b < BUCKETS) {
      const int slot = stage.warp_counts[warp][b] + (bucket[r] >> 9);
      stage.keys[slot] = x[r];
      stage.buckets[slot] = (unsigned char)b;
    }
  }
  __syncthreads();
  return total;
}

// What CTA c of a bucket pass reads: keys [begin, end) of the sort's input,
// key i at keys<In>()[i].  Spans of one array share its address; a sort of
// several arrays (a task's chunks, read where they lie instead of joined)
// gives each span its array's address less the array's first index, so
// indices stay the input's own (a packed argsort packs them as positions).
// A pass that splits the buckets of an earlier one (sub-buckets) reads one
// of them a span: `segment` is that bucket, whose splitters the span's keys
// are searched by, and `first` the first span of it, where its counts begin.
struct bucket_span {
  unsigned long long base;  // where key 0 would lie in the span's array (modulo 2^64)
  i64 begin, end;
  int segment, first;
  template <class In>
  __device__ __forceinline__ const In* keys() const {
    return reinterpret_cast<const In*>(base);
  }
};

// CTA c's span: spans[c] where the host made a table (several arrays, or
// sub-buckets), else keys [c * span, (c + 1) * span) of the one array at
// `keys`, one segment, which then costs the host no upload.
__device__ __forceinline__ bucket_span span_of(const bucket_span* spans, const void* keys, i64 count,
                                               i64 span, int c) {
  if (spans) return spans[c];
  const i64 begin = i64(c) * span;
  return {reinterpret_cast<unsigned long long>(keys), begin, begin + span < count ? begin + span : count,
          0, 0};
}

// What the host reads back of a bucket pass (gpusort/cuda/buckets.py,
// bucket_pass), and the ticket that finds kernel_bucket_bases' last CTA.
struct bucket_summary {
  int tiles;              // tiles of NV keys in all buckets
  int levels;             // merge levels of the largest bucket
  int scatter;            // whether the scatter runs: it takes enough levels off the sort
  unsigned bases_done;    // CTAs of kernel_bucket_bases done; kernel_bucket_count zeroes it
};

// The summary of buckets whose tiles number `tiles`, the widest `widest`:
// its merge levels, and whether they are few enough to scatter.
__device__ __forceinline__ void write_summary(bucket_summary* summary, int tiles, int widest,
                                              int max_levels) {
  const int runs = widest > 1 ? widest : 1;
  const int levels = 32 - __clz(runs - 1);  // ceil(log2(runs)): gpusort.cuda.tuning.merge_passes
  summary->tiles = tiles;
  summary->levels = levels;
  summary->scatter = levels <= max_levels;
}

// Inclusive scans over a CTA of NT threads, one value a thread, of keys and
// tiles at once; `keys` and `tiles` are NT entries of shared memory each.
template <int NT>
__device__ __forceinline__ void block_inclusive_scans(i64* keys, int* tiles, int tid) {
  for (int d = 1; d < NT; d *= 2) {  // NT entries: no need for more
    const i64 k = tid >= d ? keys[tid - d] : 0;
    const int t = tid >= d ? tiles[tid - d] : 0;
    __syncthreads();
    keys[tid] += k;
    tiles[tid] += t;
    __syncthreads();
  }
}

// Thread tid's bucket holds `total` keys: keys_before and tiles_before <-
// inclusive scans over the CTA of the keys and of their tiles of nv, widest
// <- the most tiles of one bucket.  Returns the bucket's tiles.
template <int NT>
__device__ __forceinline__ int block_scan_tiles(i64 total, i64 nv, i64* keys_before, int* tiles_before,
                                                int& widest, int tid) {
  const int tiles = int((total + nv - 1) / nv);
  keys_before[tid] = total;
  tiles_before[tid] = tiles;
  if (tid == 0) widest = 0;
  __syncthreads();
  atomicMax(&widest, tiles);
  block_inclusive_scans<NT>(keys_before, tiles_before, tid);
  return tiles;
}

// One CTA of BUCKETS threads, from a bucket pass's totals (written by other
// CTAs: read from L2):
// offsets[b] <- the keys before bucket b, first_tile[b] <- the tiles of nv
// keys before it (both BUCKETS + 1 long: the last entry is the whole), and
// the summary, whose `scatter` says whether the largest bucket takes at
// most max_levels merge levels.
template <int NT>
__device__ __forceinline__ void block_bucket_tables(const i64* totals, i64 nv, int max_levels,
                                                    i64* offsets, int* first_tile,
                                                    bucket_summary* summary, int tid) {
  static_assert(NT == BUCKETS, "one thread a bucket");
  __shared__ i64 keys_before[NT];
  __shared__ int tiles_before[NT];
  __shared__ int widest;
  block_scan_tiles<NT>(__ldcg(totals + tid), nv, keys_before, tiles_before, widest, tid);
  offsets[tid + 1] = keys_before[tid];
  first_tile[tid + 1] = tiles_before[tid];
  if (tid == 0) {
    offsets[0] = 0;
    first_tile[0] = 0;
    write_summary(summary, tiles_before[NT - 1], widest, max_levels);
  }
}

// One CTA of BUCKETS threads a segment (a bucket of the pass before), from
// the counts of a pass that splits every segment into BUCKETS sub-buckets
// (kernel_bucket_count over spans that each lie in one segment, the spans
// of segment g being first_span[g] .. first_span[g + 1] - 1):
// offsets[g * BUCKETS + b] <- where sub-bucket b of segment g begins (the
// segment's own offset, outer[g], plus its sub-buckets before b), and
// first_tile[g * BUCKETS + b] <- its first tile counted within the segment,
// and segment_tiles[g], segment_tiles[BUCKETS + g] <- the segment's tiles
// and its widest sub-bucket's, for block_subbucket_finish.  Returns
// whether this CTA is the last to finish (a ticket in the summary, which
// kernel_bucket_count zeroes).
template <int NT>
__device__ __forceinline__ bool block_subbucket_tables(const int* counts, i64 spans,
                                                       const int* first_span, const i64* outer,
                                                       i64 nv, i64* offsets, int* first_tile,
                                                       int* segment_tiles, bucket_summary* summary,
                                                       int g, int tid) {
  static_assert(NT == BUCKETS, "one thread a sub-bucket");
  __shared__ i64 keys_before[NT];
  __shared__ int tiles_before[NT];
  __shared__ int widest;
  __shared__ bool last;
  i64 total = 0;
  for (int c = first_span[g]; c < first_span[g + 1]; ++c) total += counts[i64(tid) * spans + c];
  const int tiles = block_scan_tiles<NT>(total, nv, keys_before, tiles_before, widest, tid);
  const i64 at = i64(g) * NT + tid;
  offsets[at] = outer[g] + keys_before[tid] - total;
  first_tile[at] = tiles_before[tid] - tiles;
  __threadfence();  // the tables, then the ticket
  __syncthreads();
  if (tid == 0) {
    segment_tiles[g] = tiles_before[NT - 1];
    segment_tiles[NT + g] = widest;
    __threadfence();
    last = atomicAdd(&summary->bases_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  return last;
}

// The last CTA of block_subbucket_tables: every segment's tiles before it
// added to its sub-buckets' first tiles, the tables' last entries (n keys,
// all the tiles), and the summary of the sub-buckets.  `outer` has
// BUCKETS + 1 entries, the last the whole.
template <int NT>
__device__ __forceinline__ void block_subbucket_finish(const i64* outer, int max_levels,
                                                       i64* offsets, int* first_tile,
                                                       const int* segment_tiles,
                                                       bucket_summary* summary, int tid) {
  __shared__ i64 unused[NT];
  __shared__ int tiles_before[NT];
  __shared__ int widest;
  __threadfence();
  unused[tid] = 0;
  tiles_before[tid] = __ldcg(segment_tiles + tid);
  if (tid == 0) widest = 0;
  __syncthreads();
  atomicMax(&widest, __ldcg(segment_tiles + NT + tid));
  block_inclusive_scans<NT>(unused, tiles_before, tid);
  for (int g = 1; g < NT; ++g) {
    const i64 at = i64(g) * NT + tid;
    first_tile[at] = __ldcg(first_tile + at) + tiles_before[g - 1];
  }
  if (tid == 0) {
    offsets[i64(NT) * NT] = outer[NT];
    first_tile[i64(NT) * NT] = tiles_before[NT - 1];
    write_summary(summary, tiles_before[NT - 1], widest, max_levels);
  }
}

}  // namespace gpusort
