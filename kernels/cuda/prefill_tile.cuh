// Device building blocks of the tensor-core prefill kernels (attention_prefill.cu's dense kernel
// and attention_minference_tiles.cu's sparse one): 4 warps own a 64-row query tile of one head
// (16 rows per warp) and consume 64-key tiles under an online softmax held in registers, the
// products on mma.sync m16n8k16 (bf16 in, f32 accumulate; below) or on Hopper's wgmma
// (wgmma_tile.cuh), both behind TileMath. The kernels differ only in which keys fill a tile and
// which scores they mask, so those stay in the kernels; the math lives here once.
#ifndef SPARSESERVE_KERNELS_CUDA_PREFILL_TILE_CUH_
#define SPARSESERVE_KERNELS_CUDA_PREFILL_TILE_CUH_

#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/wgmma_tile.cuh"

namespace sparseserve::kernels::cuda::prefill_tile {

constexpr int kRows = kPrefillTileRows;  // query rows per CTA
constexpr int kKeys = 64;                // keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
__host__ __device__ constexpr int SmemStride() {
  return D + 8;  // +16 bytes per row: ldmatrix's 8 row addresses fall in distinct banks
}

// Queues the copy of 64 key rows into `k_dst` and, when `v_dst` is not null, their value rows
// into `v_dst` (padded rows): row r holds key position key_at(r), or zeros where key_at(r) < 0
// (GatherKvRows: one block-table lookup per row for both, so the keys need not be contiguous).
template <int D, class KeyAt>
__device__ __forceinline__ void LoadKvRows(unsigned char* k_dst, unsigned char* v_dst,
                                           const __nv_bfloat16* kv, const int32_t* table,
                                           KeyAt&& key_at, const AttentionDims& dims,
                                           int64_t token_stride, int kv_head) {
  GatherKvRows<D, kThreads>(k_dst, v_dst, kv, table, key_at, dims.block_tokens, dims.block_shift,
                            token_stride, kv_head, [](int r, int chunk) {
                              return (r * SmemStride<D>() + chunk * 8) *
                                     static_cast<int>(sizeof(__nv_bfloat16));
                            });
}

// Queues the copy of the Q tile's `rows` rows (zeros past them) of `head` from row q_row0.
template <int D>
__device__ __forceinline__ void LoadQTile(__nv_bfloat16* q_s, const __nv_bfloat16* q, int q_row0,
                                          int rows, int heads, int head) {
  for (int c = threadIdx.x; c < kRows * (D / 8); c += kThreads) {
    const int r = c / (D / 8);
    const int col = (c % (D / 8)) * 8;
    const bool valid = r < rows;
    const __nv_bfloat16* src = valid ? q + (int64_t{q_row0 + r} * heads + head) * D + col : q;
    CpAsync16(q_s + r * SmemStride<D>() + col, src, valid);
  }
}

// This warp's 16 query rows as mma A fragments.
template <int D>
__device__ __forceinline__ void LoadQFragments(uint32_t (&q_frag)[D / 16][4],
                                               const __nv_bfloat16* q_s, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
    const int col = kk * 16 + (lane / 16) * 8;
    LdMatrixX4(q_frag[kk], q_s + r * SmemStride<D>() + col);
  }
}

// S = Q Kᵀ for this warp's 16 rows x kTileKeys keys from k_s's first row (kTileKeys / 8
// n-tiles of 8 keys; 64 for a prefill tile, 16 for one warp's slice of a decode tile). Thread
// element (nt, e) holds row lane / 4 + (e / 2) * 8, key nt * 8 + (lane % 4) * 2 + e % 2
// (ScoreKey).
template <int D, int kTileKeys = kKeys>
__device__ __forceinline__ void TileScores(float (&s)[kTileKeys / 8][4],
                                           const uint32_t (&q_frag)[D / 16][4],
                                           const __nv_bfloat16* k_s, int lane) {
#pragma unroll
  for (int nt = 0; nt < kTileKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < kTileKeys / 16; ++np) {
      uint32_t b[4];
      const int key = np * 16 + (lane % 8) + (lane / 16) * 8;
      const int col = kk * 16 + ((lane / 8) % 2) * 8;
      LdMatrixX4(b, k_s + key * SmemStride<D>() + col);
      MmaBf16(s[2 * np], q_frag[kk], b[0], b[1]);
      MmaBf16(s[2 * np + 1], q_frag[kk], b[2], b[3]);
    }
  }
}

// The tile column of score element (nt, e) of this thread.
__device__ __forceinline__ int ScoreKey(int nt, int e, int lane) {
  return nt * 8 + (lane % 4) * 2 + (e % 2);
}

