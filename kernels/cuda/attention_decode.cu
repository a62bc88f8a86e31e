// Decode attention (one query token per sequence, or a few: a speculative verify step's root and
// draft rows) over the paged KV layout, split along the keys.
//
// Decode reads every cached key and value once per step and does ~2 flops per byte, so the goal
// is the copy bandwidth. One CTA takes one chunk of one sequence's keys for one KV head and all
// query heads of its GQA group for every row of the sequence — (row, head) pairs, row-major — so
// each K/V byte is read once per step, not once per query head or row (a sequence with more rows
// than one CTA holds — a speculative verify tree — is split into row groups, each with its own
// items over the same chunks: one read per group);
// 64-token tiles stream through shared memory with cp.async, double-buffered. Chunks are sized so
// that the grid covers the GPU even at batch 1 (split-KV); a second kernel merges the chunks'
// partial softmax states (log-sum-exp weighting). Items carry explicit key ranges, so a sliding
// window's sequence gets items over its sinks and its window only; keys a range holds but the row
// cannot see score -inf, and a tile, chunk or row with no visible key yields zeros, not NaN.
#include <cuda_bf16.h>

#include <cstdlib>
#include <string_view>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/cuda/prefill_tile.cuh"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kTile = kDecodeTileTokens;
constexpr int kThreads = 256;                 // 8 warps: enough loads in flight at 2 CTAs per SM
constexpr int kMaxGroup = kMaxDecodeQueries;  // (row, query head) pairs per KV head

template <int D>
__host__ __device__ constexpr int Stride() {
  return D + 8;
}

template <int D, int G>
__host__ __device__ constexpr size_t DecodeSmemBytes() {
  return size_t{4} * kTile * Stride<D>() * sizeof(__nv_bfloat16)  // K, V x 2 stages
         + size_t{G} * D * sizeof(float)                          // scaled queries
         + size_t{G} * kTile * sizeof(float)                      // scores / probabilities
         + size_t{3} * G * sizeof(float);                         // max, sum, correction
}

// Row r of a tile holds key first_key + r; its block comes from the table. Each thread copies
// chunk (threadIdx.x % (D / 8)) of rows threadIdx.x / (D / 8) + k * (kThreads * 8 / D), so the
// block lookup (a division) happens once per row, for K and V together.
template <int D>
__device__ __forceinline__ void LoadTile(__nv_bfloat16* k_dst, __nv_bfloat16* v_dst,
                                         const __nv_bfloat16* kv, const int32_t* table,
                                         int first_key, int key_end, const AttentionDims& dims,
                                         int64_t token_stride, int kv_head) {
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int col = (threadIdx.x % kChunks) * 8;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kTile; r += kRowsPerPass) {
    const int pos = first_key + r;
    const bool valid = pos < key_end;
    const __nv_bfloat16* k_src = kv;
    const __nv_bfloat16* v_src = kv;
    if (valid) {
      k_src = kv + KeyRowOffset(table, pos, dims.block_tokens, dims.block_shift, token_stride) +
              int64_t{kv_head} * D + col;
      v_src = k_src + int64_t{dims.block_tokens} * token_stride;
    }
    CpAsync16(k_dst + r * Stride<D>() + col, k_src, valid);
    CpAsync16(v_dst + r * Stride<D>() + col, v_src, valid);
  }
}

