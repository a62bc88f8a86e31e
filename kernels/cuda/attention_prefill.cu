// Dense causal attention for prompt chunks over the paged KV layout, on tensor cores.
//
// FlashAttention-2 structure (papers/kernel-references.md): a CTA of 4 warps owns a 64-row query
// tile of one head (16 rows per warp); it walks the 64-key tiles the tile can see, gathering each
// key row through the block table with cp.async, computes S = QKᵀ and O += PV with mma.sync
// m16n8k16 (bf16 in, f32 accumulate) and keeps an online softmax in registers. GQA: query heads
// read their group's K/V rows in place (never repeated in memory). The next K tile loads while
// the current softmax and PV run; V likewise overlaps the next S. Masks and sliding windows
// (kernels/attention_visibility.h) apply per score; tiles no row of the CTA can see through its
// window are never loaded.
#include <cuda_bf16.h>

#include <cfloat>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kRows = kPrefillTileRows;  // query rows per CTA
constexpr int kKeys = 64;                // keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
__host__ __device__ constexpr int SmemStride() {
  return D + 8;  // +16 bytes per row: ldmatrix's 8 row addresses fall in distinct banks
}

template <int D>
__host__ __device__ constexpr size_t PrefillSmemBytes() {
  return size_t{3} * kRows * SmemStride<D>() * sizeof(__nv_bfloat16);
}

// Queues the copy of 64 key (or value) rows [first_key, first_key + 64) into `dst`. Each thread
// copies one 16-byte column chunk of every (kThreads / (D / 8))-th row: one table lookup per row.
template <int D>
__device__ __forceinline__ void LoadKvTile(__nv_bfloat16* dst, const __nv_bfloat16* kv,
                                           const int32_t* table, int first_key, int kv_end,
                                           const AttentionDims& dims, int64_t token_stride,
                                           int kv_head, bool values) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int col = (threadIdx.x % kChunks) * 8;
  const int64_t value_offset = values ? int64_t{dims.block_tokens} * token_stride : 0;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kKeys; r += kRowsPerPass) {
    const int pos = first_key + r;
    const bool valid = pos < kv_end;
    const __nv_bfloat16* src = kv;
    if (valid) {
      src = kv + KeyRowOffset(table, pos, dims.block_tokens, dims.block_shift, token_stride) +
            value_offset + int64_t{kv_head} * D + col;
    }
    CpAsync16(dst + r * SmemStride<D>() + col, src, valid);
  }
}

