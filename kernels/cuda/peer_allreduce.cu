// The one-shot peer all-reduce of kernels/cuda/peer_allreduce.h.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/peer_allreduce.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// Call numbers wrap (2^32 calls is a day of decode steps): "a before b" by their difference.
__device__ __forceinline__ bool Before(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

// Element conversions of the two summed types (sums in f32 either way).
__device__ __forceinline__ float ToFloat(float v) {
  return v;
}
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// x[i] = Σ_r slot_r[i] in rank order, slot `rank` being x itself: 16-byte pieces where x is
// aligned, then element by element. Inbox reads bypass L1 (__ldcg): peers wrote them.
template <typename T>
__device__ void SumSlots(T* x, int64_t count, bool aligned, const char* box, int rank, int ranks) {
  constexpr int kPer = 16 / sizeof(T);
  const int64_t pieces = aligned ? count / kPer : 0;
  for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) {
    float acc[kPer] = {};
    for (int r = 0; r < ranks; ++r) {
      const int4 v = r == rank
                         ? reinterpret_cast<const int4*>(x)[i]
                         : __ldcg(reinterpret_cast<const int4*>(box + r * kPeerSlotBytes) + i);
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] += ToFloat(e[j]);
    }
    int4 out;
    T* e = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < kPer; ++j) e[j] = FromFloat<T>(acc[j]);
    reinterpret_cast<int4*>(x)[i] = out;
  }
  for (int64_t i = pieces * kPer + threadIdx.x; i < count; i += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      acc += ToFloat(r == rank ? x[i]
                               : __ldcg(reinterpret_cast<const T*>(box + r * kPeerSlotBytes) + i));
    }
    x[i] = FromFloat<T>(acc);
  }
}

__global__ void __launch_bounds__(kThreads)
    PeerAllReduceKernel(const __grid_constant__ PeerAllReduceParams p) {
  __shared__ uint32_t shared_call;
  if (threadIdx.x == 0) shared_call = static_cast<uint32_t>(*p.calls) + 1;
  __syncthreads();
  const uint32_t call = shared_call;
  const int parity = static_cast<int>(call & 1);
  const int64_t bytes = p.count * (p.bf16 ? 2 : 4);
  const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  const int64_t vectors = aligned ? bytes / 16 : 0;  // 16-byte pieces; the rest byte by byte

  // 1. This rank's data into its slot of every other rank's inbox (peer stores over NVLink).
  for (int q = 0; q < p.ranks; ++q) {
    if (q == p.rank) continue;
    char* slot = p.inbox[q] + (int64_t{parity} * p.ranks + p.rank) * kPeerSlotBytes;
    for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
      reinterpret_cast<int4*>(slot)[i] = reinterpret_cast<const int4*>(p.x)[i];
    }
    for (int64_t i = vectors * 16 + threadIdx.x; i < bytes; i += blockDim.x) {
      slot[i] = static_cast<const char*>(p.x)[i];
    }
  }
  // 2. Every thread's stores reach the peers before any flag says so.
  __threadfence_system();
  __syncthreads();
  const int other = static_cast<int>(threadIdx.x);
  if (other < p.ranks && other != p.rank) {
    *reinterpret_cast<volatile uint32_t*>(p.flags[other] + p.rank) = call;
  }
  // 3. Wait for every other rank's flag in this rank's memory (or the group's abort).
  if (other < p.ranks && other != p.rank) {
    const volatile uint32_t* flag =
        reinterpret_cast<const volatile uint32_t*>(p.flags[p.rank]) + other;
    for (uint32_t spin = 1; Before(*flag, call); ++spin) {
      if (spin % 1024 == 0 && *p.aborted != 0) break;  // a host read: not every turn
    }
    __threadfence_system();
  }
  __syncthreads();

  // 4. The sum in rank order (the same bits on every rank); this rank's own part from x.
  const char* box = p.inbox[p.rank] + int64_t{parity} * p.ranks * kPeerSlotBytes;
  if (p.bf16) {
    SumSlots(static_cast<__nv_bfloat16*>(p.x), p.count, aligned, box, p.rank, p.ranks);
  } else {
    SumSlots(static_cast<float*>(p.x), p.count, aligned, box, p.rank, p.ranks);
  }
  if (threadIdx.x == 0) *p.calls = static_cast<int>(call);
}

}  // namespace

cudaError_t LaunchPeerAllReduce(const PeerAllReduceParams& p, cudaStream_t stream) {
  if (p.ranks < 2 || p.ranks > kPeerMaxRanks || p.rank < 0 || p.rank >= p.ranks || p.count < 0 ||
      p.count * (p.bf16 ? 2 : 4) > kPeerSlotBytes || p.calls == nullptr || p.aborted == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.count == 0) return cudaSuccess;
  // A plain launch (no programmatic dependent launch): the kernel starts after the one before it
  // has finished, and the one after it waits for its end. Its own status, not an earlier error.
  void* args[] = {const_cast<PeerAllReduceParams*>(&p)};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&PeerAllReduceKernel), dim3(1),
                          dim3(kThreads), args, 0, stream);
}

}  // namespace sparseserve::kernels::cuda
