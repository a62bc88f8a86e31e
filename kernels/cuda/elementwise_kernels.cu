// Memory-bound kernels of the CUDA backend: fills, row gathers, RMSNorm (+ residual add), RoPE,
// SwiGLU, bias adds and KV scatters. bf16 storage, f32 arithmetic; 16-byte accesses where rows
// allow it. Each kernel is one pass over its data (the bytes floor of the op).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/uniform_random.h"

namespace sparseserve::kernels::cuda {
namespace {

__device__ __forceinline__ float Load(const bf16_t* p, int64_t i) {
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void Store(bf16_t* p, int64_t i, float v) {
  reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float RoundBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

int GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

__global__ void FillUniformKernel(void* data, bool is_bf16, int64_t n, uint64_t seed, float lo,
                                  float span) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = lo + span * UniformAt(seed, static_cast<uint64_t>(i));
    if (is_bf16) {
      Store(static_cast<bf16_t*>(data), i, v);
    } else {
      static_cast<float*>(data)[i] = v;
    }
  }
}

// One block per output row; 16-byte copies when the row allows it.
__global__ void GatherRowsKernel(const bf16_t* table, int64_t vocab, int64_t d, const int32_t* ids,
                                 bf16_t* out, int* error_flag) {
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  const bool valid = id >= 0 && id < vocab;
  if (!valid && threadIdx.x == 0) atomicExch(error_flag, 1);
  if (d % 8 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(table + (valid ? id : 0) * d);
    uint4* dst = reinterpret_cast<uint4*>(out + row * d);
    for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) {
      dst[i] = valid ? src[i] : make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      out[row * d + i] = valid ? table[id * d + i] : bf16_t{0};
    }
  }
}

__device__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // scratch may be reused by the caller
  return v;
}

// One block per row. The row is read once into registers/L1 and written once.
__global__ void RmsNormKernel(bf16_t* residual, const bf16_t* x, const bf16_t* w, int64_t d,
                              float eps, bf16_t* out) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = Load(x, base + i);
    if (residual != nullptr) {
      v = RoundBf16(Load(residual, base + i) + v);
      Store(residual, base + i, v);
    }
    sum += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum, scratch) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    // Each thread re-reads only the elements it wrote itself, so no barrier is needed.
    const float v = residual != nullptr ? Load(residual, base + i) : Load(x, base + i);
    Store(out, base + i, v * inv_rms * Load(w, i));
  }
}

__global__ void RopeKernel(bf16_t* q, bf16_t* k, int64_t n, int heads, int kv_heads, int head_dim,
                           const int32_t* positions, const float* inv_freq) {
  const int half = head_dim / 2;
  const int64_t per_row = int64_t{heads + kv_heads} * half;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n * per_row;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = t / per_row;
    const int64_t rest = t % per_row;
    const int head = static_cast<int>(rest / half);
    const int i = static_cast<int>(rest % half);
    bf16_t* base = head < heads ? q + (row * heads + head) * head_dim
                                : k + (row * kv_heads + (head - heads)) * head_dim;
    float s, c;
    sincosf(static_cast<float>(positions[row]) * inv_freq[i], &s, &c);
    const float a = Load(base, i);
    const float b = Load(base, i + half);
    Store(base, i, a * c - b * s);
    Store(base, i + half, b * c + a * s);
  }
}

