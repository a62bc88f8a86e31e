// One CTA's chunk of decode attention on tensor cores, shared by the dense split-KV decode kernel
// (attention_decode.cu) and TokenSelect's token-list kernel (attention_tokenselect.cu), whose
// chunks differ only in which keys fill a tile, which queries they hold and where results go
// (issue 16 item 2: one decode family).
//
// The chunk's (row, query head) pairs of one KV head — at most 16 per m16n8k16 tile, kTiles tiles
// (1 or 2) — are the rows of the tiles (padded with zero queries); 4 warps per tile each take a
// 16-key slice of every 64-key tile and keep their own online softmax in registers
// (prefill_tile.cuh's mma.sync steps at 16 keys: no shared scores, no per-tile reductions across
// warps); the warps' states merge once at the end into a partial (output, log-sum-exp) per pair for
// the split-KV merge. K/V rows are gathered through the block table into kStages shared stages with
// cp.async, one CTA barrier per tile. A pair's result depends only on its own query and keys, never
// on the other pairs or on the masking of keys it sees, so a dense sequence gets the same bits
// whatever batch it is in.
#ifndef SPARSESERVE_KERNELS_CUDA_DECODE_TENSOR_CORE_CUH_
#define SPARSESERVE_KERNELS_CUDA_DECODE_TENSOR_CORE_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/prefill_tile.cuh"

namespace sparseserve::kernels::cuda::decode_tc {

constexpr int kTile = kDecodeTileTokens;     // list positions per tile
constexpr int kSlices = 4;                   // warps per pair tile, a key slice each
constexpr int kSliceKeys = kTile / kSlices;  // a warp's keys of each tile
constexpr int kRows = 16;                    // (row, head) pairs of one MMA tile
constexpr int kStages = 3;                   // 2 CTAs per SM at head_dim 128 with one pair tile
template <int kTiles>
inline constexpr int kThreads = 32 * kSlices* kTiles;

template <int D>
__host__ __device__ constexpr int TileBytes() {
  return kTile * prefill_tile::SmemStride<D>() * int{sizeof(__nv_bfloat16)};
}

// K/V stages, then the queries' tiles, then each stage's key indices.
template <int D, int kTiles>
__host__ __device__ constexpr size_t SmemBytes() {
  return size_t{2} * kStages * TileBytes<D>() +
         size_t{kRows} * kTiles * prefill_tile::SmemStride<D>() * sizeof(__nv_bfloat16) +
         size_t{kStages} * kTile * sizeof(int32_t);
}

// The merge reuses the K/V stages: per warp and pair row the max, the sum and D output values.
static_assert(size_t{2 * kSlices} * kRows * (128 + 2) * sizeof(float) <=
              size_t{2} * kStages * TileBytes<128>());
static_assert(size_t{2 * kSlices} * kRows * (64 + 2) * sizeof(float) <=
              size_t{2} * kStages * TileBytes<64>());

// Runs list positions [begin, end) for `pairs` pairs of KV head kv_head. `chunk` says what the
// positions and pairs are:
//   const __nv_bfloat16* Query(int pair) const  — the pair's query row (D values, unscaled)
//   int32_t KeyAt(int pos) const                — the key at a position, < 0 for none
//   bool Visible(int pair, int key) const       — asked only when `per_key`
//   int64_t Slot(int pair) const                — the pair's partial slot
// A pair that sees no key of the chunk stores zeros with log-sum-exp -inf (weight 0 in the merge).
template <int D, int kTiles, class Chunk>
__device__ __forceinline__ void RunChunk(unsigned char* smem, const __nv_bfloat16* kv,
                                         const int32_t* table, const AttentionDims& dims,
                                         int kv_head, int begin, int end, int pairs, bool per_key,
                                         const Chunk& chunk, float* __restrict__ partial_out,
                                         float* __restrict__ partial_lse) {
  constexpr int kStride = prefill_tile::SmemStride<D>();
  constexpr int kTileBytes = TileBytes<D>();
  unsigned char* kv_s = smem;  // stage i: K tile at 2i, V tile at 2i + 1 (padded rows)
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem + 2 * kStages * kTileBytes);
  auto* keys_s = reinterpret_cast<int32_t*>(q_s + kRows * kTiles * kStride);  // [stage][kTile]
  constexpr int kCtaThreads = kThreads<kTiles>;
  const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int warp = threadIdx.x / 32;
  const int pair_tile = warp / kSlices;  // the warp's 16 pairs
  const int slice = warp % kSlices;      // and its 16 keys of each tile
  const int lane = threadIdx.x % 32;
  auto key_at = [&](int pos) { return pos < end ? chunk.KeyAt(pos) : -1; };

