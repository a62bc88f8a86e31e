// Decode-shaped GEMMs (a handful of token rows against a large weight matrix): a bandwidth-bound
// kernel that streams each weight row once with 16-byte loads and keeps the few token rows in
// registers, instead of a tiled GEMM whose tiles would be mostly padding.
//
// out[n, o] = x[n, k] · w[o, k]ᵀ for n <= kMaxSkinnyRows, k a multiple of 8. f32 accumulation;
// bf16 or f32 output. Two fused forms save a decode step the small kernel that would follow:
//   - SwiGLU: the gate/up projection writes silu(gate) · up;
//   - RoPE + KV write: the QKV projection rotates its query and key pairs and stores queries and
//     the new token's K/V in the paged cache (SkinnyRopeKv), as RopeWriteKv does.
// Both round where the separate ops round, so they give the separate ops' bits. (A third, the
// residual add + RMSNorm run by the output projection's last block, measured slower than the
// norm kernel it replaced: bench/RESULTS.md, session 20.)
#include <cuda_bf16.h>

#include <cstdlib>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/row_chunks.cuh"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunksInFlight = 8;  // 16-byte weight loads in flight per thread

enum class Epilogue { kPlain, kSwiGlu, kRopeKv };

struct KernelArgs {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  const __nv_bfloat16* bias;  // or null
  int64_t k;
  int64_t w_rows;
  void* out;  // kPlain: [n, w_rows]; kSwiGlu: bf16 [n, w_rows / 2]; kRopeKv: unused
  bool out_f32;
  SkinnyRopeKv rope;
};

__device__ __forceinline__ float RoundBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// The weight row of slot r of group g. kPlain: rows [g * kRows, g * kRows + kRows). Paired forms
// put kHalf rows in each half of the group: SwiGLU the gate rows [g * kHalf, ...) and the up rows
// ffn on; RoPE the rotation pairs (i, i + head_dim / 2) of one head, i from (g % per_head) * kHalf.
template <Epilogue kEpi, int kRows>
__device__ __forceinline__ int64_t RowOf(const KernelArgs& a, int64_t g, int r) {
  constexpr int kHalf = kRows / 2;
  if constexpr (kEpi == Epilogue::kPlain) {
    return g * kRows + r;
  } else if constexpr (kEpi == Epilogue::kSwiGlu) {
    return r < kHalf ? g * kHalf + r : a.w_rows / 2 + g * kHalf + (r - kHalf);
  } else {
    const int half = a.rope.head_dim / 2;
    const int per_head = half / kHalf;
    const int64_t head = g / per_head;
    const int i0 = static_cast<int>(g % per_head) * kHalf;
    return head * a.rope.head_dim + (r < kHalf ? i0 + r : half + i0 + (r - kHalf));
  }
}

// Stores one RoPE pair of token row n: element i of head `head` (a, b = its elements i and
// i + head_dim / 2, already rounded as the projection's output), as RopeWriteKvKernel does.
__device__ __forceinline__ void StoreRopePair(const SkinnyRopeKv& p, int n, int head, int i,
                                              float a, float b) {
  const int half = p.head_dim / 2;
  if (head < p.heads + p.kv_heads) {  // queries and keys rotate
    float s, c;
    sincosf(static_cast<float>(p.positions[n]) * p.inv_freq[i], &s, &c);
    const float ra = a * c - b * s;
    b = b * c + a * s;
    a = ra;
  }
  __nv_bfloat16* dst;
  if (head < p.heads) {
    dst = reinterpret_cast<__nv_bfloat16*>(p.q) + (int64_t{n} * p.heads + head) * p.head_dim;
  } else {
    const int64_t slot = p.slots[n];
    const int64_t block = slot / p.block_tokens;
    const int64_t offset = slot % p.block_tokens;
    const bool is_value = head >= p.heads + p.kv_heads;
    const int kv_head = head - p.heads - (is_value ? p.kv_heads : 0);
    const int64_t kv_row = int64_t{p.kv_heads} * p.head_dim;
    dst = reinterpret_cast<__nv_bfloat16*>(p.kv_layer) +
          ((2 * block + (is_value ? 1 : 0)) * p.block_tokens + offset) * kv_row +
          int64_t{kv_head} * p.head_dim;
  }
  dst[i] = __float2bfloat16_rn(a);
  dst[i + half] = __float2bfloat16_rn(b);
}

