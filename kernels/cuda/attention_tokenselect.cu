// TokenSelect sparse attention (kernels/tokenselect_index.h): each row attends its token list,
// [0, initial_end) ∪ the layer's selected tokens ∪ [LocalBegin, P) ∪ its visible new rows, read
// from the sequence's state slot on the device (the selection may come from an earlier step).
//
// The decode kernel's shape (attention_decode.cu), with a gather: one CTA takes one chunk of one
// row's list for one KV head and all query heads of its GQA group, so each selected K/V row is
// read once per row and KV head, not once per query head (a selection per KV head gives each
// CTA its KV head's list). 64 list positions per tile; each
// position is mapped to its key index and its K and V rows are copied token by token from their
// 64-token blocks with cp.async (16-byte pieces, double-buffered). Lists are split into
// items_per_row chunks (enough CTAs for a decode batch of one), merged by the split-KV merge.
// A prompt chunk's rows (q_len 512) run the same kernel row by row: correct, and its lists stay
// in L2, but K/V are re-read per row (see tokenselect_index.cu for the selection's cost).
#include <cuda_bf16.h>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/decode_tensor_core.cuh"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/tokenselect_index.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 256;

template <int D>
__host__ __device__ constexpr int Stride() {
  return D + 8;
}

template <int D, int G>
__host__ __device__ constexpr size_t SmemBytes() {
  return size_t{4} * kTile * Stride<D>() * sizeof(__nv_bfloat16)  // K, V x 2 stages
         + size_t{2} * kTile * sizeof(int32_t)                    // key index per position
         + size_t{G} * D * sizeof(float)                          // scaled queries
         + size_t{G} * kTile * sizeof(float)                      // scores / probabilities
         + size_t{3} * G * sizeof(float);                         // max, sum, correction
}

// A row's token list: position -> key index (or -1 for a position the row may not see).
struct TokenList {
  int32_t initial_end;      // positions [0, initial_end) are keys [0, initial_end)
  int32_t selected_end;     // then selected[0, selected_end - initial_end)
  int32_t local_begin;      // then keys local_begin, local_begin + 1, ...
  int32_t prefix;           // P: keys from here on are new rows (visibility checked)
  int32_t length;           // positions in the list
  const int32_t* selected;  // the layer's selected indices (state slot)
  KeyVisibility vis;
  int32_t row;

  __device__ __forceinline__ int32_t KeyAt(int32_t pos) const {
    if (pos < initial_end) return pos;
    if (pos < selected_end) {
      // The payload is checked, not trusted (tokenselect::ListEntryValid): a bad entry is skipped.
      const int32_t i = pos - initial_end;
      return tokenselect::ListEntryValid(selected, i, initial_end, local_begin) ? selected[i] : -1;
    }
    const int32_t key = local_begin + (pos - selected_end);
    return key < prefix || KeyVisible(vis, row, key) ? key : -1;
  }
};

// The token list of this CTA's (row, item) for KV head kv_head, and the item's positions
// [begin, end) of it.
template <int D>
__device__ __forceinline__ TokenList ChunkList(const TokenSelectAttentionParams& p, int kv_head,
                                               int32_t* begin, int32_t* end) {
  const int row_index = blockIdx.x / p.items_per_row;
  const int item = blockIdx.x % p.items_per_row;
  const int2 rr = p.rows[row_index];
  const TokenSelectSeqInfo seq = p.seqs[rr.x];
  TokenSelectParams params;
  params.k = seq.k;
  params.initial = seq.initial;
  params.local = seq.local;
  params.theta = seq.theta;
  params.per_kv_head = seq.lists > 1;
  const tokenselect::KeyRegions regions = tokenselect::RegionsOf(params, seq.q_len, seq.kv_len);
  const int64_t width = int64_t{p.dims.heads} * D;
  const int32_t* state = p.state + seq.state_slot * p.slot_words +
                         p.layer * tokenselect::StateWordsPerLayer(width, seq.k, seq.lists);
  TokenList list;
  list.row = rr.y;
  list.vis.q_len = seq.q_len;
  list.vis.kv_len = seq.kv_len;
  list.vis.mask = seq.mask_begin >= 0 ? p.masks + seq.mask_begin : nullptr;
  list.prefix = regions.prefix;
  list.initial_end = regions.initial_end;
  list.selected_end = regions.initial_end + min(max(state[tokenselect::kSelected], 0), seq.k);
  list.selected = state + tokenselect::ListOffset(width, seq.k, seq.lists, kv_head);
  list.local_begin = tokenselect::LocalBegin(params, state, regions.initial_end);
  list.length = list.selected_end + max(0, KeyEnd(list.vis, list.row) - list.local_begin);
  *begin = item * p.item_tokens;
  *end = min(list.length, *begin + p.item_tokens);
  return list;
}

