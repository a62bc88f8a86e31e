// Dense causal attention for prompt chunks over the paged KV layout, on tensor cores.
//
// FlashAttention-2 structure (papers/kernel-references.md): a CTA of 4 warps owns a 64-row query
// tile of one head (16 rows per warp); it walks the 64-key tiles the tile can see, gathering each
// key row through the block table with cp.async, computes S = QKᵀ and O += PV with mma.sync
// m16n8k16 (bf16 in, f32 accumulate) and keeps an online softmax in registers. GQA: query heads
// read their group's K/V rows in place (never repeated in memory). The next K tile loads while
// the current softmax and PV run; V likewise overlaps the next S. Masks and sliding windows
// (kernels/attention_visibility.h) apply per score; tiles no row of the CTA can see through its
// window are never loaded. The tile math is shared with the sparse kernel (prefill_tile.cuh).
#include <cuda_bf16.h>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/cuda/prefill_tile.cuh"
#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {
namespace {

// The tile math shared with the sparse prefill kernel.
using prefill_tile::AccumulatePv;
using prefill_tile::kKeys;
using prefill_tile::kLog2e;
using prefill_tile::kRows;
using prefill_tile::kThreads;
using prefill_tile::LoadKvRows;
using prefill_tile::LoadQFragments;
using prefill_tile::LoadQTile;
using prefill_tile::ScoreKey;
using prefill_tile::SmemBytes;
using prefill_tile::SmemStride;
using prefill_tile::SoftmaxStep;
using prefill_tile::StoreRows;
using prefill_tile::TileScores;

// Queues the copy of 64 key (or value) rows [first_key, first_key + 64), zeros from kv_end on.
template <int D>
__device__ __forceinline__ void LoadKvTile(__nv_bfloat16* dst, const __nv_bfloat16* kv,
                                           const int32_t* table, int first_key, int kv_end,
                                           const AttentionDims& dims, int64_t token_stride,
                                           int kv_head, bool values) {
  LoadKvRows<D>(
      dst, kv, table,
      [&](int r) {
        const int pos = first_key + r;
        return pos < kv_end ? pos : -1;
      },
      dims, token_stride, kv_head, values);
}

// kMasked: the variant for batches with masks or windows (kernels/attention_visibility.h per
// score, windowed tiles skipped); the dense variant keeps only the causal bound, so dense
// prefill pays nothing for the rule (its registers would otherwise cost ~15% here).
template <int D, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionKernel(const __nv_bfloat16* __restrict__ q,
                           const __nv_bfloat16* __restrict__ kv, AttentionSeqs seq_arrays,
                           const int2* tiles, AttentionDims dims, PrefillTileGates gates,
                           __nv_bfloat16* __restrict__ out) {
  constexpr int kStride = SmemStride<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + kRows * kStride;
  __nv_bfloat16* v_s = k_s + kKeys * kStride;

  const int2 tile = tiles[blockIdx.x];
  const int head = blockIdx.y;
  if (gates.areas != nullptr) {
    // An MInference tile runs here only for heads its index switched to dense; the sparse heads
    // are another kernel's. The whole CTA leaves together, before any barrier.
    const int2 area = gates.areas[blockIdx.x];
    if (area.x >= 0 && gates.index[area.x + int64_t{head} * area.y] !=
                           static_cast<int32_t>(HeadPatternKind::kDense)) {
      return;
    }
  }
  const AttentionSeqInfo seq = seq_arrays.seqs[tile.x];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const int q0 = tile.y;  // first query row of this tile within the sequence
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int rows = min(kRows, seq.q_len - q0);
  const int first_pos = seq.kv_len - seq.q_len + q0;  // absolute position of tile row 0
  // Keys any row of the tile may see: the last valid row's causal bound, every key under a mask.
  const int kv_end = kMasked && vis.mask != nullptr ? seq.kv_len : first_pos + rows;
  const int num_tiles = (kv_end + kKeys - 1) / kKeys;
  // With a window the tiles between the sinks and the first row's window are skipped: the loop
  // visits tiles [0, lead) and then [start_tile, num_tiles).
  const int start_tile = kMasked ? WindowBegin(vis, q0) / kKeys : 0;
  const int lead =
      kMasked && vis.window > 0 ? min((vis.sink_tokens + kKeys - 1) / kKeys, start_tile) : 0;
  const int tile_count = lead + num_tiles - start_tile;
  auto tile_at = [&](int jj) { return jj < lead ? jj : start_tile + jj - lead; };
  // beyond the causal bound
  const bool per_key = kMasked && (vis.window > 0 || vis.mask != nullptr);
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int32_t* table = seq_arrays.block_tables + seq.table_begin;

  // Q tile (zero rows past the chunk) and the first K tile form group 0; the first V tile group 1.
  LoadQTile<D>(q_s, q, seq.q_begin + q0, rows, dims.heads, head);
  LoadKvTile<D>(k_s, kv, table, tile_at(0) * kKeys, kv_end, dims, token_stride, kv_head, false);
  CpAsyncCommit();
  LoadKvTile<D>(v_s, kv, table, tile_at(0) * kKeys, kv_end, dims, token_stride, kv_head, true);
  CpAsyncCommit();

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's share; summed over the 4-lane quad at the end
  const float scale_log2 = dims.scale * kLog2e;
  // Absolute positions of the two rows this thread holds (fragment rows lane/4 and lane/4 + 8).
  const int my_pos0 = first_pos + warp * 16 + lane / 4;
  const int my_pos1 = my_pos0 + 8;
  const int my_row0 = q0 + warp * 16 + lane / 4;  // the same rows within the sequence's chunk
  const int my_row1 = my_row0 + 8;
  const int warp_first_pos = first_pos + warp * 16;

  for (int jj = 0; jj < tile_count; ++jj) {
    const int j = tile_at(jj);
    CpAsyncWait<1>();  // Q and K_j have landed (V_j may still be in flight)
    __syncthreads();
    if (jj == 0) LoadQFragments<D>(q_frag, q_s, warp, lane);  // first visited tile
    float s[8][4];
    TileScores<D>(s, q_frag, k_s, lane);
    __syncthreads();  // every warp is done with k_s
    const bool more = jj + 1 < tile_count;
    const int next_key = more ? tile_at(jj + 1) * kKeys : 0;
    if (more) {
      LoadKvTile<D>(k_s, kv, table, next_key, kv_end, dims, token_stride, kv_head, false);
      CpAsyncCommit();
    }

    // Scale, causal mask (only tiles reaching past this warp's first row need it), online softmax.
    const int tile_first_key = j * kKeys;
    const bool needs_mask = per_key || tile_first_key + kKeys - 1 > warp_first_pos;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * scale_log2;
        if (needs_mask) {
          const int key = tile_first_key + ScoreKey(nt, e, lane);
          if (per_key) {
            const int row = e < 2 ? my_row0 : my_row1;
            if (row >= seq.q_len || key >= seq.kv_len || !KeyVisible(vis, row, key)) v = -INFINITY;
          } else if (key > (e < 2 ? my_pos0 : my_pos1)) {
            v = -INFINITY;
          }
        }
        s[nt][e] = v;
      }
    }
    SoftmaxStep<D>(s, o, row_max, row_sum);