// Blocks per SM the two-token kernels keep (at most 80 registers a thread): left free, the
// compiler gave their paired epilogues 92-94 and B=2 decode at 1K ran 2% slower (H100). The others
// get 0, no bound: held to 64 registers the one-token kernels ran B=1 1.3% slower, and even a
// bound of 1 changes their code.
template <int N>
constexpr int kMinBlocksPerSm = N == 2 ? 6 : 0;

// A block owns a group of kRows weight rows (RowOf) and splits their k dimension over all its
// threads (so even a 1024-row matrix gives hundreds of blocks to spread over the GPU); warp
// shuffles, then shared memory, reduce the partial sums.
template <int N, int kRows, Epilogue kEpi>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<N>)
    SkinnyGemmKernel(const KernelArgs a) {
  constexpr int kUnroll = kChunksInFlight / kRows;  // 16-byte chunks of each row per thread
  constexpr int kHalf = kRows / 2;
  __shared__ float partial[kThreads / 32][N][kRows];
  const int64_t group = blockIdx.x;
  const int64_t chunks = a.k / 8;
  const auto* x4 = reinterpret_cast<const uint4*>(a.x);
  const auto* w4 = reinterpret_cast<const uint4*>(a.w);
  int64_t rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = RowOf<kEpi, kRows>(a, group, r);
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
        wr[u][r] = (c < chunks && rows[r] < a.w_rows) ? __ldcs(w4 + rows[r] * chunks + c)
                                                      : make_uint4(0, 0, 0, 0);
      }
    }
  };
  // Weights are never written by a kernel: the first tiles stream in while the kernel ahead (the
  // norm or activation producing x) may still run. x and out only after it has finished.
  AllowNextKernelLaunch();  // the next kernel's weight loads may start as this one's tail drains
  load_weights(threadIdx.x);
  WaitForPrecedingKernels();
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kUnroll) {
    if (base != threadIdx.x) load_weights(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * kThreads;
      if (c >= chunks) break;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) UnpackBf16x8(wr[u][r], wf[r]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xf[8];
        UnpackBf16x8(x4[n * chunks + c], xf);  // not __ldg: x is written while this kernel runs
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
      const float v = WarpReduce<ReduceOp::kSum>(acc[n][r]);
      if (lane == 0) partial[warp][n][r] = v;
    }
  }
  __syncthreads();
  constexpr int kOutputs = kEpi == Epilogue::kPlain ? kRows : kHalf;
  if (threadIdx.x < N * kOutputs) {
    const int n = threadIdx.x / kOutputs;
    const int r = threadIdx.x % kOutputs;
    // Slots are picked by thread here, so rows are recomputed (RowOf) rather than read from
    // rows[]: indexing that array by thread would place it in local memory.
    const int64_t row = RowOf<kEpi, kRows>(a, group, r);
    // Row slot s's sum, rounded to bf16 with its bias as the plain projection's output would be.
    auto output_of = [&](int s) {
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < kThreads / 32; ++i) v += partial[i][n][s];
      const int64_t slot_row = RowOf<kEpi, kRows>(a, group, s);
      if (a.bias != nullptr && slot_row < a.w_rows) v += __bfloat162float(a.bias[slot_row]);
      return v;
    };
    if constexpr (kEpi == Epilogue::kPlain) {
      if (row < a.w_rows) {
        const float v = output_of(r);
        const int64_t at = int64_t{n} * a.w_rows + row;
        if (a.out_f32) {
          static_cast<float*>(a.out)[at] = v;
        } else {
          static_cast<__nv_bfloat16*>(a.out)[at] = __float2bfloat16_rn(v);
        }
      }
    } else if constexpr (kEpi == Epilogue::kSwiGlu) {
      const float g = RoundBf16(output_of(r));
      const float u = RoundBf16(output_of(kHalf + r));
      static_cast<__nv_bfloat16*>(a.out)[int64_t{n} * (a.w_rows / 2) + row] =
          __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
    } else {
      const int head = static_cast<int>(row / a.rope.head_dim);
      const int i = static_cast<int>(row % a.rope.head_dim);
      StoreRopePair(a.rope, n, head, i, RoundBf16(output_of(r)), RoundBf16(output_of(kHalf + r)));
    }
  }
}

