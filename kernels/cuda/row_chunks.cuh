// Row chunks: 8 consecutive values of a row as f32 — one 16-byte load of bf16, or two of f32 —
// the unit the row kernels read and write in. RMSNorm (elementwise_kernels.cu) and the peer
// all-reduce's fused add + norm (peer_allreduce.cu) share these, so the same arithmetic on a row
// gives the same bits in both; the skinny GEMM unpacks its weight and token chunks with them.
#ifndef SPARSESERVE_KERNELS_CUDA_ROW_CHUNKS_CUH_
#define SPARSESERVE_KERNELS_CUDA_ROW_CHUNKS_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace sparseserve::kernels::cuda {

// The 8 bf16 values of a 16-byte chunk, as f32. By value: a chunk passed straight from global
// memory is then one 16-byte load (by reference it compiled to four 4-byte loads).
__device__ __forceinline__ void UnpackBf16x8(const uint4 raw, float (&v)[8]) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Chunk `chunk` (8 values) of p, bf16 or f32, as f32.
__device__ __forceinline__ void Load8(const void* p, bool f32, int64_t chunk, float (&v)[8]) {
  if (f32) {
    const float4* q = static_cast<const float4*>(p) + 2 * chunk;
    const float4 a = q[0], b = q[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    UnpackBf16x8(static_cast<const uint4*>(p)[chunk], v);
  }
}

// v into chunk `chunk` of p, rounded to bf16 or kept f32.
__device__ __forceinline__ void Store8(void* p, bool f32, int64_t chunk, const float (&v)[8]) {
  if (f32) {
    float4* q = static_cast<float4*>(p) + 2 * chunk;
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 raw;
    auto* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    static_cast<uint4*>(p)[chunk] = raw;
  }
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_ROW_CHUNKS_CUH_
