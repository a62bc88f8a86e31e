// Decode-shaped GEMMs (a handful of token rows against a large weight matrix): a bandwidth-bound
// kernel that streams each weight row once with 16-byte loads and keeps the few token rows in
// registers, instead of a tiled GEMM whose tiles would be mostly padding.
//
// out[n, o] = x[n, k] · w[o, k]ᵀ for n <= kMaxSkinnyRows, k a multiple of 8. f32 accumulation;
// bf16 or f32 output.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/grid_dependency.cuh"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = 2;    // output features per block
constexpr int kUnroll = 4;  // 16-byte chunks of each row per thread in flight

__device__ __forceinline__ void Unpack(const uint4& raw, float (&f)[8]) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(pairs[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// A block owns kRows output features and splits their k dimension over all its threads (so even
// a 1024-row matrix gives 512 blocks to spread over the GPU); warp shuffles, then shared memory,
// reduce the partial sums.
template <int N>
__global__ void __launch_bounds__(kThreads)
    SkinnyGemmKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ bias, int64_t k, int64_t o,
                     void* __restrict__ out, bool out_f32) {
  __shared__ float partial[kThreads / 32][N][kRows];
  const int64_t row0 = int64_t{blockIdx.x} * kRows;
  const int64_t chunks = k / 8;
  const auto* x4 = reinterpret_cast<const uint4*>(x);
  const auto* w4 = reinterpret_cast<const uint4*>(w);
  float acc[N][kRows];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[n][r] = 0.0f;
  }
  uint4 wr[kUnroll][kRows];
  auto load_weights = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        wr[u][r] = (c < chunks && row0 + r < o) ? __ldcs(w4 + (row0 + r) * chunks + c)
                                                : make_uint4(0, 0, 0, 0);
      }
    }
  };
  // Weights are never written by a kernel: the first tiles stream in while the kernel ahead (the
  // norm or activation producing x) may still run. x and out only after it has finished.
  load_weights(threadIdx.x);
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kUnroll) {
    if (base != threadIdx.x) load_weights(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * kThreads;
      if (c >= chunks) break;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) Unpack(wr[u][r], wf[r]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xf[8];
        Unpack(x4[n * chunks + c], xf);  // not __ldg: x is written while this kernel runs
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[n][r] += xf[i] * wf[r][i];
        }
      }
    }
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[n][r];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) partial[warp][n][r] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < N * kRows) {
    const int n = threadIdx.x / kRows;
    const int r = threadIdx.x % kRows;
    if (row0 + r < o) {
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < kThreads / 32; ++i) v += partial[i][n][r];
      if (bias != nullptr) v += __bfloat162float(bias[row0 + r]);  // before the output rounding
      const int64_t at = int64_t{n} * o + row0 + r;
      if (out_f32) {
        static_cast<float*>(out)[at] = v;
      } else {
        static_cast<__nv_bfloat16*>(out)[at] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int N>
cudaError_t Launch(const bf16_t* x, const bf16_t* w, const bf16_t* bias, int64_t k, int64_t o,
                   void* out, bool out_f32, cudaStream_t stream) {
  const int64_t blocks = (o + kRows - 1) / kRows;
  return LaunchOverlapping(SkinnyGemmKernel<N>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                           reinterpret_cast<const __nv_bfloat16*>(x),
                           reinterpret_cast<const __nv_bfloat16*>(w),
                           reinterpret_cast<const __nv_bfloat16*>(bias), k, o, out, out_f32);
}

}  // namespace

cudaError_t LaunchSkinnyGemm(const bf16_t* x, const bf16_t* w, const bf16_t* bias, int64_t n,
                             int64_t k, int64_t o, void* out, bool out_f32, cudaStream_t stream) {
  switch (n) {
    case 1: return Launch<1>(x, w, bias, k, o, out, out_f32, stream);
    case 2: return Launch<2>(x, w, bias, k, o, out, out_f32, stream);
    case 3: return Launch<3>(x, w, bias, k, o, out, out_f32, stream);
    case 4: return Launch<4>(x, w, bias, k, o, out, out_f32, stream);
    case 5: return Launch<5>(x, w, bias, k, o, out, out_f32, stream);
    case 6: return Launch<6>(x, w, bias, k, o, out, out_f32, stream);
    case 7: return Launch<7>(x, w, bias, k, o, out, out_f32, stream);
    case 8: return Launch<8>(x, w, bias, k, o, out, out_f32, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