template <int D, int G>
__global__ void __launch_bounds__(kThreads)
    TokenSelectAttentionKernel(const __grid_constant__ TokenSelectAttentionParams p) {
  constexpr int kStride = Stride<D>();
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* kv_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [stage][K|V][kTile][kStride]
  auto* keys_s = reinterpret_cast<int32_t*>(kv_s + 4 * kTile * kStride);  // [stage][kTile]
  auto* q_s = reinterpret_cast<float*>(keys_s + 2 * kTile);
  float* p_s = q_s + G * D;
  float* max_s = p_s + G * kTile;
  float* sum_s = max_s + G;
  float* corr_s = sum_s + G;

  WaitForPrecedingKernels();  // q, K/V and the selection come from the kernels ahead
  AllowNextKernelLaunch();
  const int kv_head = blockIdx.y;
  const TokenSelectSeqInfo seq = p.seqs[p.rows[blockIdx.x / p.items_per_row].x];
  int32_t begin = 0, end = 0;
  const TokenList list = ChunkList<D>(p, kv_head, &begin, &end);
  const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int group = p.dims.heads / p.dims.kv_heads;
  const int64_t token_stride = int64_t{p.dims.kv_heads} * D;
  const int32_t* table = p.block_tables + seq.table_begin;
  const auto* kv = reinterpret_cast<const __nv_bfloat16*>(p.kv_layer);
  const int col = (threadIdx.x % kChunks) * 8;

  // Position first + r goes to row r of the stage; the kChunks threads of a row each copy 16
  // bytes of its key and of its value.
  auto load_tile = [&](int stage, int32_t first) {
    __nv_bfloat16* k_dst = kv_s + stage * 2 * kTile * kStride;
    __nv_bfloat16* v_dst = k_dst + kTile * kStride;
#pragma unroll
    for (int r = threadIdx.x / kChunks; r < kTile; r += kRowsPerPass) {
      const int32_t pos = first + r;
      const int32_t key = pos < end ? list.KeyAt(pos) : -1;
      const __nv_bfloat16* k_src = kv;
      const __nv_bfloat16* v_src = kv;
      if (key >= 0) {
        k_src = kv +
                KeyRowOffset(table, key, p.dims.block_tokens, p.dims.block_shift, token_stride) +
                int64_t{kv_head} * D + col;
        v_src = k_src + int64_t{p.dims.block_tokens} * token_stride;
      }
      CpAsync16(k_dst + r * kStride + col, k_src, key >= 0);
      CpAsync16(v_dst + r * kStride + col, v_src, key >= 0);
      if (col == 0) keys_s[stage * kTile + r] = key;
    }
  };
  if (num_tiles > 0) {
    load_tile(0, begin);
    CpAsyncCommit();
  }

  const int64_t q_row = seq.q_begin + list.row;
  const auto* q_ptr =
      reinterpret_cast<const __nv_bfloat16*>(p.q) + (q_row * p.dims.heads + kv_head * group) * D;
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    q_s[i] = i < group * D ? __bfloat162float(q_ptr[i]) * p.dims.scale : 0.0f;
  }
  if (threadIdx.x < G) {
    max_s[threadIdx.x] = -INFINITY;
    sum_s[threadIdx.x] = 0.0f;
  }
  // PV ownership: thread -> dimension d = threadIdx.x % D of heads h0 + j * kHeadStride.
  constexpr int kHeadStride = kThreads / D;
  constexpr int kOwned = (G * D + kThreads - 1) / kThreads;
  const int d = threadIdx.x % D;
  const int h0 = threadIdx.x / D;
  const bool owns = h0 < G;
  float acc[kOwned];
