// Decode-shaped GEMMs (a handful of token rows against a large weight matrix): a bandwidth-bound
// kernel that streams each weight row once with 16-byte loads and keeps the few token rows in
// registers, instead of a tiled GEMM whose tiles would be mostly padding.
//
// out[n, o] = x[n, k] · w[o, k]ᵀ for n <= kMaxSkinnyRows, k a multiple of 8. Each warp owns kRows
// output features; its lanes stride over k in 8-element chunks, four chunks in flight, and reduce
// with shuffles at the end. f32 accumulation; bf16 or f32 output.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 2;    // output features per warp
constexpr int kUnroll = 4;  // 16-byte chunks per lane in flight

__device__ __forceinline__ void Unpack(const uint4& raw, float (&f)[8]) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(pairs[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

template <int N>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyGemmKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     int64_t k, int64_t o, void* __restrict__ out, bool out_f32) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * kRows;
  if (row0 >= o) return;
  const int64_t chunks = k / 8;
  const auto* x4 = reinterpret_cast<const uint4*>(x);
  const auto* w4 = reinterpret_cast<const uint4*>(w);
  float acc[N][kRows];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[n][r] = 0.0f;
  }
  for (int64_t base = lane; base < chunks; base += 32 * kUnroll) {
    uint4 wr[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        wr[u][r] = (c < chunks && row0 + r < o) ? __ldcs(w4 + (row0 + r) * chunks + c)
                                                : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32;
      if (c >= chunks) break;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) Unpack(wr[u][r], wf[r]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xf[8];
        Unpack(__ldg(x4 + n * chunks + c), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[n][r] += xf[i] * wf[r][i];
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[n][r];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && row0 + r < o) {
        const int64_t at = int64_t{n} * o + row0 + r;
        if (out_f32) {
          static_cast<float*>(out)[at] = v;
        } else {
          static_cast<__nv_bfloat16*>(out)[at] = __float2bfloat16_rn(v);
        }
      }
    }
  }
}

template <int N>
cudaError_t Launch(const bf16_t* x, const bf16_t* w, int64_t k, int64_t o, void* out, bool out_f32,
                   cudaStream_t stream) {
  const int64_t blocks = (o + kWarps * kRows - 1) / (kWarps * kRows);
  SkinnyGemmKernel<N><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w), k, o,
      out, out_f32);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSkinnyGemm(const bf16_t* x, const bf16_t* w, int64_t n, int64_t k, int64_t o,
                             void* out, bool out_f32, cudaStream_t stream) {
  switch (n) {
    case 1: return Launch<1>(x, w, k, o, out, out_f32, stream);
    case 2: return Launch<2>(x, w, k, o, out, out_f32, stream);
    case 3: return Launch<3>(x, w, k, o, out, out_f32, stream);
    case 4: return Launch<4>(x, w, k, o, out, out_f32, stream);
    case 5: return Launch<5>(x, w, k, o, out, out_f32, stream);
    case 6: return Launch<6>(x, w, k, o, out, out_f32, stream);
    case 7: return Launch<7>(x, w, k, o, out, out_f32, stream);
    case 8: return Launch<8>(x, w, k, o, out, out_f32, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