// kMasked: the variant for batches with masks or windows (kernels/attention_visibility.h per
// score, windowed tiles skipped); the dense variant keeps only the causal bound, so dense
// prefill pays nothing for the rule (its registers would otherwise cost ~15% here).
template <int D, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionKernel(const __nv_bfloat16* __restrict__ q,
                           const __nv_bfloat16* __restrict__ kv, AttentionSeqs seq_arrays,
                           const int2* tiles, AttentionDims dims, __nv_bfloat16* __restrict__ out) {
  constexpr int kStride = SmemStride<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + kRows * kStride;
  __nv_bfloat16* v_s = k_s + kKeys * kStride;

  const int2 tile = tiles[blockIdx.x];
  const AttentionSeqInfo seq = seq_arrays.seqs[tile.x];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const int q0 = tile.y;  // first query row of this tile within the sequence
  const int head = blockIdx.y;
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
  for (int c = threadIdx.x; c < kRows * (D / 8); c += kThreads) {
    const int r = c / (D / 8);
    const int col = (c % (D / 8)) * 8;
    const bool valid = r < rows;
    const __nv_bfloat16* src =
        valid ? q + (int64_t{seq.q_begin + q0 + r} * dims.heads + head) * D + col : q;
    CpAsync16(q_s + r * kStride + col, src, valid);
  }
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
    if (jj == 0) {  // the first visited tile (not tile 0 when a window skips it)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        const int col = kk * 16 + (lane / 16) * 8;
        LdMatrixX4(q_frag[kk], q_s + r * kStride + col);
      }
    }
    // S = Q Kᵀ for this warp's 16 rows x 64 keys (8 n-tiles of 8 keys).
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        const int key = np * 16 + (lane % 8) + (lane / 16) * 8;
        const int col = kk * 16 + ((lane / 8) % 2) * 8;
        LdMatrixX4(b, k_s + key * kStride + col);
        MmaBf16(s[2 * np], q_frag[kk], b[0], b[1]);
        MmaBf16(s[2 * np + 1], q_frag[kk], b[2], b[3]);
      }
    }
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
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * scale_log2;
        if (needs_mask) {
          const int key = tile_first_key + nt * 8 + (lane % 4) * 2 + (e % 2);
          if (per_key) {
            const int row = e < 2 ? my_row0 : my_row1;
            if (row >= seq.q_len || key >= seq.kv_len || !KeyVisible(vis, row, key)) v = -INFINITY;
          } else if (key > (e < 2 ? my_pos0 : my_pos1)) {
            v = -INFINITY;
          }
        }
        s[nt][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(row_max[h], tile_max[h]);
      // A row whose keys are all masked so far keeps max -inf; use 0 so exp2 gives 0, not NaN.
      const float safe_max = new_max == -INFINITY ? 0.0f : new_max;
      correction[h] = exp2f(row_max[h] - safe_max);
      row_max[h] = new_max;
      row_sum[h] *= correction[h];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float p0 = exp2f(s[nt][2 * h] - safe_max);
        const float p1 = exp2f(s[nt][2 * h + 1] - safe_max);
        s[nt][2 * h] = p0;
        s[nt][2 * h + 1] = p1;
        row_sum[h] += p0 + p1;
      }
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }

    if (more) {
      CpAsyncWait<1>();  // V_j has landed; K_{j+1} may still be in flight
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    // O += P V: P's accumulator layout is the A-fragment layout of the next MMA.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      a[0] = PackBf16x2(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PackBf16x2(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        const int col = dp * 16 + (lane / 16) * 8;
        LdMatrixX4Trans(b, v_s + key * kStride + col);
        MmaBf16(o[2 * dp], a, b[0], b[1]);
        MmaBf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with v_s
    if (more) {
      LoadKvTile<D>(v_s, kv, table, next_key, kv_end, dims, token_stride, kv_head, true);
      CpAsyncCommit();
    }
  }

  // Normalise and store the rows this thread holds.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = warp * 16 + lane / 4 + h * 8;
    if (r >= rows) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that sees no key outputs zeros
    __nv_bfloat16* dst = out + (int64_t{seq.q_begin + q0 + r} * dims.heads + head) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    }
  }
}

template <int D, bool kMasked>
cudaError_t Launch(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                   const int2* tiles, int num_tiles, const AttentionDims& dims, bf16_t* out,
                   cudaStream_t stream) {
  constexpr size_t kSmem = PrefillSmemBytes<D>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      PrefillAttentionKernel<D, kMasked>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(num_tiles, dims.heads);
  PrefillAttentionKernel<D, kMasked><<<grid, kThreads, kSmem, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, tiles, dims, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPrefillAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, const int2* tiles, int num_tiles,
                                   const AttentionDims& dims, bool masked, bf16_t* out,
                                   cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  switch (dims.head_dim * 2 + (masked ? 1 : 0)) {
    case 128: return Launch<64, false>(q, kv_layer, seqs, tiles, num_tiles, dims, out, stream);
    case 129: return Launch<64, true>(q, kv_layer, seqs, tiles, num_tiles, dims, out, stream);
    case 256: return Launch<128, false>(q, kv_layer, seqs, tiles, num_tiles, dims, out, stream);
    case 257: return Launch<128, true>(q, kv_layer, seqs, tiles, num_tiles, dims, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
