// The one-shot peer all-reduce of kernels/cuda/peer_allreduce.h.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/peer_allreduce.h"
#include "kernels/cuda/row_chunks.cuh"

namespace sparseserve::kernels::cuda {
namespace {

using bf16_t = __nv_bfloat16;

constexpr int kPiecesPerThread = 4;    // 16-byte pieces each thread holds in registers
constexpr int64_t kPlainPieces = 512;  // pieces per CTA of a plain sum: 8 KiB
constexpr uint32_t kEmptyWord = 0x80008000u;
constexpr int kMaxThreads = 512;  // rows of up to 16384 elements (4 pieces per thread)

// A 32-bit word of a piece has arrived when none of its lanes is empty: for bf16 neither half is
// 0x8000; for f32 the word is not 0x80008000 (a denormal no sender sends: it goes as -0.0).
template <typename T>
__device__ __forceinline__ bool WordArrived(uint32_t w);
template <>
__device__ __forceinline__ bool WordArrived<bf16_t>(uint32_t w) {
  return (w & 0xffffu) != 0x8000u && (w >> 16) != 0x8000u;
}
template <>
__device__ __forceinline__ bool WordArrived<float>(uint32_t w) {
  return w != kEmptyWord;
}

// What a sender sends for a word: never an empty lane (bf16 -0.0 becomes +0.0; the f32 denormal
// 0x80008000 becomes -0.0). Every rank sums the sent values, its own included.
template <typename T>
__device__ __forceinline__ uint32_t SentWord(uint32_t w);
template <>
__device__ __forceinline__ uint32_t SentWord<bf16_t>(uint32_t w) {
  if ((w & 0xffffu) == 0x8000u) w &= 0xffff0000u;
  if ((w >> 16) == 0x8000u) w &= 0x0000ffffu;
  return w;
}
template <>
__device__ __forceinline__ uint32_t SentWord<float>(uint32_t w) {
  return w == kEmptyWord ? 0x80000000u : w;
}

// Strong (relaxed, system-scope) 16-byte accesses for everything two GPUs touch: each 32-bit
// element is then single-copy atomic, which "arrived" relies on, and a poll is never hoisted.
__device__ __forceinline__ void StoreShared(uint4* p, const uint4& v) {
  asm volatile("st.relaxed.sys.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 LoadShared(const uint4* p) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

template <typename T>
__device__ __forceinline__ bool PieceArrived(const uint4& v) {
  return WordArrived<T>(v.x) && WordArrived<T>(v.y) && WordArrived<T>(v.z) && WordArrived<T>(v.w);
}

// Reads a peer's piece from this rank's inbox once it has arrived (or the group was aborted:
// then whatever is there), and empties it for the call after next.
template <typename T>
__device__ __forceinline__ uint4 TakePiece(uint4* slot, const volatile int* aborted) {
  uint4 v = LoadShared(slot);
  for (uint32_t spin = 1; !PieceArrived<T>(v); ++spin) {
    if (spin % 1024 == 0 && *aborted != 0) break;  // a host read: not every turn
    v = LoadShared(slot);
  }
  StoreShared(slot, make_uint4(kEmptyWord, kEmptyWord, kEmptyWord, kEmptyWord));
  return v;
}

// The 8 or 4 elements of a piece, added into acc (f32).
__device__ __forceinline__ void AddPiece(const uint4& v, bf16_t, float (&acc)[8]) {
  float f[8];
  UnpackBf16x8(v, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += f[i];
}
__device__ __forceinline__ void AddPiece(const uint4& v, float, float (&acc)[8]) {
  acc[0] += __uint_as_float(v.x), acc[1] += __uint_as_float(v.y);
  acc[2] += __uint_as_float(v.z), acc[3] += __uint_as_float(v.w);
}

// acc rounded to T (the sum alone's bits) and packed into a piece; bf16 sums come back as f32.
__device__ __forceinline__ uint4 PackPiece(bf16_t, float (&acc)[8]) {
  uint4 out;
  auto* pairs = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    pairs[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    const float2 f = __bfloat1622float2(pairs[i]);
    acc[2 * i] = f.x, acc[2 * i + 1] = f.y;
  }
  return out;
}
__device__ __forceinline__ uint4 PackPiece(float, float (&acc)[8]) {
  return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                    __float_as_uint(acc[3]));
}

// One CTA per `per_cta` pieces (kNorm: per row of the fused epilogue, pieces in the same places
// as the RMSNorm kernel's threads hold them and the same row-chunk arithmetic, so the norm's sums
// are the same bits).
template <typename T, bool kNorm>
__global__ void __launch_bounds__(kMaxThreads)
    PeerAllReduceKernel(const __grid_constant__ PeerAllReduceParams p, int64_t per_cta) {
  constexpr int kLanes = 16 / sizeof(T);  // elements per piece
  __shared__ uint32_t shared_call;
  __shared__ float scratch[32];
  AllowNextKernelLaunch();  // the GEMV after the norm streams its weights while this one waits
  float w[kPiecesPerThread][8];
  if constexpr (kNorm) {  // the norm weights are never written by a kernel: read ahead of the wait
#pragma unroll
    for (int j = 0; j < kPiecesPerThread; ++j) {
      const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
      if (c >= per_cta) break;
      Load8(p.weight, /*f32=*/false, c, w[j]);
    }
  }
  WaitForPrecedingKernels();
  if (threadIdx.x == 0) shared_call = *reinterpret_cast<volatile unsigned*>(p.calls);
  __syncthreads();
  const uint32_t call = shared_call;
  const int64_t total = p.count / kLanes;
  const int64_t first = blockIdx.x * per_cta;
  const int64_t mine = per_cta < total - first ? per_cta : total - first;  // this CTA's pieces
  auto* x = reinterpret_cast<uint4*>(p.x) + first;
  const int64_t parity_base = int64_t(call & 1) * p.ranks * kPeerSlotBytes;

  // 1. This rank's pieces into its slot of every other rank's inbox (peer stores over NVLink).
  uint4 own[kPiecesPerThread];
#pragma unroll
  for (int j = 0; j < kPiecesPerThread; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c >= mine) break;
    uint4 v = x[c];
    v = make_uint4(SentWord<T>(v.x), SentWord<T>(v.y), SentWord<T>(v.z), SentWord<T>(v.w));
    own[j] = v;
    for (int q = 0; q < p.ranks; ++q) {
      if (q == p.rank) continue;
      auto* slot = reinterpret_cast<uint4*>(p.inbox[q] + parity_base + p.rank * kPeerSlotBytes);
      StoreShared(slot + first + c, v);
    }
  }
  // 2. The sum in rank order, each peer's piece taken from this rank's inbox as it arrives.
  float acc[kPiecesPerThread][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPiecesPerThread; ++j) {
    const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
    if (c >= mine) break;
    for (int i = 0; i < 8; ++i) acc[j][i] = 0.0f;
    for (int r = 0; r < p.ranks; ++r) {
      auto* slot = reinterpret_cast<uint4*>(p.inbox[p.rank] + parity_base + r * kPeerSlotBytes);
      AddPiece(r == p.rank ? own[j] : TakePiece<T>(slot + first + c, p.aborted), T{}, acc[j]);
    }
    const uint4 packed = PackPiece(T{}, acc[j]);
    if constexpr (kNorm) {  // residual += the sum; the norm of the new residual
      float r[8];
      Load8(p.residual, /*f32=*/true, first + c, r);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[j][i] += r[i];
        sum_sq += acc[j][i] * acc[j][i];
      }
      Store8(p.residual, /*f32=*/true, first + c, acc[j]);
    } else {
      x[c] = packed;
    }
  }
  if constexpr (kNorm) {
    const float inv_rms =
        rsqrtf(BlockReduce<ReduceOp::kSum>(sum_sq, scratch) / static_cast<float>(p.d) + p.eps);
#pragma unroll
    for (int j = 0; j < kPiecesPerThread; ++j) {
      const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
      if (c >= mine) break;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[j][i] *= inv_rms * w[j][i];  // as the RMSNorm kernel
      Store8(p.out, /*f32=*/false, first + c, acc[j]);
    }
  }
  // 3. The last CTA of the call advances the counter (every CTA has read it by then).
  __syncthreads();
  if (threadIdx.x == 0) {
    if (atomicAdd(p.calls + 1, 1u) == gridDim.x - 1) {
      p.calls[1] = 0;
      p.calls[0] = call + 1;
    }
  }
}

__global__ void EmptyInboxKernel(uint4* inbox, int64_t pieces) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pieces;
       i += int64_t{gridDim.x} * blockDim.x) {
    inbox[i] = make_uint4(kEmptyWord, kEmptyWord, kEmptyWord, kEmptyWord);
  }
}

}  // namespace

