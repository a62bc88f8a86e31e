// Hopper tensor-core (wgmma, sm_90a) versions of the prefill tile products, the default path of
// the prefill kernels (attention_prefill.cu, attention_minference_tiles.cu); prefill_tile.cuh's
// mma.sync products stay as the A/B alternative (SPARSESERVE_PREFILL_MMA=sync).
//
// One warpgroup (the CTA's 4 warps) issues each product for its 64 query rows: S = Q Kᵀ as
// m64n64k16 steps over head_dim with Q and K in shared memory, and O += P V as m64n{D}k16 steps
// over the 64 keys with P straight from the softmax in registers. The accumulators come back in the
// mma.sync layout prefill_tile.cuh's softmax and store expect (per 8 columns: row lane / 4 (+8),
// columns (lane % 4) * 2 + {0, 1}), so the masks, softmax and store are shared.
//
// Q, K and V tiles are laid out for the tensor cores' 128-byte swizzle: each 64-column half of the
// head dimension is a [64 keys][128 bytes] block, 1024-byte aligned, whose 16-byte chunk c of row
// r sits at chunk c ^ (r % 8) (no bank conflicts for the copies, the layout wgmma reads without a
// transpose). The rows still come one by one through the block table with cp.async (paged and
// gathered keys alike), so each copying thread fences the async proxy before the barrier that
// hands the tile to the tensor cores (HOPPER.md, "Ordering").
#ifndef SPARSESERVE_KERNELS_CUDA_WGMMA_TILE_CUH_
#define SPARSESERVE_KERNELS_CUDA_WGMMA_TILE_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda::wgmma_tile {

constexpr int kKeys = 64;                // keys per tile (rows of a K or V tile)
constexpr int kThreads = 128;            // one warpgroup
constexpr int kHalfBytes = kKeys * 128;  // one 64-column half of a tile
constexpr int kAlign = 1024;             // the swizzle pattern repeats every 8 rows of 128 bytes

// Bytes of one K or V tile.
template <int D>
__host__ __device__ constexpr int TileBytes() {
  return kKeys * D * 2;
}

// Byte offset of 16-byte chunk `chunk` (of D / 8) of row `r` in a swizzled tile.
__device__ __forceinline__ int SwizzledOffset(int r, int chunk) {
  return (chunk / 8) * kHalfBytes + r * 128 + (((chunk % 8) ^ (r % 8)) * 16);
}

// Queues the copy of 64 key rows into the swizzled tile at `k_dst` and, when `v_dst` is not
// null, their value rows into `v_dst` (GatherKvRows: one block-table lookup for both; row r holds
// key position key_at(r), zeros where it is < 0). kCopiers: the CTA's threads that share the
// copy (128 or more).
template <int D, int kCopiers, class KeyAt>
__device__ __forceinline__ void LoadKvRows(unsigned char* k_dst, unsigned char* v_dst,
                                           const __nv_bfloat16* kv, const int32_t* table,
                                           KeyAt&& key_at, const AttentionDims& dims,
                                           int64_t token_stride, int kv_head) {
  GatherKvRows<D, kCopiers>(k_dst, v_dst, kv, table, key_at, dims.block_tokens, dims.block_shift,
                            token_stride, kv_head,
                            [](int r, int chunk) { return SwizzledOffset(r, chunk); });
}

// Queues the copy of the query tile's `rows` rows of `head` from packed row q_row0 into the
// swizzled tile at `dst` (zeros past them): the A operand of the scores, read from shared memory.
// Copied by the warpgroup's threads (tid: the thread's index within it).
template <int D>
__device__ __forceinline__ void LoadQTile(unsigned char* dst, const __nv_bfloat16* q, int q_row0,
                                          int rows, int heads, int head, int tid) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < kKeys * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int chunk = c % kChunks;
    const bool valid = r < rows;
    const __nv_bfloat16* src = valid ? q + (int64_t{q_row0 + r} * heads + head) * D + chunk * 8 : q;
    CpAsync16(dst + SwizzledOffset(r, chunk), src, valid);
  }
}

// Makes this thread's completed cp.async writes visible to the tensor cores (the async proxy);
// call after the wait and before the barrier.
__device__ __forceinline__ void FenceForTensorCores() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A shared-memory matrix descriptor for a 128-byte-swizzled operand: start address, leading and
// stride byte offsets (in 16-byte units), layout type 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ uint64_t Descriptor(uint32_t address, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= uint64_t{(leading_bytes >> 4) & 0x3FFF} << 16;
  desc |= uint64_t{(stride_bytes >> 4) & 0x3FFF} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending of the warpgroup's committed groups are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void WgmmaCommitAndWait() {
  WgmmaCommit();
  WgmmaWait<0>();
}

// Orders later reads and writes of accumulator registers after the wait above (the wgmma asm
// statements name them, the wait does not).
template <int N>
__device__ __forceinline__ void FenceAccumulators(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
  }
}

// Keeps an in-flight product's register A operand alive (and unmoved) until this point, after
// its wait: the asm statement that issued it only read the registers, so the compiler would
// otherwise reuse them while the tensor cores still do.
template <int N>
__device__ __forceinline__ void FenceFragments(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
  }
}

#define SPARSESERVE_WGMMA_ACC(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])

// d[64 x 64] += a[64 x 16] (registers, this warp's 16 rows) · B[16 x 64] (shared, by descriptor),
// B stored N-major (kTransB: V of head_dim 64) or K-major (K, for scores with Q in registers).
template <bool kTransB = true>
__device__ __forceinline__ void WgmmaN64RegA(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
      : SPARSESERVE_WGMMA_ACC(0), SPARSESERVE_WGMMA_ACC(1), SPARSESERVE_WGMMA_ACC(2),
        SPARSESERVE_WGMMA_ACC(3), SPARSESERVE_WGMMA_ACC(4), SPARSESERVE_WGMMA_ACC(5),
        SPARSESERVE_WGMMA_ACC(6), SPARSESERVE_WGMMA_ACC(7)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB ? 1 : 0));
}