// G: the (row, query head) pairs per KV head — rows x GQA group — rounded up to a power of two;
// the padding pairs compute on zero queries and are never stored. A compile-time G keeps every
// per-head loop unrolled and unpredicated. kMasked: the variant for batches with masks, windows or
// several rows, checking every key of a range against kernels/attention_visibility.h for the
// pair's row; the dense variant needs only the range's end. An item (sequence, first key, end
// key, first row) takes rows [first row, first row + group_rows) of its sequence; the item's
// row r (counted from its first) puts its partial state at slot item + r * gridDim.x.
template <int D, int G, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    DecodeAttentionKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                          AttentionSeqs seq_arrays, const int32_t* num_items, const int4* items,
                          int group_rows, AttentionDims dims, float* __restrict__ partial_out,
                          float* __restrict__ partial_lse) {
  constexpr int kStride = Stride<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* kv_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [stage][K|V][kTile][kStride]
  auto* q_s = reinterpret_cast<float*>(kv_s + 4 * kTile * kStride);
  float* p_s = q_s + G * D;
  float* max_s = p_s + G * kTile;
  float* sum_s = max_s + G;
  float* corr_s = sum_s + G;

  WaitForPrecedingKernels();  // q and this step's K/V come from the kernels ahead
  AllowNextKernelLaunch();
  const int item = blockIdx.x;
  if (item >= *num_items) return;  // the grid is sized for the most items this batch can have
  const int kv_head = blockIdx.y;
  const int4 it = items[item];
  const AttentionSeqInfo seq = seq_arrays.seqs[it.x];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const bool per_key = kMasked && (vis.window > 0 || vis.mask != nullptr || vis.q_len > 1);
  const int group = dims.heads / dims.kv_heads;
  const int row0 = it.w;                               // the item's first row
  const int rows = min(seq.q_len - row0, group_rows);  // and its row count
  const int queries = rows * group;                    // (row, head) pairs stored
  const int key_begin = it.y;
  const int key_end = min(seq.kv_len, it.z);
  const int num_tiles = (key_end - key_begin + kTile - 1) / kTile;
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int32_t* table = seq_arrays.block_tables + seq.table_begin;

  LoadTile<D>(kv_s, kv_s + kTile * kStride, kv, table, key_begin, key_end, dims, token_stride,
              kv_head);
  CpAsyncCommit();

  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int pair = i / D;
    float value = 0.0f;
    if (pair < queries) {
      const int row = row0 + pair / group, head = kv_head * group + pair % group;
      value = __bfloat162float(q[(int64_t{seq.q_begin + row} * dims.heads + head) * D + i % D]) *
              dims.scale;
    }
    q_s[i] = value;
  }
  if (threadIdx.x < G) {
    max_s[threadIdx.x] = -INFINITY;
    sum_s[threadIdx.x] = 0.0f;
  }
  // PV ownership: thread -> dimension d = threadIdx.x % D of heads h0 + j * kHeadStride.
  // With G * D < kThreads (G = 1, D = 64) the upper threads own nothing.
  constexpr int kHeadStride = kThreads / D;  // 2 or 4
  constexpr int kOwned = (G * D + kThreads - 1) / kThreads;
  const int d = threadIdx.x % D;
  const int h0 = threadIdx.x / D;
  const bool owns = h0 < G;
  float acc[kOwned];
#pragma unroll
  for (int j = 0; j < kOwned; ++j) acc[j] = 0.0f;
  // Score ownership: thread -> token threadIdx.x % kTile of heads hs0 + i * kScoreStride.
  constexpr int kScoreStride = kThreads / kTile;
  constexpr int kScoreHeads = (G + kScoreStride - 1) / kScoreStride;
  const int hs0 = threadIdx.x / kTile;
  const bool scores = hs0 < G;

  for (int t = 0; t < num_tiles; ++t) {
    const int stage = t % 2;
    if (t + 1 < num_tiles) {
      const int next = (t + 1) % 2;
      LoadTile<D>(kv_s + next * 2 * kTile * kStride, kv_s + (next * 2 + 1) * kTile * kStride, kv,
                  table, key_begin + (t + 1) * kTile, key_end, dims, token_stride, kv_head);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* k_s = kv_s + stage * 2 * kTile * kStride;
    const __nv_bfloat16* v_s = k_s + kTile * kStride;
    const int tile_first = key_begin + t * kTile;

    // Scores: thread -> (token, heads hs0, hs0 + kScoreStride, ...).
    if (scores) {
      const int token = threadIdx.x % kTile;
      float dots[kScoreHeads];
#pragma unroll
      for (int h = 0; h < kScoreHeads; ++h) dots[h] = 0.0f;
      AddQueryKeyDots<D, kScoreHeads, kScoreStride>(k_s + token * kStride, q_s, hs0, dots);
      const int key = tile_first + token;
      const bool in_range = key < key_end;
      const bool valid = in_range && (!per_key || KeyVisible(vis, 0, key));
#pragma unroll
      for (int h = 0; h < kScoreHeads; ++h) {
        const int pair = hs0 + kScoreStride * h;
        if (pair < G) {
          bool seen = valid;
          if (kMasked && vis.q_len > 1) {  // each row its own causal bound (padding: the last)
            seen = in_range && KeyVisible(vis, min(row0 + pair / group, vis.q_len - 1), key);
          }
          p_s[pair * kTile + token] = seen ? dots[h] : -INFINITY;
        }
      }
    }
    __syncthreads();
    // Online softmax per head (only the masked variant can meet a tile with no visible key: a
    // dense chunk starts at a key its row sees).
    OnlineSoftmaxTile<kThreads>(p_s, max_s, sum_s, corr_s, G, /*empty_tiles=*/kMasked);
    __syncthreads();
    if (owns) AccumulateValuesTile<kStride, kOwned, kHeadStride>(acc, corr_s, p_s, v_s, d, h0);
    __syncthreads();  // the stage is refilled by the next iteration's prefetch
  }

  // The partial slot of pair p: the item's row p / group's plane, this item, head
  // kv_head * group + p % group.
  auto slot = [&](int pair) {
    const int row = pair / group;
    return (int64_t{item} + int64_t{row} * gridDim.x) * dims.heads + kv_head * group + pair % group;
  };
  if (owns) {
#pragma unroll
    for (int j = 0; j < kOwned; ++j) {
      const int pair = h0 + j * kHeadStride;
      if (pair < queries) {
        const float sum = sum_s[pair];
        partial_out[slot(pair) * D + d] = !kMasked || sum > 0.0f ? acc[j] / sum : 0.0f;
      }
    }
  }
  if (threadIdx.x < queries) {  // an empty chunk has weight exp(-inf) = 0 in the merge
    const float sum = sum_s[threadIdx.x];
    partial_lse[slot(threadIdx.x)] =
        !kMasked || sum > 0.0f ? max_s[threadIdx.x] + __logf(sum) : -INFINITY;
  }
}