// 2^x on the special-function unit (flushes denormals; 2^-inf = 0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The online-softmax update of a tile of raw scores q·k (masked with -inf): raises the running
// max (raw units) of the thread's two rows, rescales their sums, turns s into probabilities
// 2^(s·scale_log2 - max·scale_log2) (the scaling folded into one FFMA per score) and returns the
// factor each row's output accumulator must be multiplied by (RescaleRows), 1 when its max held.
// With kLazyMax the running max is only a reference: it is raised only when a tile's max exceeds
// it by more than 2^kLazyMaxLog2 in probability (FlashAttention-4's conditional rescaling), so
// probabilities stay <= 2^8 (up to rounding) and the output is divided by a sum of the same
// reference: the same attention mathematically (not bit for bit the eager max's), no overflow in
// fp32 sums or bf16 products — and most tiles skip RescaleRows (the warp-specialised kernels
// rescaled on 18% (dense) and 48% (A-shape) of their tiles, ncu, bench/RESULTS.md).
constexpr float kLazyMaxLog2 = 8.0f;
template <int kTileKeys = kKeys, bool kLazyMax = false>
__device__ __forceinline__ void SoftmaxScores(float (&s)[kTileKeys / 8][4], float (&row_max)[2],
                                              float (&row_sum)[2], float scale_log2,
                                              float (&correction)[2]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < kTileKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    float new_max = fmaxf(row_max[h], tile_max[h]);
    // (-inf - -inf is NaN: a row with no key so far keeps -inf either way.)
    if (kLazyMax && !((new_max - row_max[h]) * scale_log2 > kLazyMaxLog2)) new_max = row_max[h];
    // A row whose keys are all masked so far keeps max -inf; use 0 so exp2 gives 0, not NaN.
    const float safe_max = new_max == -INFINITY ? 0.0f : new_max;
    correction[h] = new_max == row_max[h] ? 1.0f : Exp2((row_max[h] - safe_max) * scale_log2);
    row_max[h] = new_max;
    row_sum[h] *= correction[h];
    const float offset = -safe_max * scale_log2;
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
      const float p0 = Exp2(fmaf(s[nt][2 * h], scale_log2, offset));
      const float p1 = Exp2(fmaf(s[nt][2 * h + 1], scale_log2, offset));
      s[nt][2 * h] = p0;
      s[nt][2 * h + 1] = p1;
      row_sum[h] += p0 + p1;
    }
  }
}

// o's two rows times SoftmaxScores' factors; skipped when no row of the warp raised its max
// (after the first tiles of a row it rarely does).
template <int D>
__device__ __forceinline__ void RescaleRows(float (&o)[D / 8][4], const float (&correction)[2]) {
  if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }
  }
}

// One online-softmax step: SoftmaxScores, then o rescaled at once.
template <int D, int kTileKeys = kKeys>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kTileKeys / 8][4], float (&o)[D / 8][4],
                                            float (&row_max)[2], float (&row_sum)[2],
                                            float scale_log2) {
  float correction[2];
  SoftmaxScores<kTileKeys>(s, row_max, row_sum, scale_log2, correction);
  RescaleRows<D>(o, correction);
}

// O += P V over kTileKeys value rows from v_s's first: P's accumulator layout is the A-fragment
// layout of the next MMA.
template <int D, int kTileKeys = kKeys>
__device__ __forceinline__ void AccumulatePv(float (&o)[D / 8][4],
                                             const float (&p)[kTileKeys / 8][4],
                                             const __nv_bfloat16* v_s, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk) {
    uint32_t a[4];
    a[0] = PackBf16x2(p[2 * kk][0], p[2 * kk][1]);
    a[1] = PackBf16x2(p[2 * kk][2], p[2 * kk][3]);
    a[2] = PackBf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = PackBf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
      const int col = dp * 16 + (lane / 16) * 8;
      LdMatrixX4Trans(b, v_s + key * SmemStride<D>() + col);
      MmaBf16(o[2 * dp], a, b[0], b[1]);
      MmaBf16(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// A fragment row's whole sum from the shares of its quad's 4 lanes (each holds 2 of 8 columns).
__device__ __forceinline__ float QuadRowSum(float share) {
  share += __shfl_xor_sync(0xffffffffu, share, 1);
  return share + __shfl_xor_sync(0xffffffffu, share, 2);
}

// The tile row (0..63) of a thread's fragment row h (0: lane / 4, 1: lane / 4 + 8).
__device__ __forceinline__ int FragmentRow(int warp, int lane, int h) {
  return warp * 16 + lane / 4 + h * 8;
}

// Normalises and stores the thread's rows below `rows` of the tile starting at q_row0.
template <int D>
__device__ __forceinline__ void StoreRows(__nv_bfloat16* out, const float (&o)[D / 8][4],
                                          const float (&row_sum)[2], int q_row0, int rows,
                                          int heads, int head, int warp, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = QuadRowSum(row_sum[h]);
    const int r = FragmentRow(warp, lane, h);
    if (r >= rows) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that sees no key outputs zeros
    __nv_bfloat16* dst = out + (int64_t{q_row0 + r} * heads + head) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    }
  }
}