// d[64 x 64] += A[64 x 16] · B[16 x 64], both from shared memory, both K-major (Q Kᵀ).
__device__ __forceinline__ void WgmmaN64Shared(float (&d)[8][4], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, 1, 1, 1, 0, 0;\n"
      : SPARSESERVE_WGMMA_ACC(0), SPARSESERVE_WGMMA_ACC(1), SPARSESERVE_WGMMA_ACC(2),
        SPARSESERVE_WGMMA_ACC(3), SPARSESERVE_WGMMA_ACC(4), SPARSESERVE_WGMMA_ACC(5),
        SPARSESERVE_WGMMA_ACC(6), SPARSESERVE_WGMMA_ACC(7)
      : "l"(a), "l"(b));
}

// d[64 x 128] += a[64 x 16] · B[16 x 128], B stored N-major (V of head_dim 128).
__device__ __forceinline__ void WgmmaN128TransB(float (&d)[16][4], const uint32_t (&a)[4],
                                                uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
      : SPARSESERVE_WGMMA_ACC(0), SPARSESERVE_WGMMA_ACC(1), SPARSESERVE_WGMMA_ACC(2),
        SPARSESERVE_WGMMA_ACC(3), SPARSESERVE_WGMMA_ACC(4), SPARSESERVE_WGMMA_ACC(5),
        SPARSESERVE_WGMMA_ACC(6), SPARSESERVE_WGMMA_ACC(7), SPARSESERVE_WGMMA_ACC(8),
        SPARSESERVE_WGMMA_ACC(9), SPARSESERVE_WGMMA_ACC(10), SPARSESERVE_WGMMA_ACC(11),
        SPARSESERVE_WGMMA_ACC(12), SPARSESERVE_WGMMA_ACC(13), SPARSESERVE_WGMMA_ACC(14),
        SPARSESERVE_WGMMA_ACC(15)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

#undef SPARSESERVE_WGMMA_ACC

// Issues S = Q Kᵀ for the warpgroup's 64 rows x 64 keys (s in prefill_tile's score layout,
// zeroed first) without waiting: commit and wait follow. Q and K are K-major (head_dim
// contiguous) swizzled tiles: a 16-column step advances 32 bytes inside a 128-byte row, the next
// 8 rows are 1024 bytes on (the stride byte offset), the second half of a 128-wide head 8 KiB on.
// Q is read from shared memory (FlashAttention-3's choice too): with its fragments held in
// registers across tiles, head_dim 64 tiles after the first came out wrong on the H100 (the RS
// form is kept for P V, whose fragments live for one product only).
template <int D>
__device__ __forceinline__ void IssueScores(float (&s)[8][4], const unsigned char* q_tile,
                                            const unsigned char* k_tile) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
  const uint32_t q_base = SharedAddress(q_tile);
  const uint32_t k_base = SharedAddress(k_tile);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t step = (kk / 4) * kHalfBytes + (kk % 4) * 32;
    WgmmaN64Shared(s, Descriptor(q_base + step, 16, 1024), Descriptor(k_base + step, 16, 1024));
  }
}

// S = Q Kᵀ, waited for.
template <int D>
__device__ __forceinline__ void TileScores(float (&s)[8][4], const unsigned char* q_tile,
                                           const unsigned char* k_tile) {
  IssueScores<D>(s, q_tile, k_tile);
  WgmmaCommitAndWait();
  FenceAccumulators(s);
}

// P (probabilities in the score layout) as the A operand of P V in registers: 16 keys a step.
__device__ __forceinline__ void PackProbabilities(uint32_t (&a)[4][4], const float (&p)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = PackBf16x2(p[2 * kk][0], p[2 * kk][1]);
    a[kk][1] = PackBf16x2(p[2 * kk][2], p[2 * kk][3]);
    a[kk][2] = PackBf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[kk][3] = PackBf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
  }
}

// Issues O += P V without waiting (a packed by PackProbabilities; it must stay untouched until the
// wait, FenceFragments after it). V is N-major (head_dim contiguous): a 16-key step is 16 rows =
// 2048 bytes on, 8-key groups 1024 bytes apart (the stride byte offset) and the two 64-column
// halves 8 KiB apart (the leading byte offset).
template <int D>
__device__ __forceinline__ void IssuePv(float (&o)[D / 8][4], const uint32_t (&a)[4][4],
                                        const unsigned char* v_tile) {
  const uint32_t base = SharedAddress(v_tile);
  FenceAccumulators(o);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t desc = Descriptor(base + kk * 2048, kHalfBytes, 1024);
    if constexpr (D == 128) {
      WgmmaN128TransB(o, a[kk], desc);
    } else {
      static_assert(D == 64, "head_dim 64 or 128");
      WgmmaN64RegA(o, a[kk], desc);
    }
  }
}

// O += P V, waited for.
template <int D>
__device__ __forceinline__ void AccumulatePv(float (&o)[D / 8][4], const float (&p)[8][4],
                                             const unsigned char* v_tile) {
  uint32_t a[4][4];
  PackProbabilities(a, p);
  IssuePv<D>(o, a, v_tile);
  WgmmaCommitAndWait();
  FenceAccumulators(o);
  FenceFragments(a);
}

}  // namespace sparseserve::kernels::cuda::wgmma_tile

#endif  // SPARSESERVE_KERNELS_CUDA_WGMMA_TILE_CUH_