bool PeerAllReduceFits(const PeerAllReduceParams& p) {
  const int64_t size = p.bf16 ? 2 : 4;
  const int64_t bytes = p.count * size;
  if (p.ranks < 2 || p.ranks > kPeerMaxRanks || p.rank < 0 || p.rank >= p.ranks || p.count <= 0 ||
      bytes > kPeerSlotBytes || bytes % 16 != 0 || reinterpret_cast<uintptr_t>(p.x) % 16 != 0 ||
      p.calls == nullptr || p.aborted == nullptr) {
    return false;
  }
  if (p.residual == nullptr) return true;
  // The fused epilogue: bf16 rows of whole pieces, each row within one CTA's registers.
  return p.bf16 && p.d > 0 && p.d % 8 == 0 && p.count % p.d == 0 &&
         p.d / 8 <= int64_t{kPiecesPerThread} * kMaxThreads && p.weight != nullptr &&
         p.out != nullptr && reinterpret_cast<uintptr_t>(p.residual) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.weight) % 16 == 0;
}

cudaError_t LaunchPeerAllReduce(const PeerAllReduceParams& p, cudaStream_t stream) {
  if (!PeerAllReduceFits(p)) return cudaErrorInvalidValue;
  const int64_t pieces = p.count * (p.bf16 ? 2 : 4) / 16;
  // Per CTA: a row (the norm's layout: threads as RMSNorm's kernel has them) or 8 KiB.
  const int64_t per_cta = p.residual != nullptr ? p.d / 8 : kPlainPieces;
  int64_t threads = (per_cta + kPiecesPerThread - 1) / kPiecesPerThread;
  threads = std::max<int64_t>(32, (threads + 31) / 32 * 32);
  const auto grid = static_cast<unsigned>((pieces + per_cta - 1) / per_cta);
  const auto block = static_cast<unsigned>(threads);
  if (p.residual != nullptr) {
    return LaunchOverlapping(PeerAllReduceKernel<bf16_t, true>, grid, block, 0, stream, p, per_cta);
  }
  if (p.bf16) {
    return LaunchOverlapping(PeerAllReduceKernel<bf16_t, false>, grid, block, 0, stream, p,
                             per_cta);
  }
  return LaunchOverlapping(PeerAllReduceKernel<float, false>, grid, block, 0, stream, p, per_cta);
}

cudaError_t EmptyPeerInbox(char* inbox, int64_t bytes, cudaStream_t stream) {
  const int64_t pieces = bytes / 16;
  EmptyInboxKernel<<<static_cast<unsigned>(std::min<int64_t>((pieces + 255) / 256, 4096)), 256, 0,
                     stream>>>(reinterpret_cast<uint4*>(inbox), pieces);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