#pragma unroll
  for (int j = 0; j < kOwned; ++j) acc[j] = 0.0f;
  // Score ownership: thread -> position threadIdx.x % kTile of heads hs0 + i * kScoreStride.
  constexpr int kScoreStride = kThreads / kTile;
  constexpr int kScoreHeads = (G + kScoreStride - 1) / kScoreStride;
  const int hs0 = threadIdx.x / kTile;
  const bool scores = hs0 < G;

  for (int t = 0; t < num_tiles; ++t) {
    const int stage = t % 2;
    if (t + 1 < num_tiles) {
      load_tile((t + 1) % 2, begin + (t + 1) * kTile);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* k_s = kv_s + stage * 2 * kTile * kStride;
    const __nv_bfloat16* v_s = k_s + kTile * kStride;
    if (scores) {
      const int token = threadIdx.x % kTile;
      float dots[kScoreHeads];
#pragma unroll
      for (int h = 0; h < kScoreHeads; ++h) dots[h] = 0.0f;
      AddQueryKeyDots<D, kScoreHeads, kScoreStride>(k_s + token * kStride, q_s, hs0, dots);
      const bool valid = keys_s[stage * kTile + token] >= 0;
#pragma unroll
      for (int h = 0; h < kScoreHeads; ++h) {
        if (hs0 + kScoreStride * h < G) {
          p_s[(hs0 + kScoreStride * h) * kTile + token] = valid ? dots[h] : -INFINITY;
        }
      }
    }
    __syncthreads();
    OnlineSoftmaxTile<kThreads>(p_s, max_s, sum_s, corr_s, G, /*empty_tiles=*/true);
    __syncthreads();
    if (owns) AccumulateValuesTile<kStride, kOwned, kHeadStride>(acc, corr_s, p_s, v_s, d, h0);
    __syncthreads();  // the stage is refilled by the next iteration's prefetch
  }

  __syncthreads();  // max_s / sum_s written before the first tile when there is none
  const int64_t head0 = int64_t{blockIdx.x} * p.dims.heads + kv_head * group;
  if (owns) {
#pragma unroll
    for (int j = 0; j < kOwned; ++j) {
      const int head = h0 + j * kHeadStride;
      if (head < group) {
        const float sum = sum_s[head];
        p.partial_out[(head0 + head) * D + d] = sum > 0.0f ? acc[j] / sum : 0.0f;
      }
    }
  }
  if (threadIdx.x < group) {  // an empty chunk has weight exp(-inf) = 0 in the merge
    const float sum = sum_s[threadIdx.x];
    p.partial_lse[head0 + threadIdx.x] = sum > 0.0f ? max_s[threadIdx.x] + __logf(sum) : -INFINITY;
  }
}

// The tensor-core variant (decode_tensor_core.cuh) for GQA groups of 4 to 16: the group's query
// heads of the row are the tile's pairs; the list's positions map to keys (-1: not seen).
template <int D>
struct TokenListChunk {
  TokenList list;
  const __nv_bfloat16* q_group;  // the row's queries of this KV head's group
  int64_t slot0;                 // the partial slot of the group's first head
  __device__ __forceinline__ const __nv_bfloat16* Query(int pair) const {
    return q_group + pair * D;
  }
  __device__ __forceinline__ int32_t KeyAt(int pos) const { return list.KeyAt(pos); }
  __device__ __forceinline__ bool Visible(int, int) const { return true; }  // in KeyAt already
  __device__ __forceinline__ int64_t Slot(int pair) const { return slot0 + pair; }
};