// The tensor-core variant of the kernel above for GQA groups of at least 4 query heads and at
// most 16 (row, query head) pairs per item (issue 16 item 2): the pairs are the rows of one
// m16n8k16 tile (padded to 16 with zeros), each of the 4 warps takes a 16-key slice of every
// 64-key tile and keeps its own online softmax in registers (prefill_tile.cuh's mma.sync steps at
// 16 keys: no shared scores and no per-tile reductions across warps), and the warps' states merge
// once per item into the same partial slots as the CUDA-core kernel. K/V tiles stream through
// kTcStages shared stages, one CTA barrier per tile. A pair's result depends only on its own
// query and keys, so the masked variant gives a dense sequence bit for bit what the plain one
// does (the shadow-dense monitor's zero at covering windows).
constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
static_assert(kTcThreads == prefill_tile::kThreads, "LoadKvRows copies with the CTA's threads");
constexpr int kTcSliceKeys = kTile / kTcWarps;  // a warp's keys of each tile
constexpr int kTcRows = 16;                     // (query head) rows of the MMA tile
constexpr int kTcStages = 3;                    // 2 CTAs per SM at head_dim 128

template <int D>
__host__ __device__ constexpr int TcTileBytes() {
  return kTile * prefill_tile::SmemStride<D>() * int{sizeof(__nv_bfloat16)};
}

template <int D>
__host__ __device__ constexpr size_t TcSmemBytes() {
  return size_t{2} * kTcStages * TcTileBytes<D>() +
         size_t{kTcRows} * prefill_tile::SmemStride<D>() * sizeof(__nv_bfloat16);
}
// The merge reuses the stages: per warp and row the max, the sum and D output values.
static_assert(size_t{kTcWarps} * kTcRows * (128 + 2) * sizeof(float) <=
                  size_t{2} * kTcStages * TcTileBytes<128>(),
              "merge scratch fits the K/V stages");
static_assert(size_t{kTcWarps} * kTcRows * (64 + 2) * sizeof(float) <=
                  size_t{2} * kTcStages * TcTileBytes<64>(),
              "merge scratch fits the K/V stages");