// The two tile maths behind one interface: kWgmma (Hopper's warpgroup products over swizzled
// Q/K/V tiles, wgmma_tile.cuh) or mma.sync (padded tiles, Q read once into fragments, above).
// Shared memory holds the Q tile, then kStages (K tile, V tile) stages: with 2 a kernel copies
// the next tile's keys and values while it computes on the current ones. kHeads (wgmma only):
// query heads of one KV head per CTA, a warpgroup and a Q tile each, sharing the K/V tiles.
template <int D, bool kWgmma, int kStages = 1, int kHeads = 1>
struct TileMath {
  static_assert(kHeads == 1 || kWgmma, "several heads per CTA only on wgmma");
  static constexpr int kCtaThreads = kThreads * kHeads;
  static constexpr int kKvBytes =
      kWgmma ? wgmma_tile::TileBytes<D>() : kKeys * SmemStride<D>() * int{sizeof(__nv_bfloat16)};
  static constexpr int kQBytes =
      kWgmma ? wgmma_tile::TileBytes<D>() : kRows * SmemStride<D>() * int{sizeof(__nv_bfloat16)};
  // The swizzled tiles need 1024-byte alignment; dynamic shared memory guarantees 16.
  static constexpr int kSlack = kWgmma ? wgmma_tile::kAlign : 0;
  static constexpr size_t kSmemBytes =
      size_t{2} * kStages * kKvBytes + size_t{kHeads} * kQBytes + kSlack;

  struct Tiles {
    unsigned char* q;   // head h's Q tile at q + h * kQBytes
    unsigned char* kv;  // stage i's K tile at kv + 2 * i * kKvBytes, its V tile kKvBytes on
    __device__ __forceinline__ unsigned char* k(int stage) const {
      return kv + 2 * stage * kKvBytes;
    }
    __device__ __forceinline__ unsigned char* v(int stage) const {
      return kv + (2 * stage + 1) * kKvBytes;
    }
  };
  static __device__ __forceinline__ Tiles Carve(unsigned char* smem) {
    if constexpr (kWgmma) {
      const uint32_t misalign = SharedAddress(smem) % wgmma_tile::kAlign;
      smem += misalign == 0 ? 0 : wgmma_tile::kAlign - misalign;
    }
    return Tiles{smem, smem + kHeads * kQBytes};
  }

  // Queues the copy of the query tile: `rows` rows of `head` from packed row q_row0, by the
  // (warpgroup's) 128 threads.
  static __device__ __forceinline__ void LoadQ(unsigned char* q_tile, const __nv_bfloat16* q,
                                               int q_row0, int rows, int heads, int head) {
    if constexpr (kWgmma) {
      wgmma_tile::LoadQTile<D>(q_tile, q, q_row0, rows, heads, head, threadIdx.x % kThreads);
    } else {
      LoadQTile<D>(reinterpret_cast<__nv_bfloat16*>(q_tile), q, q_row0, rows, heads, head);
    }
  }

  // Once the Q tile has landed: this warp's fragments (mma.sync only; wgmma reads the tile).
  static __device__ __forceinline__ void QFragments(uint32_t (&q_frag)[D / 16][4],
                                                    const unsigned char* q_tile, int warp,
                                                    int lane) {
    if constexpr (!kWgmma) {
      LoadQFragments<D>(q_frag, reinterpret_cast<const __nv_bfloat16*>(q_tile), warp, lane);
    }
  }

  // Queues the copy of 64 key rows into `k_dst` and their value rows into `v_dst`, row r from
  // key position key_at(r) (< 0: zeros).
  template <class KeyAt>
  static __device__ __forceinline__ void LoadKv(unsigned char* k_dst, unsigned char* v_dst,
                                                const __nv_bfloat16* kv, const int32_t* table,
                                                KeyAt&& key_at, const AttentionDims& dims,
                                                int64_t token_stride, int kv_head) {
    if constexpr (kWgmma) {
      wgmma_tile::LoadKvRows<D, kCtaThreads>(k_dst, v_dst, kv, table, key_at, dims, token_stride,
                                             kv_head);
    } else {
      LoadKvRows<D>(k_dst, v_dst, kv, table, key_at, dims, token_stride, kv_head);
    }
  }

  // After a cp.async wait, before the barrier that hands the copied tiles to the products.
  static __device__ __forceinline__ void Landed() {
    if constexpr (kWgmma) wgmma_tile::FenceForTensorCores();
  }

  static __device__ __forceinline__ void Scores(float (&s)[8][4],
                                                const uint32_t (&q_frag)[D / 16][4],
                                                const unsigned char* q_tile,
                                                const unsigned char* k_tile, int lane) {
    if constexpr (kWgmma) {
      wgmma_tile::TileScores<D>(s, q_tile, k_tile);
    } else {
      TileScores<D>(s, q_frag, reinterpret_cast<const __nv_bfloat16*>(k_tile), lane);
    }
  }

  static __device__ __forceinline__ void Pv(float (&o)[D / 8][4], const float (&p)[8][4],
                                            const unsigned char* v_tile, int lane) {
    if constexpr (kWgmma) {
      wgmma_tile::AccumulatePv<D>(o, p, v_tile);
    } else {
      AccumulatePv<D>(o, p, reinterpret_cast<const __nv_bfloat16*>(v_tile), lane);
    }
  }
};

}  // namespace sparseserve::kernels::cuda::prefill_tile

#endif  // SPARSESERVE_KERNELS_CUDA_PREFILL_TILE_CUH_
