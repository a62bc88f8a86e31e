// Inline PTX wrappers shared by the attention kernels: 16-byte asynchronous global→shared copies
// (cp.async, zero-filling when the source is out of range) and the paged K/V row gather built on
// them, warp-wide ldmatrix loads and the bf16 tensor-core MMA m16n8k16 with f32 accumulators
// (sm_80+ instructions; on sm_90a they are the FlashAttention-2 style path, see
// papers/kernel-references.md).
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_ASYNC_COPY_CUH_
#define SPARSESERVE_KERNELS_CUDA_CUDA_ASYNC_COPY_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace sparseserve::kernels::cuda {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes, or writes 16 zero bytes when !valid (src must still be a mapped address).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(smem)),
               "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(smem)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(smem)));
}

// d += a · b for one 16x8 tile (a 16x16 row-major, b 16x8 column-major), f32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Element offset of the key row of token `pos` in a paged KV layer (the value row follows
// block_tokens * token_stride elements later): block table lookup, then row 2 * block.
__device__ __forceinline__ int64_t KeyRowOffset(const int32_t* table, int pos, int block_tokens,
                                                int block_shift, int64_t token_stride) {
  int block_index, offset;
  if (block_shift >= 0) {
    block_index = pos >> block_shift;
    offset = pos & (block_tokens - 1);
  } else {
    block_index = pos / block_tokens;
    offset = pos - block_index * block_tokens;
  }
  const int64_t block = table[block_index];
  return ((2 * block) * block_tokens + offset) * token_stride;
}

// Queues the copy of 64 key rows of head_dim D into `k_dst` and, when `v_dst` is not null, their
// value rows into `v_dst` (one block-table lookup for both): row r holds key position key_at(r),
// or zeros where key_at(r) < 0. kCopiers consecutive threads copy consecutive 16-byte chunks of
// a row (coalesced reads); chunk c of row r lands at byte offset_of(r, c) of the tile, the
// tile math's layout. A thread first finds the addresses of all its rows, then queues their
// copies: the rows' key and block-table reads are independent, so they are in flight together
// instead of one row's chain after another's.
template <int D, int kCopiers, class KeyAt, class OffsetOf>
__device__ __forceinline__ void GatherKvRows(unsigned char* k_dst, unsigned char* v_dst,
                                             const __nv_bfloat16* kv, const int32_t* table,
                                             KeyAt&& key_at, int block_tokens, int block_shift,
                                             int64_t token_stride, int kv_head,
                                             OffsetOf&& offset_of) {
  constexpr int kKeys = 64;
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kCopiers / kChunks;
  static_assert(kCopiers % kChunks == 0 && kRowsPerPass <= kKeys && kKeys % kRowsPerPass == 0);
  constexpr int kRowsPerThread = kKeys / kRowsPerPass;
  const int chunk = threadIdx.x % kChunks;
  const int row0 = threadIdx.x / kChunks;
  const int64_t value_offset = int64_t{block_tokens} * token_stride;
  const __nv_bfloat16* src[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int pos = key_at(row0 + i * kRowsPerPass);
    src[i] = pos < 0 ? nullptr
                     : kv + KeyRowOffset(table, pos, block_tokens, block_shift, token_stride) +
                           int64_t{kv_head} * D + chunk * 8;
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const bool valid = src[i] != nullptr;
    const int offset = offset_of(row0 + i * kRowsPerPass, chunk);
    CpAsync16(k_dst + offset, valid ? src[i] : kv, valid);
    if (v_dst != nullptr) CpAsync16(v_dst + offset, valid ? src[i] + value_offset : kv, valid);
  }
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_ASYNC_COPY_CUH_