template <int D, bool kMasked>
__global__ void __launch_bounds__(kTcThreads, 2)
    DecodeAttentionTensorCoreKernel(const __nv_bfloat16* __restrict__ q,
                                    const __nv_bfloat16* __restrict__ kv, AttentionSeqs seq_arrays,
                                    const int32_t* num_items, const int4* items, int group_rows,
                                    AttentionDims dims, float* __restrict__ partial_out,
                                    float* __restrict__ partial_lse) {
  constexpr int kStride = prefill_tile::SmemStride<D>();
  constexpr int kTileBytes = TcTileBytes<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* kv_s = smem_raw;  // stage i: K tile at 2i, V tile at 2i + 1 (padded rows)
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + 2 * kTcStages * kTileBytes);

  WaitForPrecedingKernels();  // q and this step's K/V come from the kernels ahead
  AllowNextKernelLaunch();
  const int item = blockIdx.x;
  if (item >= *num_items) return;  // the grid is sized for the most items this batch can have
  const int kv_head = blockIdx.y;
  const int4 it = items[item];
  const AttentionSeqInfo seq = seq_arrays.seqs[it.x];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const bool per_key = kMasked && (vis.window > 0 || vis.mask != nullptr || vis.q_len > 1);
  const int group = dims.heads / dims.kv_heads;
  const int row0 = it.w;                                          // the item's first row
  const int queries = min(seq.q_len - row0, group_rows) * group;  // (row, head) pairs stored
  const int key_begin = it.y;
  const int key_end = min(seq.kv_len, it.z);
  const int num_tiles = (key_end - key_begin + kTile - 1) / kTile;
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int32_t* table = seq_arrays.block_tables + seq.table_begin;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Tile row (pair) p is row row0 + p / group of the sequence, head kv_head * group + p % group.
  auto row_of = [&](int pair) { return min(row0 + pair / group, vis.q_len - 1); };

  // Tile t's copies into stage t % kTcStages; a commit even past the last tile keeps every
  // thread's group count in step with the loop's waits.
  auto load_tile = [&](int t) {
    if (t < num_tiles) {
      const int stage = t % kTcStages;
      const int first = key_begin + t * kTile;
      prefill_tile::LoadKvRows<D>(
          kv_s + 2 * stage * kTileBytes, kv_s + (2 * stage + 1) * kTileBytes, kv, table,
          [&](int r) { return first + r < key_end ? first + r : -1; }, dims, token_stride, kv_head);
    }
    CpAsyncCommit();
  };
  // The pairs' queries land with tile 0 (zeros past the stored pairs).
  for (int c = threadIdx.x; c < kTcRows * (D / 8); c += kTcThreads) {
    const int p = c / (D / 8);
    const int col = (c % (D / 8)) * 8;
    const bool valid = p < queries;
    const __nv_bfloat16* src =
        q + (int64_t{seq.q_begin + row_of(p)} * dims.heads + kv_head * group + p % group) * D + col;
    CpAsync16(q_s + p * kStride + col, valid ? src : q, valid);
  }
  for (int t = 0; t < kTcStages - 1; ++t) load_tile(t);

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = dims.scale * prefill_tile::kLog2e;
  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kTcStages - 2>();  // this thread's copies of tile t (and of Q) are done
    __syncthreads();               // everyone's; and tile t - 1's stage is free again
    if (t == 0) prefill_tile::LoadQFragments<D>(q_frag, q_s, /*warp=*/0, lane);
    load_tile(t + kTcStages - 1);
    const int stage = t % kTcStages;
    const auto* k_s = reinterpret_cast<const __nv_bfloat16*>(kv_s + 2 * stage * kTileBytes) +
                      warp * kTcSliceKeys * kStride;
    const auto* v_s = reinterpret_cast<const __nv_bfloat16*>(kv_s + (2 * stage + 1) * kTileBytes) +
                      warp * kTcSliceKeys * kStride;
    float s[kTcSliceKeys / 8][4];
    prefill_tile::TileScores<D, kTcSliceKeys>(s, q_frag, k_s, lane);
    const int slice_first = key_begin + t * kTile + warp * kTcSliceKeys;
    if (per_key || slice_first + kTcSliceKeys > key_end) {  // masks, or the chunk's end
#pragma unroll
      for (int nt = 0; nt < kTcSliceKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = slice_first + prefill_tile::ScoreKey(nt, e, lane);
          const int pair = lane / 4 + (e / 2) * 8;
          if (key >= key_end || (per_key && !KeyVisible(vis, row_of(pair), key))) {
            s[nt][e] = -INFINITY;
          }
        }
      }
    }
    prefill_tile::SoftmaxStep<D, kTcSliceKeys>(s, o, row_max, row_sum, scale_log2);
    prefill_tile::AccumulatePv<D, kTcSliceKeys>(o, s, v_s, lane);
  }

  // Merge the warps' states (max in raw score units, sum, unnormalised output) per row.
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages, which now hold the merge scratch
  auto* max_s = reinterpret_cast<float*>(smem_raw);  // [warp][row]
  float* sum_s = max_s + kTcWarps * kTcRows;         // [warp][row]
  float* out_s = sum_s + kTcWarps * kTcRows;         // [warp][row][D]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = lane / 4 + h * 8;
    const int at = warp * kTcRows + r;
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
  // A warp that saw no key of a row has max -inf and weight 0; a row that saw none at all (only
  // in the masked variant: a dense chunk starts at a key its row sees) stores zeros with weight
  // exp(-inf) = 0 for the merge. The partial slot of pair p: plane p / group, this item.
  for (int i = threadIdx.x; i < queries * D; i += kTcThreads) {
    const int p = i / D;
    const int d = i % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) m = fmaxf(m, max_s[w * kTcRows + p]);
    const float safe_m = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      const float f = prefill_tile::Exp2((max_s[w * kTcRows + p] - safe_m) * scale_log2);
      sum += sum_s[w * kTcRows + p] * f;
      acc += out_s[(w * kTcRows + p) * D + d] * f;
    }
    const int64_t slot = (int64_t{item} + int64_t{p / group} * gridDim.x) * dims.heads +
                         int64_t{kv_head} * group + p % group;
    partial_out[slot * D + d] = sum > 0.0f ? acc / sum : 0.0f;
    if (d == 0) partial_lse[slot] = sum > 0.0f ? m * dims.scale + __logf(sum) : -INFINITY;
  }
}