template <int D>
__global__ void __launch_bounds__(decode_tc::kThreads<1>, 2)
    TokenSelectAttentionTensorCoreKernel(const __grid_constant__ TokenSelectAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  WaitForPrecedingKernels();  // q, K/V and the selection come from the kernels ahead
  AllowNextKernelLaunch();
  const int kv_head = blockIdx.y;
  const TokenSelectSeqInfo seq = p.seqs[p.rows[blockIdx.x / p.items_per_row].x];
  const int group = p.dims.heads / p.dims.kv_heads;
  TokenListChunk<D> chunk;
  int32_t begin = 0, end = 0;
  chunk.list = ChunkList<D>(p, kv_head, &begin, &end);
  chunk.q_group = reinterpret_cast<const __nv_bfloat16*>(p.q) +
                  ((seq.q_begin + int64_t{chunk.list.row}) * p.dims.heads + kv_head * group) * D;
  chunk.slot0 = int64_t{blockIdx.x} * p.dims.heads + kv_head * group;
  decode_tc::RunChunk<D, 1>(smem_raw, reinterpret_cast<const __nv_bfloat16*>(p.kv_layer),
                            p.block_tables + seq.table_begin, p.dims, kv_head, begin, end, group,
                            /*per_key=*/false, chunk, p.partial_out, p.partial_lse);
  if (p.merge_counters == nullptr) return;  // MergeKernel merges (the A/B switch)
  const int row = static_cast<int>(blockIdx.x) / p.items_per_row;
  decode_tc::MergeIfLast<D, 1>(
      smem_raw, p.merge_counters + int64_t{row} * p.dims.kv_heads + kv_head, p.merges, p.merge_rows,
      row, /*rows=*/1, kv_head * group, group, p.dims.heads, p.partial_out, p.partial_lse,
      reinterpret_cast<__nv_bfloat16*>(p.out));
}

template <int D>
cudaError_t LaunchTensorCore(const TokenSelectAttentionParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = decode_tc::SmemBytes<D, 1>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(TokenSelectAttentionTensorCoreKernel<D>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>(int64_t{p.num_rows} * p.items_per_row), p.dims.kv_heads);
  return LaunchOverlapping(TokenSelectAttentionTensorCoreKernel<D>, grid, decode_tc::kThreads<1>,
                           kSmem, stream, p);
}

template <int D, int G>
cudaError_t Launch(const TokenSelectAttentionParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = SmemBytes<D, G>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(TokenSelectAttentionKernel<D, G>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>(int64_t{p.num_rows} * p.items_per_row), p.dims.kv_heads);
  return LaunchOverlapping(TokenSelectAttentionKernel<D, G>, grid, kThreads, kSmem, stream, p);
}

// Whether the tensor-core kernel runs a group, and whether it merges its chunks itself.
bool OnTensorCores(int group) {
  return group >= 4 && group <= decode_tc::kRows && DecodeOnTensorCores();
}
bool MergesItself(int group) {
  return OnTensorCores(group) && DecodeMergesInKernel();
}

template <int D>
cudaError_t LaunchForGroup(int group, const TokenSelectAttentionParams& p, cudaStream_t stream) {
  if (OnTensorCores(group)) {
    TokenSelectAttentionParams tc = p;
    if (!MergesItself(group)) tc.merge_counters = nullptr;
    if (tc.merge_counters != nullptr &&
        (p.out == nullptr || p.items_per_row + 1 > decode_tc::MergeScratchFloats<D>())) {
      return cudaErrorInvalidValue;
    }
    return LaunchTensorCore<D>(tc, stream);
  }
  if (group <= 1) return Launch<D, 1>(p, stream);
  if (group <= 2) return Launch<D, 2>(p, stream);
  if (group <= 4) return Launch<D, 4>(p, stream);
  if (group <= 8) return Launch<D, 8>(p, stream);
  return Launch<D, 16>(p, stream);
}

}  // namespace

cudaError_t LaunchTokenSelectAttention(const TokenSelectAttentionParams& p, bf16_t* out,
                                       cudaStream_t stream) {
  if (p.num_rows == 0) return cudaSuccess;
  const int group = p.dims.heads / p.dims.kv_heads;
  if (group > 16 || p.items_per_row < 1 || p.item_tokens < 1) return cudaErrorInvalidValue;
  TokenSelectAttentionParams with_out = p;
  with_out.out = out;
  cudaError_t e = cudaErrorInvalidValue;
  if (p.dims.head_dim == 64) e = LaunchForGroup<64>(group, with_out, stream);
  if (p.dims.head_dim == 128) e = LaunchForGroup<128>(group, with_out, stream);
  if (e != cudaSuccess || MergesItself(group)) return e;
  SplitKvMerge merge;
  merge.partial_out = p.partial_out;
  merge.partial_lse = p.partial_lse;
  merge.merges = p.merges;
  merge.merge_rows = p.merge_rows;
  merge.num_merges = p.num_rows;
  merge.max_chunks = p.items_per_row;
  return LaunchSplitKvMerge(merge, p.dims, out, stream);
}

}  // namespace sparseserve::kernels::cuda