  // Tile t's copies into stage t % kStages; a commit even past the last tile keeps every
  // thread's group count in step with the loop's waits.
  auto load_tile = [&](int t) {
    if (t < num_tiles) {
      const int stage = t % kStages;
      const int first = begin + t * kTile;
      GatherKvRows<D, kCtaThreads>(
          kv_s + 2 * stage * kTileBytes, kv_s + (2 * stage + 1) * kTileBytes, kv, table,
          [&](int r) { return key_at(first + r); }, dims.block_tokens, dims.block_shift,
          token_stride, kv_head,
          [](int r, int piece) {
            return (r * kStride + piece * 8) * static_cast<int>(sizeof(__nv_bfloat16));
          });
      if (threadIdx.x < kTile) keys_s[stage * kTile + threadIdx.x] = key_at(first + threadIdx.x);
    }
    CpAsyncCommit();
  };
  // The pairs' queries land with tile 0 (zeros past the stored pairs).
  for (int c = threadIdx.x; c < kRows * kTiles * (D / 8); c += kCtaThreads) {
    const int p = c / (D / 8);
    const int col = (c % (D / 8)) * 8;
    const bool valid = p < pairs;
    CpAsync16(q_s + p * kStride + col, valid ? chunk.Query(p) + col : kv, valid);
  }
  for (int t = 0; t < kStages - 1; ++t) load_tile(t);

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = dims.scale * prefill_tile::kLog2e;
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile t (and of the queries) are done
    __syncthreads();             // everyone's; and tile t - 1's stage is free again
    if (t == 0) prefill_tile::LoadQFragments<D>(q_frag, q_s, pair_tile, lane);
    load_tile(t + kStages - 1);
    const int stage = t % kStages;
    const auto* k_s = reinterpret_cast<const __nv_bfloat16*>(kv_s + 2 * stage * kTileBytes) +
                      slice * kSliceKeys * kStride;
    const auto* v_s = reinterpret_cast<const __nv_bfloat16*>(kv_s + (2 * stage + 1) * kTileBytes) +
                      slice * kSliceKeys * kStride;
    const int32_t* keys = keys_s + stage * kTile + slice * kSliceKeys;
    float s[kSliceKeys / 8][4];
    prefill_tile::TileScores<D, kSliceKeys>(s, q_frag, k_s, lane);
#pragma unroll
    for (int nt = 0; nt < kSliceKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = keys[prefill_tile::ScoreKey(nt, e, lane)];
        const int pair = pair_tile * kRows + lane / 4 + (e / 2) * 8;
        if (key < 0 || (per_key && !chunk.Visible(pair, key))) s[nt][e] = -INFINITY;
      }
    }
    prefill_tile::SoftmaxStep<D, kSliceKeys>(s, o, row_max, row_sum, scale_log2);
    prefill_tile::AccumulatePv<D, kSliceKeys>(o, s, v_s, lane);
  }

  // Merge the warps' states (max in raw score units, sum, unnormalised output) per pair.
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages, which now hold the merge scratch
  constexpr int kWarps = kSlices * kTiles;
  auto* max_s = reinterpret_cast<float*>(smem);  // [warp][row of its pair tile]
  float* sum_s = max_s + kWarps * kRows;         // [warp][row]
  float* out_s = sum_s + kWarps * kRows;         // [warp][row][D]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int at = warp * kRows + lane / 4 + h * 8;
    if (lane % 4 == 0) {
      max_s[at] = row_max[h];
      sum_s[at] = sum;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      out_s[at * D + col] = o[dt][2 * h];
      out_s[at * D + col + 1] = o[dt][2 * h + 1];
    }
  }
  __syncthreads();
  // Pair p's warps are those of its tile, row p % kRows; a warp that saw no key of a pair has
  // max -inf and weight 0.
  for (int i = threadIdx.x; i < pairs * D; i += kCtaThreads) {
    const int p = i / D;
    const int d = i % D;
    const int first = (p / kRows) * kSlices * kRows + p % kRows;  // its first warp's entry
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kSlices; ++w) m = fmaxf(m, max_s[first + w * kRows]);
    const float safe_m = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kSlices; ++w) {
      const float f = prefill_tile::Exp2((max_s[first + w * kRows] - safe_m) * scale_log2);
      sum += sum_s[first + w * kRows] * f;
      acc += out_s[(first + w * kRows) * D + d] * f;
    }
    const int64_t slot = chunk.Slot(p);
    partial_out[slot * D + d] = sum > 0.0f ? acc / sum : 0.0f;
    if (d == 0) partial_lse[slot] = sum > 0.0f ? m * dims.scale + __logf(sum) : -INFINITY;
  }
}