// Whether decode items of GQA groups of at least 4 with at most 16 (row, head) pairs run the
// tensor-core variant (the default) or the CUDA-core kernel ($SPARSESERVE_DECODE_TENSOR_CORES=0,
// read once: an A/B switch).
bool DecodeOnTensorCores() {
  static const bool on = [] {
    const char* env = std::getenv("SPARSESERVE_DECODE_TENSOR_CORES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return on;
}

template <int D, bool kMasked>
cudaError_t LaunchTensorCore(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                             const DecodeWork& work, const AttentionDims& dims, bf16_t* out,
                             cudaStream_t stream) {
  constexpr size_t kSmem = TcSmemBytes<D>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(DecodeAttentionTensorCoreKernel<D, kMasked>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  if (cudaError_t err = LaunchOverlapping(
          DecodeAttentionTensorCoreKernel<D, kMasked>, dim3(work.max_items, dims.kv_heads),
          kTcThreads, kSmem, stream, reinterpret_cast<const __nv_bfloat16*>(q),
          reinterpret_cast<const __nv_bfloat16*>(kv_layer), seqs, work.num_items, work.items,
          work.rows, dims, work.partial_out, work.partial_lse);
      err != cudaSuccess) {
    return err;
  }
  SplitKvMerge merge;
  merge.partial_out = work.partial_out;
  merge.partial_lse = work.partial_lse;
  merge.merges = work.merges;
  merge.merge_rows = work.merge_rows;
  merge.num_merges = work.num_merges;
  merge.max_chunks = work.max_items;
  return LaunchSplitKvMerge(merge, dims, out, stream);
}

// out[row][head] = Σ_i w_i o_i / Σ_i w_i with w_i = exp(lse_i - max lse) over the row's chunks.
// One block of head_dim threads per (merge, head); the chunk weights are computed once into
// shared memory (`weights`: one float per chunk) and every dimension's sum reads them.
__global__ void MergeKernel(const float* partial_out, const float* partial_lse, const int2* merges,
                            const int32_t* merge_rows, AttentionDims dims, __nv_bfloat16* out) {
  // A row whose chunks all saw nothing has max_lse = -inf: its output is zeros.
  extern __shared__ float weights[];
  __shared__ float scratch[32];
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const int2 m = merges[blockIdx.x];
  const int head = blockIdx.y;
  const int64_t row = merge_rows[blockIdx.x];
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < m.y; i += blockDim.x) {
    weights[i] = partial_lse[int64_t{m.x + i} * dims.heads + head];
    local_max = fmaxf(local_max, weights[i]);
  }
  const float max_lse = BlockReduce<ReduceOp::kMax>(local_max, scratch);
  const float safe_max = max_lse == -INFINITY ? 0.0f : max_lse;
  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < m.y; i += blockDim.x) {
    weights[i] = __expf(weights[i] - safe_max);
    local_sum += weights[i];
  }
  const float total = BlockReduce<ReduceOp::kSum>(local_sum, scratch);  // also orders `weights`
  const float inv_sum = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = threadIdx.x; d < dims.head_dim; d += blockDim.x) {
    float acc = 0.0f;
#pragma unroll 4
    for (int i = 0; i < m.y; ++i) {
      acc += weights[i] * partial_out[(int64_t{m.x + i} * dims.heads + head) * dims.head_dim + d];
    }
    out[(row * dims.heads + head) * dims.head_dim + d] = __float2bfloat16_rn(acc * inv_sum);
  }
}

