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
// that the grid covers the GPU even at batch 1 (split-KV); the chunks' partial softmax states are
// merged (log-sum-exp weighting) by the last chunk of each row group on the tensor-core kernel
// (decode_tc::MergeIfLast), by a second kernel after the CUDA-core one. Items carry explicit key
// ranges, so a sliding window's sequence gets items over its sinks and its window only; keys a
// range holds but the row cannot see score -inf, and a tile, chunk or row with no visible key
// yields zeros, not NaN.
#include <cuda_bf16.h>

#include <cstdlib>
#include <string_view>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/decode_tensor_core.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/per_device_once.cuh"

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

// The visibility rule of a sequence record (kernels/attention_visibility.h), and whether its keys
// need checking one by one (masks, windows, several rows) in a masked variant.
__device__ __forceinline__ KeyVisibility VisibilityOf(const AttentionSeqInfo& seq,
                                                      const uint8_t* masks) {
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? masks + seq.mask_begin : nullptr;
  return vis;
}
__device__ __forceinline__ bool ChecksEveryKey(const KeyVisibility& vis) {
  return vis.window > 0 || vis.mask != nullptr || vis.q_len > 1;
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
                          AttentionSeqs seq_arrays, DecodeWork work, AttentionDims dims,
                          __nv_bfloat16* /*out: MergeKernel writes it*/) {
  const int32_t* num_items = work.num_items;
  const int4* items = work.items;
  const int group_rows = work.rows;
  float* __restrict__ partial_out = work.partial_out;
  float* __restrict__ partial_lse = work.partial_lse;
  constexpr int kStride = Stride<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* kv_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [stage][K|V][kTile][kStride]
  auto* q_s = reinterpret_cast<float*>(kv_s + 4 * kTile * kStride);
  float* p_s = q_s + G * D;
  float* max_s = p_s + G * kTile;
  float* sum_s = max_s + G;
  float* corr_s = sum_s + G;

  // The grid is sized for the most items this batch can have; the plan's arrays were uploaded
  // before the step, so idle CTAs leave before waiting on the kernels ahead (q, this step's K/V)
  // — all but CTA 0 when there is no item, which keeps the chain (grid_dependency.cuh).
  const int item = blockIdx.x;
  if (item >= *num_items) {
    if (item == 0) WaitForPrecedingKernels();
    return;
  }
  AllowNextKernelLaunch();  // the output projection's weight loads may start during the last wave
  WaitForPrecedingKernels();
  const int kv_head = blockIdx.y;
  const int4 it = items[item];
  const AttentionSeqInfo seq = seq_arrays.seqs[it.x];
  const KeyVisibility vis = VisibilityOf(seq, seq_arrays.masks);
  const bool per_key = kMasked && ChecksEveryKey(vis);
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

// The tensor-core variant of the kernel above for GQA groups of at least 4 query heads, one or two
// 16-pair tiles per item (decode_tensor_core.cuh): a pair's result depends only on its
// own query and keys, so the masked variant gives a dense sequence bit for bit what the plain one
// does (the shadow-dense monitor's zero at covering windows).
template <int D>
struct DecodeItemChunk {
  const __nv_bfloat16* q;
  KeyVisibility vis;
  int q_begin, row0, group, kv_head, heads, grid_items, item;
  // Pair p is row row0 + p / group of the sequence, head kv_head * group + p % group.
  __device__ __forceinline__ int RowOf(int pair) const {
    return min(row0 + pair / group, vis.q_len - 1);
  }
  __device__ __forceinline__ const __nv_bfloat16* Query(int pair) const {
    return q + (int64_t{q_begin + RowOf(pair)} * heads + kv_head * group + pair % group) * D;
  }
  __device__ __forceinline__ int32_t KeyAt(int pos) const { return pos; }
  __device__ __forceinline__ bool Visible(int pair, int key) const {
    return KeyVisible(vis, RowOf(pair), key);
  }
  // Plane pair / group of this item (DecodeWork's partial layout).
  __device__ __forceinline__ int64_t Slot(int pair) const {
    return (int64_t{item} + int64_t{pair / group} * grid_items) * heads + kv_head * group +
           pair % group;
  }
};

template <int D, bool kMasked, int kTiles>
__global__ void __launch_bounds__(decode_tc::kThreads<kTiles>, kTiles == 1 ? 2 : 1)
    DecodeAttentionTensorCoreKernel(const __nv_bfloat16* __restrict__ q,
                                    const __nv_bfloat16* __restrict__ kv, AttentionSeqs seq_arrays,
                                    DecodeWork work, AttentionDims dims, __nv_bfloat16* out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int item = blockIdx.x;
  if (item >= *work.num_items) {  // idle, as in the kernel above
    if (item == 0) WaitForPrecedingKernels();
    return;
  }
  AllowNextKernelLaunch();  // as in the kernel above
  WaitForPrecedingKernels();
  const int4 it = work.items[item];
  const AttentionSeqInfo seq = seq_arrays.seqs[it.x];
  DecodeItemChunk<D> chunk;
  chunk.q = q;
  chunk.vis = VisibilityOf(seq, seq_arrays.masks);
  chunk.q_begin = seq.q_begin;
  chunk.row0 = it.w;
  chunk.group = dims.heads / dims.kv_heads;
  chunk.kv_head = blockIdx.y;
  chunk.heads = dims.heads;
  chunk.grid_items = gridDim.x;
  chunk.item = item;
  const bool per_key = kMasked && ChecksEveryKey(chunk.vis);
  const int rows = min(seq.q_len - it.w, work.rows);
  decode_tc::RunChunk<D, kTiles>(smem_raw, kv, seq_arrays.block_tables + seq.table_begin, dims,
                                 blockIdx.y, it.y, min(seq.kv_len, it.z), rows * chunk.group,
                                 per_key, chunk, work.partial_out, work.partial_lse);
  if (work.merge_counters == nullptr) return;  // MergeKernel merges (the A/B switch)
  const int first_merge = work.item_merges[item];
  decode_tc::MergeIfLast<D, kTiles>(
      smem_raw, work.merge_counters + int64_t{first_merge} * dims.kv_heads + blockIdx.y,
      work.merges, work.merge_rows, first_merge, rows, blockIdx.y * chunk.group, chunk.group,
      dims.heads, work.partial_out, work.partial_lse, out);
}

// Launches one of the decode kernels (they share their parameters) over the work's items, then
// the split-KV merge of their partial states unless the kernel merges in its last chunks.
template <class Kernel>
cudaError_t LaunchItemsAndMerge(Kernel kernel, bool merges_itself, int threads, size_t smem,
                                const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                                const DecodeWork& work, const AttentionDims& dims, bf16_t* out,
                                cudaStream_t stream) {
  if (cudaError_t err = LaunchOverlapping(kernel, dim3(work.max_items, dims.kv_heads), threads,
                                          smem, stream, reinterpret_cast<const __nv_bfloat16*>(q),
                                          reinterpret_cast<const __nv_bfloat16*>(kv_layer), seqs,
                                          work, dims, reinterpret_cast<__nv_bfloat16*>(out));
      err != cudaSuccess || merges_itself) {
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

template <int D, bool kMasked, int kTiles>
cudaError_t LaunchTensorCore(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                             const DecodeWork& work, const AttentionDims& dims, bf16_t* out,
                             cudaStream_t stream) {
  constexpr size_t kSmem = decode_tc::SmemBytes<D, kTiles>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(DecodeAttentionTensorCoreKernel<D, kMasked, kTiles>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  DecodeWork tc_work = work;
  if (!DecodeMergesInKernel()) tc_work.merge_counters = nullptr;
  if (tc_work.merge_counters != nullptr &&
      (work.item_merges == nullptr || work.max_items + 1 > decode_tc::MergeScratchFloats<D>())) {
    return cudaErrorInvalidValue;
  }
  return LaunchItemsAndMerge(DecodeAttentionTensorCoreKernel<D, kMasked, kTiles>,
                             /*merges_itself=*/tc_work.merge_counters != nullptr,
                             decode_tc::kThreads<kTiles>, kSmem, q, kv_layer, seqs, tc_work, dims,
                             out, stream);
}

// out[row][head] = Σ_i w_i o_i / Σ_i w_i with w_i = exp(lse_i - max lse) over the row's chunks.
// One block of head_dim threads per (merge, head); the chunk weights are computed once into
// shared memory (`weights`: one float per chunk) and every dimension's sum reads them.
// The weighted sum's unroll: the compiler reads a group of `weights` before it checks the count,
// so LaunchSplitKvMerge allocates them in whole groups (memcheck: 12-byte reads past the 2 slots
// of a split-KV prefill merge).
constexpr int kMergeUnroll = 4;
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
#pragma unroll kMergeUnroll
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
  return LaunchItemsAndMerge(DecodeAttentionKernel<D, G, kMasked>, /*merges_itself=*/false,
                             kThreads, kSmem, q, kv_layer, seqs, work, dims, out, stream);
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

bool DecodeMergesInKernel() {
  static const bool on = [] {
    const char* env = std::getenv("SPARSESERVE_DECODE_MERGE_KERNEL");
    return env == nullptr || std::string_view(env) != "1";
  }();
  return on;
}

bool DecodeOnTensorCores() {
  static const bool on = [] {
    const char* env = std::getenv("SPARSESERVE_DECODE_TENSOR_CORES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return on;
}

cudaError_t LaunchSplitKvMerge(const SplitKvMerge& merge, const AttentionDims& dims, bf16_t* out,
                               cudaStream_t stream) {
  if (merge.num_merges == 0) return cudaSuccess;
  // One weight slot per chunk in shared memory, in whole groups of MergeKernel's unroll.
  const size_t slots =
      (static_cast<size_t>(merge.max_chunks) + kMergeUnroll - 1) / kMergeUnroll * kMergeUnroll;
  return LaunchOverlapping(MergeKernel, dim3(merge.num_merges, dims.heads), dims.head_dim,
                           slots * sizeof(float), stream, merge.partial_out, merge.partial_lse,
                           merge.merges, merge.merge_rows, dims,
                           reinterpret_cast<__nv_bfloat16*>(out));
}

cudaError_t LaunchDecodeAttention(const bf16_t* q, const bf16_t* kv_layer,
                                  const AttentionSeqs& seqs, const DecodeWork& work,
                                  const AttentionDims& dims, bf16_t* out, cudaStream_t stream) {
  if (work.max_items == 0 || work.num_merges == 0) return cudaSuccess;
  const int queries = dims.heads / dims.kv_heads * work.rows;
  if (queries > kMaxGroup || (work.rows > 1 && !work.masked)) return cudaErrorInvalidValue;
  // Tensor cores: one 16-pair tile, or two for verify items of up to 32 pairs (masked only).
  if (dims.heads / dims.kv_heads >= 4 && DecodeOnTensorCores()) {
    const bool two = queries > decode_tc::kRows;
    switch (dims.head_dim * 4 + (work.masked ? 2 : 0) + (two ? 1 : 0)) {
      case 256: return LaunchTensorCore<64, false, 1>(q, kv_layer, seqs, work, dims, out, stream);
      case 258: return LaunchTensorCore<64, true, 1>(q, kv_layer, seqs, work, dims, out, stream);
      case 259: return LaunchTensorCore<64, true, 2>(q, kv_layer, seqs, work, dims, out, stream);
      case 512: return LaunchTensorCore<128, false, 1>(q, kv_layer, seqs, work, dims, out, stream);
      case 514: return LaunchTensorCore<128, true, 1>(q, kv_layer, seqs, work, dims, out, stream);
      case 515: return LaunchTensorCore<128, true, 2>(q, kv_layer, seqs, work, dims, out, stream);
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