// Floats of the merge's weights scratch (the K/V stages): a merge group's chunks + 1 at most.
template <int D>
__host__ __device__ constexpr int MergeScratchFloats() {
  return static_cast<int>(size_t{2} * kStages * TileBytes<D>() / sizeof(float));
}

// The split-KV merge without a second kernel: the chunk that completes a merge group last
// combines its partials (one launch fewer: 5-7 us a TokenSelect call at B=1 when ops launch one
// by one; under step graphs with PDL the merge kernel's launch was already hidden, H100 session
// 19 A/B). A group is the items of one row group for one KV head;
// its rows are merges[first_merge, first_merge + rows), each (first slot, chunks) as MergeKernel
// reads them, all with the same chunks. `counter` (zero before the group's first chunk) counts
// the chunks in; the last one resets it for the next layer, then writes
// out[merge_rows[m]][head] = Σ_i w_i o_i / Σ_i w_i, w_i = exp(lse_i - max lse), for the group's
// rows and the KV head's query heads [head0, head0 + group). Call after RunChunk, from every
// thread of the CTA.
template <int D, int kTiles>
__device__ __forceinline__ void MergeIfLast(unsigned char* smem, int* counter, const int2* merges,
                                            const int32_t* merge_rows, int first_merge, int rows,
                                            int head0, int group, int heads,
                                            const float* partial_out, const float* partial_lse,
                                            __nv_bfloat16* out) {
  constexpr int kCtaThreads = kThreads<kTiles>;
  constexpr int kWarps = kCtaThreads / 32;
  // The K/V stages hold the weights now: [pair of this pass][chunk], then 1 / Σ w per pair.
  constexpr int kScratchFloats = MergeScratchFloats<D>();
  __shared__ int last;
  __threadfence();  // this thread's partials are visible to every SM before the count below
  __syncthreads();  // and everyone's; the stages are free again
  if (threadIdx.x == 0) {
    const int2 m = merges[first_merge];
    last = atomicAdd(counter, 1) + 1 == m.y;
    if (last) {
      *counter = 0;
      __threadfence();  // the other chunks' partials are read after their counts
    }
  }
  __syncthreads();
  if (!last) return;
  const int chunks = merges[first_merge].y;
  const int pairs = rows * group;
  const int per_pass = max(1, min(pairs, kScratchFloats / (chunks + 1)));
  float* w_s = reinterpret_cast<float*>(smem);
  float* inv_s = w_s + per_pass * chunks;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int p0 = 0; p0 < pairs; p0 += per_pass) {
    const int np = min(per_pass, pairs - p0);
    for (int pp = warp; pp < np; pp += kWarps) {  // a warp per pair: its chunks' weights
      const int p = p0 + pp;
      const int64_t first = merges[first_merge + p / group].x;
      const int head = head0 + p % group;
      float m = -INFINITY;
      for (int i = lane; i < chunks; i += 32) {
        const float lse = __ldcg(partial_lse + (first + i) * heads + head);
        w_s[pp * chunks + i] = lse;
        m = fmaxf(m, lse);
      }
      m = WarpReduce<ReduceOp::kMax>(m);
      const float safe_m = m == -INFINITY ? 0.0f : m;  // no chunk saw a key: zeros
      float sum = 0.0f;
      for (int i = lane; i < chunks; i += 32) {
        const float w = __expf(w_s[pp * chunks + i] - safe_m);
        w_s[pp * chunks + i] = w;
        sum += w;
      }
      sum = WarpReduce<ReduceOp::kSum>(sum);
      if (lane == 0) inv_s[pp] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < np * (D / 4); e += kCtaThreads) {
      const int pp = e / (D / 4), d4 = e % (D / 4);
      const int p = p0 + pp;
      const int64_t first = merges[first_merge + p / group].x;
      const int head = head0 + p % group;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int i = 0; i < chunks; ++i) {
        const float w = w_s[pp * chunks + i];
        const float4 v = __ldcg(
            reinterpret_cast<const float4*>(partial_out + ((first + i) * heads + head) * D) + d4);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
      const float inv = inv_s[pp];
      const int64_t row = merge_rows[first_merge + p / group];
      auto* dst = reinterpret_cast<__nv_bfloat162*>(out + (row * heads + head) * D + d4 * 4);
      dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
      dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    }
    __syncthreads();  // the next pass rewrites the weights
  }
}

}  // namespace sparseserve::kernels::cuda::decode_tc

#endif  // SPARSESERVE_KERNELS_CUDA_DECODE_TENSOR_CORE_CUH_