__global__ void SiluMulKernel(const bf16_t* gate, const bf16_t* up, int64_t n, bf16_t* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (n % 8 == 0) {  // 16-byte accesses: one load of each input, one store per 8 elements
    const auto* g8 = reinterpret_cast<const uint4*>(gate);
    const auto* u8 = reinterpret_cast<const uint4*>(up);
    auto* o8 = reinterpret_cast<uint4*>(out);
    for (int64_t i = first; i < n / 8; i += stride) {
      const uint4 graw = g8[i], uraw = u8[i];
      const auto* gp = reinterpret_cast<const __nv_bfloat162*>(&graw);
      const auto* upp = reinterpret_cast<const __nv_bfloat162*>(&uraw);
      uint4 oraw;
      auto* op = reinterpret_cast<__nv_bfloat162*>(&oraw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 g = __bfloat1622float2(gp[j]);
        const float2 u = __bfloat1622float2(upp[j]);
        op[j] = __floats2bfloat162_rn(g.x / (1.0f + __expf(-g.x)) * u.x,
                                      g.y / (1.0f + __expf(-g.y)) * u.y);
      }
      o8[i] = oraw;
    }
    return;
  }
  for (int64_t i = first; i < n; i += stride) {
    const float g = Load(gate, i);
    Store(out, i, g / (1.0f + __expf(-g)) * Load(up, i));
  }
}

__global__ void AddBiasKernel(void* out, bool out_f32, const bf16_t* bias, int64_t rows,
                              int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float b = Load(bias, i % cols);
    if (out_f32) {
      static_cast<float*>(out)[i] += b;
    } else {
      bf16_t* o = static_cast<bf16_t*>(out);
      Store(o, i, Load(o, i) + b);
    }
  }
}

// One thread per element of k (and the same element of v).
__global__ void WriteKvKernel(const bf16_t* k, const bf16_t* v, const int32_t* slots, int64_t n,
                              bf16_t* kv_layer, int block_tokens, int64_t row_elems) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n * row_elems;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = t / row_elems;
    const int64_t e = t % row_elems;
    const int64_t slot = slots[row];
    const int64_t block = slot / block_tokens;
    const int64_t offset = slot % block_tokens;
    const int64_t key_at = ((2 * block) * block_tokens + offset) * row_elems + e;
    kv_layer[key_at] = k[t];
    kv_layer[key_at + int64_t{block_tokens} * row_elems] = v[t];
  }
}

}  // namespace

cudaError_t LaunchFillUniform(void* data, bool is_bf16, int64_t n, uint64_t seed, float lo,
                              float hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillUniformKernel<<<GridFor(n, 256), 256, 0, stream>>>(data, is_bf16, n, seed, lo, hi - lo);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const bf16_t* table, int64_t vocab, int64_t d, const int32_t* ids,
                             int64_t n, bf16_t* out, int* error_flag, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(table, vocab, d, ids, out,
                                                                 error_flag);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(bf16_t* residual, const bf16_t* x, const bf16_t* w, int64_t n, int64_t d,
                          float eps, bf16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = d >= 4096 ? 512 : (d >= 1024 ? 256 : 128);
  RmsNormKernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(residual, x, w, d, eps, out);
  return cudaGetLastError();
}

cudaError_t LaunchRope(bf16_t* q, bf16_t* k, int64_t n, int heads, int kv_heads, int head_dim,
                       const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  const int64_t total = n * (heads + kv_heads) * (head_dim / 2);
  if (total == 0) return cudaSuccess;
  RopeKernel<<<GridFor(total, 256), 256, 0, stream>>>(q, k, n, heads, kv_heads, head_dim, positions,
                                                      inv_freq);
  return cudaGetLastError();
}

cudaError_t LaunchSiluMul(const bf16_t* gate, const bf16_t* up, int64_t n, bf16_t* out,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SiluMulKernel<<<GridFor(n % 8 == 0 ? n / 8 : n, 256), 256, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(void* out, bool out_f32, const bf16_t* bias, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(rows * cols, 256), 256, 0, stream>>>(out, out_f32, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchWriteKv(const bf16_t* k, const bf16_t* v, const int32_t* slots, int64_t n,
                          bf16_t* kv_layer, int block_tokens, int kv_heads, int head_dim,
                          cudaStream_t stream) {
  const int64_t row_elems = int64_t{kv_heads} * head_dim;
  if (n * row_elems == 0) return cudaSuccess;
  WriteKvKernel<<<GridFor(n * row_elems, 256), 256, 0, stream>>>(k, v, slots, n, kv_layer,
                                                                 block_tokens, row_elems);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