// Weight rows per block: 4, or 2 with $SPARSESERVE_SKINNY_ROWS=2 for A/B runs (the same loads
// in flight per thread either way; H100, 8B decode: 4 is 0.5-2% faster a step, 8 6-20% slower).
int RowsPerBlock() {
  static const int rows = [] {
    const char* env = std::getenv("SPARSESERVE_SKINNY_ROWS");
    return env != nullptr && std::atoi(env) == 2 ? 2 : 4;
  }();
  return rows;
}

// Rows per block for a paired form whose halves hold `units` rows each: RowsPerBlock, halved
// until a half's rows divide `units` (2, one row per half, always does).
int PairedRows(int64_t units) {
  int rows = RowsPerBlock();
  while (rows > 2 && units % (rows / 2) != 0) rows /= 2;
  return rows;
}

template <int N, int kRows, Epilogue kEpi>
cudaError_t Launch(const KernelArgs& a, cudaStream_t stream) {
  const int64_t groups = (a.w_rows + kRows - 1) / kRows;  // the paired forms divide evenly
  return LaunchOverlapping(SkinnyGemmKernel<N, kRows, kEpi>, static_cast<unsigned>(groups),
                           kThreads, 0, stream, a);
}

template <int N, Epilogue kEpi>
cudaError_t LaunchN(int rows_per_block, const KernelArgs& a, cudaStream_t stream) {
  return rows_per_block == 2 ? Launch<N, 2, kEpi>(a, stream) : Launch<N, 4, kEpi>(a, stream);
}

template <Epilogue kEpi>
cudaError_t LaunchRows(int64_t n, int rows_per_block, const KernelArgs& a, cudaStream_t stream) {
  switch (n) {
    case 1: return LaunchN<1, kEpi>(rows_per_block, a, stream);
    case 2: return LaunchN<2, kEpi>(rows_per_block, a, stream);
    case 3: return LaunchN<3, kEpi>(rows_per_block, a, stream);
    case 4: return LaunchN<4, kEpi>(rows_per_block, a, stream);
    case 5: return LaunchN<5, kEpi>(rows_per_block, a, stream);
    case 6: return LaunchN<6, kEpi>(rows_per_block, a, stream);
    case 7: return LaunchN<7, kEpi>(rows_per_block, a, stream);
    case 8: return LaunchN<8, kEpi>(rows_per_block, a, stream);
    default: return cudaErrorInvalidValue;
  }
}

KernelArgs ArgsOf(const bf16_t* x, const bf16_t* w, const bf16_t* bias, int64_t k, int64_t w_rows,
                  void* out, bool out_f32) {
  KernelArgs a{};
  a.x = reinterpret_cast<const __nv_bfloat16*>(x);
  a.w = reinterpret_cast<const __nv_bfloat16*>(w);
  a.bias = reinterpret_cast<const __nv_bfloat16*>(bias);
  a.k = k;
  a.w_rows = w_rows;
  a.out = out;
  a.out_f32 = out_f32;
  return a;
}

}  // namespace

cudaError_t LaunchSkinnyGemm(const bf16_t* x, const bf16_t* w, const bf16_t* bias, int64_t n,
                             int64_t k, int64_t o, void* out, bool out_f32, cudaStream_t stream) {
  const KernelArgs a = ArgsOf(x, w, bias, k, o, out, out_f32);
  return LaunchRows<Epilogue::kPlain>(n, RowsPerBlock(), a, stream);
}

cudaError_t LaunchSkinnySwiGlu(const bf16_t* x, const bf16_t* w_gate_up, int64_t n, int64_t k,
                               int64_t ffn, bf16_t* out, cudaStream_t stream) {
  // A group's gate rows must not run past the gate half.
  const int rows = PairedRows(ffn);
  return LaunchRows<Epilogue::kSwiGlu>(
      n, rows, ArgsOf(x, w_gate_up, nullptr, k, 2 * ffn, out, false), stream);
}

cudaError_t LaunchSkinnyRopeKv(const bf16_t* x, const bf16_t* w_qkv, const bf16_t* bias, int64_t n,
                               int64_t k, const SkinnyRopeKv& rope, cudaStream_t stream) {
  const int64_t rows = int64_t{rope.heads + 2 * rope.kv_heads} * rope.head_dim;
  KernelArgs a = ArgsOf(x, w_qkv, bias, k, rows, nullptr, false);
  a.rope = rope;
  // A group's pairs must not run past its head.
  return LaunchRows<Epilogue::kRopeKv>(n, PairedRows(rope.head_dim / 2), a, stream);
}

}  // namespace sparseserve::kernels::cuda
