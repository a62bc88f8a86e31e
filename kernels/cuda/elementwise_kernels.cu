// Memory-bound kernels of the CUDA backend: fills, row gathers, RMSNorm (+ residual add), RoPE,
// SwiGLU, bias adds and KV scatters. bf16 storage, f32 arithmetic; 16-byte accesses where rows
// allow it. Each kernel is one pass over its data (the bytes floor of the op).
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/row_chunks.cuh"
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

constexpr int kNormMaxChunks = 4;  // 16-byte chunks of a row per thread in RmsNormVecKernel

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

__device__ __forceinline__ float LoadAny(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : Load(static_cast<const bf16_t*>(p), i);
}

// One block per output row; 16-byte copies when the row allows it. With out_f32 the row is
// widened to f32 (the model's residual stream), or copied from an f32 table (table_f32: rows of
// the residual stream itself, for TokenSwift's draft heads).
__global__ void GatherRowsKernel(const void* table_any, bool table_f32, int64_t vocab, int64_t d,
                                 const int32_t* ids, void* out, bool out_f32, int* error_flag) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  const bool valid = id >= 0 && id < vocab;
  if (!valid && threadIdx.x == 0) atomicExch(error_flag, 1);
  if (out_f32) {
    float* dst = static_cast<float*>(out) + row * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      dst[i] = valid ? LoadAny(table_any, table_f32, id * d + i) : 0.0f;
    return;
  }
  const bf16_t* table = static_cast<const bf16_t*>(table_any);
  bf16_t* out16 = static_cast<bf16_t*>(out);
  if (d % 8 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(table + (valid ? id : 0) * d);
    uint4* dst = reinterpret_cast<uint4*>(out16 + row * d);
    for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) {
      dst[i] = valid ? src[i] : make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      out16[row * d + i] = valid ? table[id * d + i] : bf16_t{0};
    }
  }
}

// One block per row. With `residual` non-null: residual += x first (residual in f32 or bf16),
// and the norm is taken of the updated residual; else of x (f32 or bf16). out is bf16.
__global__ void RmsNormKernel(void* residual, bool res_f32, const void* x, bool x_f32,
                              const bf16_t* w, int64_t d, float eps, bf16_t* out) {
  AllowNextKernelLaunch();  // the GEMV after the norm streams its weights meanwhile
  WaitForPrecedingKernels();
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = LoadAny(x, x_f32, base + i);
    if (residual != nullptr) {
      v += LoadAny(residual, res_f32, base + i);
      if (res_f32) {
        static_cast<float*>(residual)[base + i] = v;
      } else {
        v = RoundBf16(v);
        Store(static_cast<bf16_t*>(residual), base + i, v);
      }
    }
    sum += v * v;
  }
  const float inv_rms =
      rsqrtf(BlockReduce<ReduceOp::kSum>(sum, scratch) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    // Each thread re-reads only the elements it wrote itself, so no barrier is needed.
    const float v =
        residual != nullptr ? LoadAny(residual, res_f32, base + i) : LoadAny(x, x_f32, base + i);
    Store(out, base + i, v * inv_rms * Load(w, i));
  }
}

// RmsNormKernel for rows of whole 16-byte chunks: one read and one write of each element, the
// row held in registers between them (at most kNormMaxChunks chunks per thread).
__global__ void RmsNormVecKernel(void* residual, bool res_f32, const void* x, bool x_f32,
                                 const bf16_t* w, int64_t d, float eps, bf16_t* out) {
  __shared__ float scratch[32];
  const int64_t chunks = d / 8;
  AllowNextKernelLaunch();  // the GEMV after the norm streams its weights meanwhile
  // The norm weights are never written by a kernel: read while the kernel ahead finishes.
  float wv[kNormMaxChunks][8];
#pragma unroll
  for (int j = 0; j < kNormMaxChunks; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c < chunks) Load8(w, false, c, wv[j]);
  }
  WaitForPrecedingKernels();
  const int64_t base = blockIdx.x * chunks;  // in chunks
  float v[kNormMaxChunks][8];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormMaxChunks; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c >= chunks) break;
    Load8(x, x_f32, base + c, v[j]);
    if (residual != nullptr) {
      float r[8];
      Load8(residual, res_f32, base + c, r);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[j][i] = res_f32 ? v[j][i] + r[i] : RoundBf16(v[j][i] + r[i]);
      Store8(residual, res_f32, base + c, v[j]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += v[j][i] * v[j][i];
  }
  const float inv_rms =
      rsqrtf(BlockReduce<ReduceOp::kSum>(sum, scratch) / static_cast<float>(d) + eps);
#pragma unroll
  for (int j = 0; j < kNormMaxChunks; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c >= chunks) break;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[j][i] *= inv_rms * wv[j][i];
    Store8(out, false, base + c, v[j]);
  }
}