template <int D, int G, bool kMasked>
cudaError_t Launch(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                   const DecodeWork& work, const AttentionDims& dims, bf16_t* out,
                   cudaStream_t stream) {
  constexpr size_t kSmem = DecodeSmemBytes<D, G>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(DecodeAttentionKernel<D, G, kMasked>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  if (cudaError_t err = LaunchOverlapping(
          DecodeAttentionKernel<D, G, kMasked>, dim3(work.max_items, dims.kv_heads), kThreads,
          kSmem, stream, reinterpret_cast<const __nv_bfloat16*>(q),
          reinterpret_cast<const __nv_bfloat16*>(kv_layer), seqs, work.num_items, work.items,
          work.rows, dims, work.partial_out, work.partial_lse);
      err != cudaSuccess) {
    return err;
  }
  SplitKvMerge merge;
  merge.partial_out = work.partial_out;
  merge.partial_lse = work.partial_lse;
  merge.merges = work.merges;
  merge.merge_rows = work.merge_rows;
  merge.num_merges = work.num_merges;
  merge.max_chunks = work.max_items;  // a row has at most max_items chunks
  return LaunchSplitKvMerge(merge, dims, out, stream);
}

// `queries`: (row, head) pairs per KV head. More than 16 only come with several rows, which
// run the masked variant, so the dense one is not instantiated for 32.
template <int D, bool kMasked>
cudaError_t LaunchForGroup(int queries, const bf16_t* q, const bf16_t* kv_layer,
                           const AttentionSeqs& seqs, const DecodeWork& work,
                           const AttentionDims& dims, bf16_t* out, cudaStream_t stream) {
  if (queries <= 1) return Launch<D, 1, kMasked>(q, kv_layer, seqs, work, dims, out, stream);
  if (queries <= 2) return Launch<D, 2, kMasked>(q, kv_layer, seqs, work, dims, out, stream);
  if (queries <= 4) return Launch<D, 4, kMasked>(q, kv_layer, seqs, work, dims, out, stream);
  if (queries <= 8) return Launch<D, 8, kMasked>(q, kv_layer, seqs, work, dims, out, stream);
  if (queries <= 16 || !kMasked) {
    return Launch<D, 16, kMasked>(q, kv_layer, seqs, work, dims, out, stream);
  }
  if constexpr (kMasked) {
    return Launch<D, kMaxGroup, true>(q, kv_layer, seqs, work, dims, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchSplitKvMerge(const SplitKvMerge& merge, const AttentionDims& dims, bf16_t* out,
                               cudaStream_t stream) {
  if (merge.num_merges == 0) return cudaSuccess;
  // One weight slot per chunk in shared memory.
  return LaunchOverlapping(MergeKernel, dim3(merge.num_merges, dims.heads), dims.head_dim,
                           merge.max_chunks * sizeof(float), stream, merge.partial_out,
                           merge.partial_lse, merge.merges, merge.merge_rows, dims,
                           reinterpret_cast<__nv_bfloat16*>(out));
}

cudaError_t LaunchDecodeAttention(const bf16_t* q, const bf16_t* kv_layer,
                                  const AttentionSeqs& seqs, const DecodeWork& work,
                                  const AttentionDims& dims, bf16_t* out, cudaStream_t stream) {
  if (work.max_items == 0 || work.num_merges == 0) return cudaSuccess;
  const int queries = dims.heads / dims.kv_heads * work.rows;
  if (queries > kMaxGroup || (work.rows > 1 && !work.masked)) return cudaErrorInvalidValue;
  if (dims.heads / dims.kv_heads >= 4 && queries <= kTcRows && DecodeOnTensorCores()) {
    switch (dims.head_dim * 2 + (work.masked ? 1 : 0)) {
      case 128: return LaunchTensorCore<64, false>(q, kv_layer, seqs, work, dims, out, stream);
      case 129: return LaunchTensorCore<64, true>(q, kv_layer, seqs, work, dims, out, stream);
      case 256: return LaunchTensorCore<128, false>(q, kv_layer, seqs, work, dims, out, stream);
      case 257: return LaunchTensorCore<128, true>(q, kv_layer, seqs, work, dims, out, stream);
      default: break;
    }
  }
  switch (dims.head_dim * 2 + (work.masked ? 1 : 0)) {
    case 128: return LaunchForGroup<64, false>(queries, q, kv_layer, seqs, work, dims, out, stream);
    case 129: return LaunchForGroup<64, true>(queries, q, kv_layer, seqs, work, dims, out, stream);
    case 256:
      return LaunchForGroup<128, false>(queries, q, kv_layer, seqs, work, dims, out, stream);
    case 257: return LaunchForGroup<128, true>(queries, q, kv_layer, seqs, work, dims, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