    if (more) {
      CpAsyncWait<1>();  // V_j has landed; K_{j+1} may still be in flight
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    AccumulatePv<D>(o, s, v_s, lane);
    __syncthreads();  // every warp is done with v_s
    if (more) {
      LoadKvTile<D>(v_s, kv, table, next_key, kv_end, dims, token_stride, kv_head, true);
      CpAsyncCommit();
    }
  }

  StoreRows<D>(out, o, row_sum, seq.q_begin + q0, rows, dims.heads, head, warp, lane);
}

template <int D, bool kMasked>
cudaError_t Launch(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                   const int2* tiles, int num_tiles, const AttentionDims& dims,
                   const PrefillTileGates& gates, bf16_t* out, cudaStream_t stream) {
  constexpr size_t kSmem = SmemBytes<D>();
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(PrefillAttentionKernel<D, kMasked>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(num_tiles, dims.heads);
  PrefillAttentionKernel<D, kMasked><<<grid, kThreads, kSmem, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, tiles, dims, gates, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPrefillAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, const int2* tiles, int num_tiles,
                                   const AttentionDims& dims, bool masked,
                                   const PrefillTileGates& gates, bf16_t* out,
                                   cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  switch (dims.head_dim * 2 + (masked ? 1 : 0)) {
    case 128:
      return Launch<64, false>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, out, stream);
    case 129:
      return Launch<64, true>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, out, stream);
    case 256:
      return Launch<128, false>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, out, stream);
    case 257:
      return Launch<128, true>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