__global__ void RopeKernel(bf16_t* q, bf16_t* k, int64_t n, int heads, int kv_heads, int head_dim,
                           const int32_t* positions, const float* inv_freq) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
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

// gate and up rows start every *_stride elements (column ranges of the fused projection's
// output); out is contiguous [rows, cols].
__global__ void SiluMulKernel(const bf16_t* gate, int64_t gate_stride, const bf16_t* up,
                              int64_t up_stride, int64_t rows, int64_t cols, bf16_t* out) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (cols % 8 == 0 && gate_stride % 8 == 0 && up_stride % 8 == 0) {
    // 16-byte accesses: one load of each input, one store per 8 elements.
    const int64_t row_chunks = cols / 8;
    for (int64_t i = first; i < rows * row_chunks; i += stride) {
      const int64_t row = i / row_chunks, chunk = i % row_chunks;
      const uint4 graw = reinterpret_cast<const uint4*>(gate + row * gate_stride)[chunk];
      const uint4 uraw = reinterpret_cast<const uint4*>(up + row * up_stride)[chunk];
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
      reinterpret_cast<uint4*>(out)[i] = oraw;
    }
    return;
  }
  for (int64_t i = first; i < rows * cols; i += stride) {
    const int64_t row = i / cols, col = i % cols;
    const float g = Load(gate, row * gate_stride + col);
    Store(out, i, g / (1.0f + __expf(-g)) * Load(up, row * up_stride + col));
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
// Element offset of KV slot `slot`'s key row in a paged layer (its value row follows
// block_tokens * row_elems elements later).
__device__ __forceinline__ int64_t SlotElement(int64_t slot, int block_tokens, int64_t row_elems) {
  const int64_t block = slot / block_tokens;
  return ((2 * block) * block_tokens + slot % block_tokens) * row_elems;
}

__global__ void WriteKvKernel(const bf16_t* k, const bf16_t* v, const int32_t* slots, int64_t n,
                              bf16_t* kv_layer, int block_tokens, int64_t row_elems) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n * row_elems;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t key_at =
        SlotElement(slots[t / row_elems], block_tokens, row_elems) + t % row_elems;
    kv_layer[key_at] = k[t];
    kv_layer[key_at + int64_t{block_tokens} * row_elems] = v[t];
  }
}

__global__ void ReadKvKernel(const bf16_t* kv_layer, const int32_t* slots, int64_t n,
                             int block_tokens, int64_t row_elems, bf16_t* k, bf16_t* v) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n * row_elems;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t key_at =
        SlotElement(slots[t / row_elems], block_tokens, row_elems) + t % row_elems;
    k[t] = kv_layer[key_at];
    v[t] = kv_layer[key_at + int64_t{block_tokens} * row_elems];
  }
}

