// The per-tile steps of one-row (decode) attention over keys staged in shared memory, shared by
// the dense decode kernel (attention_decode.cu) and TokenSelect's token-list kernel
// (attention_tokenselect.cu), whose tiles differ only in which keys they gather; the dot product
// is also TokenSelect's scoring step (tokenselect_index.cu).
#ifndef SPARSESERVE_KERNELS_CUDA_DECODE_TILE_CUH_
#define SPARSESERVE_KERNELS_CUDA_DECODE_TILE_CUH_

#include <cuda_bf16.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"  // kDecodeTileTokens

namespace sparseserve::kernels::cuda {

static_assert(kDecodeTileTokens == 64, "OnlineSoftmaxTile gives each lane two keys of a tile");

// dots[j] += q · key for the query heads h0 + kHeadStride * j (f32 queries q_s [heads][D], one
// bf16 key row of D values, read as 16-byte chunks).
template <int D, int kHeads, int kHeadStride>
__device__ __forceinline__ void AddQueryKeyDots(const __nv_bfloat16* key, const float* q_s, int h0,
                                                float (&dots)[kHeads]) {
#pragma unroll 4
  for (int c = 0; c < D / 8; ++c) {
    const uint4 raw = *reinterpret_cast<const uint4*>(key + c * 8);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    float kf[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      kf[2 * i] = f.x;
      kf[2 * i + 1] = f.y;
    }
#pragma unroll
    for (int j = 0; j < kHeads; ++j) {
      const float* qh = q_s + (h0 + kHeadStride * j) * D + c * 8;
#pragma unroll
      for (int i = 0; i < 8; ++i) dots[j] += qh[i] * kf[i];
    }
  }
}

// Online softmax over one 64-key tile of scores p_s [heads][64] (-inf = not visible): warp w
// takes heads w, w + warps, ...; two keys per lane. Leaves exp(score - running max) in p_s and
// updates the running max_s / sum_s, with corr_s = the factor the accumulators must be scaled by.
// `empty_tiles`: a tile may have no visible key; its max is then taken as 0 so masked scores give
// 0 (exp(-inf - -inf) would be NaN).
template <int kThreads>
__device__ __forceinline__ void OnlineSoftmaxTile(float* p_s, float* max_s, float* sum_s,
                                                  float* corr_s, int heads, bool empty_tiles) {
  constexpr int kTile = kDecodeTileTokens;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int head = warp; head < heads; head += kThreads / 32) {
    float* p = p_s + head * kTile;
    const float s0 = p[lane];
    const float s1 = p[lane + 32];
    float m = fmaxf(s0, s1);
    m = WarpReduce<ReduceOp::kMax>(m);
    const float old_max = max_s[head];
    const float new_max = fmaxf(old_max, m);
    const float safe_max = empty_tiles && new_max == -INFINITY ? 0.0f : new_max;
    const float e0 = __expf(s0 - safe_max);
    const float e1 = __expf(s1 - safe_max);
    float sum = e0 + e1;
    sum = WarpReduce<ReduceOp::kSum>(sum);
    p[lane] = e0;
    p[lane + 32] = e1;
    __syncwarp();
    if (lane == 0) {
      const float corr = __expf(old_max - safe_max);
      corr_s[head] = corr;
      sum_s[head] = sum_s[head] * corr + sum;
      max_s[head] = new_max;
    }
  }
}

// acc[j] = acc[j] * corr + Σ_token p[head][token] * V[token][d] for the heads h0 + kHeadStride * j
// (one output dimension d per thread; v_s [64][kStride] bf16).
template <int kStride, int kOwned, int kHeadStride>
__device__ __forceinline__ void AccumulateValuesTile(float (&acc)[kOwned], const float* corr_s,
                                                     const float* p_s, const __nv_bfloat16* v_s,
                                                     int d, int h0) {
  constexpr int kTile = kDecodeTileTokens;
#pragma unroll
  for (int j = 0; j < kOwned; ++j) acc[j] *= corr_s[h0 + j * kHeadStride];
#pragma unroll 8
  for (int token = 0; token < kTile; ++token) {
    const float v = __bfloat162float(v_s[token * kStride + d]);
#pragma unroll
    for (int j = 0; j < kOwned; ++j) acc[j] += p_s[(h0 + j * kHeadStride) * kTile + token] * v;
  }
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_DECODE_TILE_CUH_