// One thread per 8-element vector of a row, per (layer, keys or values) in grid (x, y, z): it
// reads the vector of up to kBatch moves before writing them, batch after batch (a later move
// never reads what an earlier one wrote: KvRowMoves' REQUIRES).
__global__ void MoveKvRowsKernel(KvRowMoves moves, int block_tokens, int64_t row_elems) {
  constexpr int kBatch = 8;
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const int64_t vec = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (vec * 8 >= row_elems) return;
  uint4* layer = reinterpret_cast<uint4*>(moves.layers[blockIdx.z]);
  const int64_t values = blockIdx.y == 0 ? 0 : int64_t{block_tokens} * row_elems;
  auto at = [&](int32_t slot) {
    return (SlotElement(slot, block_tokens, row_elems) + values) / 8 + vec;
  };
  for (int m0 = 0; m0 < moves.num_moves; m0 += kBatch) {
    uint4 held[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (m0 + i < moves.num_moves) held[i] = layer[at(moves.src[m0 + i])];
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (m0 + i < moves.num_moves) layer[at(moves.dst[m0 + i])] = held[i];
    }
  }
}

// One thread per rotation pair: (row, head, i) pairs dimensions i and i + head_dim / 2. Query
// heads come first, then key heads (rotated into their slot), then value heads (copied).
__global__ void RopeWriteKvKernel(const bf16_t* qkv, int64_t n, int heads, int kv_heads,
                                  int head_dim, const int32_t* positions, const float* inv_freq,
                                  const int32_t* slots, bf16_t* q, bf16_t* kv_layer,
                                  int block_tokens) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const int half = head_dim / 2;
  const int row_heads = heads + 2 * kv_heads;
  const int64_t per_row = int64_t{row_heads} * half;
  const int64_t kv_row = int64_t{kv_heads} * head_dim;  // elements of one token's K (or V)
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n * per_row;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = t / per_row;
    const int64_t rest = t % per_row;
    const int head = static_cast<int>(rest / half);
    const int i = static_cast<int>(rest % half);
    const bf16_t* src = qkv + (row * row_heads + head) * head_dim;
    float a = Load(src, i);
    float b = Load(src, i + half);
    if (head < heads + kv_heads) {  // queries and keys rotate
      float s, c;
      sincosf(static_cast<float>(positions[row]) * inv_freq[i], &s, &c);
      const float ra = a * c - b * s;
      b = b * c + a * s;
      a = ra;
    }
    bf16_t* dst;
    if (head < heads) {
      dst = q + (row * heads + head) * head_dim;
    } else {
      const int64_t slot = slots[row];
      const int64_t block = slot / block_tokens;
      const int64_t offset = slot % block_tokens;
      const bool is_value = head >= heads + kv_heads;
      const int kv_head = head - heads - (is_value ? kv_heads : 0);
      dst = kv_layer + ((2 * block + (is_value ? 1 : 0)) * block_tokens + offset) * kv_row +
            int64_t{kv_head} * head_dim;
    }
    Store(dst, i, a);
    Store(dst, i + half, b);
  }
}

}  // namespace

cudaError_t LaunchFillUniform(void* data, bool is_bf16, int64_t n, uint64_t seed, float lo,
                              float hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillUniformKernel<<<GridFor(n, 256), 256, 0, stream>>>(data, is_bf16, n, seed, lo, hi - lo);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const void* table, bool table_f32, int64_t vocab, int64_t d,
                             const int32_t* ids, int64_t n, void* out, bool out_f32,
                             int* error_flag, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (table_f32 && !out_f32) return cudaErrorInvalidValue;
  return LaunchOverlapping(GatherRowsKernel, static_cast<unsigned>(n), 128, 0, stream, table,
                           table_f32, vocab, d, ids, out, out_f32, error_flag);
}

cudaError_t LaunchRmsNorm(void* residual, bool residual_f32, const void* x, bool x_f32,
                          const bf16_t* w, int64_t n, int64_t d, float eps, bf16_t* out,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t chunks = d / 8;
  if (d % 8 == 0 && chunks <= int64_t{kNormMaxChunks} * 1024) {
    // Enough threads that each holds at most kNormMaxChunks chunks of its row in registers.
    int64_t threads = (chunks + kNormMaxChunks - 1) / kNormMaxChunks;
    threads = std::max<int64_t>(32, (threads + 31) / 32 * 32);
    return LaunchOverlapping(RmsNormVecKernel, static_cast<unsigned>(n),
                             static_cast<unsigned>(threads), 0, stream, residual, residual_f32, x,
                             x_f32, w, d, eps, out);
  }
  const int threads = d >= 4096 ? 512 : (d >= 1024 ? 256 : 128);
  return LaunchOverlapping(RmsNormKernel, static_cast<unsigned>(n), threads, 0, stream, residual,
                           residual_f32, x, x_f32, w, d, eps, out);
}

cudaError_t LaunchRope(bf16_t* q, bf16_t* k, int64_t n, int heads, int kv_heads, int head_dim,
                       const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  const int64_t total = n * (heads + kv_heads) * (head_dim / 2);
  if (total == 0) return cudaSuccess;
  return LaunchOverlapping(RopeKernel, GridFor(total, 256), 256, 0, stream, q, k, n, heads,
                           kv_heads, head_dim, positions, inv_freq);
}

cudaError_t LaunchSiluMul(const bf16_t* gate, int64_t gate_stride, const bf16_t* up,
                          int64_t up_stride, int64_t rows, int64_t cols, bf16_t* out,
                          cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  return LaunchOverlapping(SiluMulKernel, GridFor(n % 8 == 0 ? n / 8 : n, 256), 256, 0, stream,
                           gate, gate_stride, up, up_stride, rows, cols, out);
}

cudaError_t LaunchAddBias(void* out, bool out_f32, const bf16_t* bias, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(rows * cols, 256), 256, 0, stream>>>(out, out_f32, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchRopeWriteKv(const bf16_t* qkv, int64_t n, int heads, int kv_heads, int head_dim,
                              const int32_t* positions, const float* inv_freq, const int32_t* slots,
                              bf16_t* q, bf16_t* kv_layer, int block_tokens, cudaStream_t stream) {
  const int64_t total = n * (heads + 2 * kv_heads) * (head_dim / 2);
  if (total == 0) return cudaSuccess;
  return LaunchOverlapping(RopeWriteKvKernel, GridFor(total, 256), 256, 0, stream, qkv, n, heads,
                           kv_heads, head_dim, positions, inv_freq, slots, q, kv_layer,
                           block_tokens);
}

cudaError_t LaunchWriteKv(const bf16_t* k, const bf16_t* v, const int32_t* slots, int64_t n,
                          bf16_t* kv_layer, int block_tokens, int kv_heads, int head_dim,
                          cudaStream_t stream) {
  const int64_t row_elems = int64_t{kv_heads} * head_dim;
  if (n * row_elems == 0) return cudaSuccess;
  return LaunchOverlapping(WriteKvKernel, GridFor(n * row_elems, 256), 256, 0, stream, k, v, slots,
                           n, kv_layer, block_tokens, row_elems);
}

cudaError_t LaunchReadKv(const bf16_t* kv_layer, const int32_t* slots, int64_t n, int block_tokens,
                         int kv_heads, int head_dim, bf16_t* k, bf16_t* v, cudaStream_t stream) {
  const int64_t row_elems = int64_t{kv_heads} * head_dim;
  if (n * row_elems == 0) return cudaSuccess;
  return LaunchOverlapping(ReadKvKernel, GridFor(n * row_elems, 256), 256, 0, stream, kv_layer,
                           slots, n, block_tokens, row_elems, k, v);
}

cudaError_t LaunchMoveKvRows(const KvRowMoves& moves, int block_tokens, int kv_heads, int head_dim,
                             cudaStream_t stream) {
  const int64_t row_elems = int64_t{kv_heads} * head_dim;
  if (moves.num_moves == 0 || moves.num_layers == 0) return cudaSuccess;
  if (row_elems % 8 != 0 || moves.num_moves > KvRowMoves::kMaxMoves ||
      moves.num_layers > KvRowMoves::kMaxLayers) {
    return cudaErrorInvalidValue;
  }
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>((row_elems / 8 + kThreads - 1) / kThreads), 2,
                  static_cast<unsigned>(moves.num_layers));
  return LaunchOverlapping(MoveKvRowsKernel, grid, kThreads, 0, stream, moves, block_tokens,
                           row_elems);
}

}  // namespace sparseserve::kernels::cuda
