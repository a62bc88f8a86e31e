// Log probabilities of sampled tokens on the device (Backend::TokenLogprobs): one CTA per logits
// row, read once: each thread keeps an online log-sum-exp (running max and rescaled sum) and the
// top_n largest logits of its strided elements in a sorted list, block reductions combine the
// log-sum-exps, and top_n rounds of a block-wide max over 64-bit keys (orderable float bits, then
// the inverted id, so a tie goes to the lower id) merge the lists. kernels::TokenLogprobsRow is the
// host reference (it sums in double; the two agree to float rounding).
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxTop = 8;  // kernels::kMaxTopLogprobs

__device__ __forceinline__ float Logit(const float* row, int64_t i) {
  const float l = row[i];
  return isnan(l) ? -INFINITY : l;
}

// Larger key <=> larger logit, then lower id.
__device__ __forceinline__ unsigned long long Key(float value, int32_t id) {
  uint32_t bits = __float_as_uint(value);
  bits = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return (static_cast<unsigned long long>(bits) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ int32_t KeyId(unsigned long long key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFull));
}

__device__ __forceinline__ unsigned long long BlockMaxKey(unsigned long long v,
                                                          unsigned long long* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? scratch[lane] : 0;
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  __syncthreads();
  return v;
}

__global__ void __launch_bounds__(kThreads) TokenLogprobsKernel(const TokenLogprobsParams p) {
  __shared__ float reduce[32];
  __shared__ unsigned long long keys[32];
  const int64_t r = blockIdx.x;
  const float* row = p.logits + r * p.vocab;

  // One pass: an online log-sum-exp (running max, sum rescaled when the max grows) and the
  // thread's top list, sorted by key descending; 0 = empty (no real key is 0). `floor` caches
  // the list's last key in a register, so most elements cost one compare.
  float local_max = -INFINITY;
  float local_sum = 0.0f;
  unsigned long long top[kMaxTop];
  for (int k = 0; k < kMaxTop; ++k) top[k] = 0;
  unsigned long long floor = p.top_n == 0 ? ~0ull : 0;
  // kUnroll loads in flight per thread before any is used: one CTA per row must keep enough bytes
  // in flight to stream the row at the SM's share of the bandwidth.
  constexpr int kUnroll = 8;
  for (int64_t base = threadIdx.x; base < p.vocab; base += int64_t{kThreads} * kUnroll) {
    float loaded[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      loaded[u] = i < p.vocab ? Logit(row, i) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      if (i >= p.vocab) break;
      const float l = loaded[u];
      if (l > local_max) {
        local_sum = local_sum * __expf(local_max - l) + 1.0f;  // exp(-inf) = 0 on the first
        local_max = l;
      } else if (l != -INFINITY) {
        local_sum += __expf(l - local_max);
      }
      const unsigned long long key = Key(l, static_cast<int32_t>(i));
      if (key <= floor) continue;
      int at = p.top_n - 1;
      while (at > 0 && key > top[at - 1]) {
        top[at] = top[at - 1];
        --at;
      }
      top[at] = key;
      floor = top[p.top_n - 1];
    }
  }
  const float max = BlockReduce<ReduceOp::kMax>(local_max, reduce);
  const bool finite = isfinite(max);
  const float scaled =
      finite && local_max != -INFINITY ? local_sum * __expf(local_max - max) : 0.0f;
  const float sum = BlockReduce<ReduceOp::kSum>(scaled, reduce);
  const float lse = max + logf(sum);
  float* values = p.values + r * p.values_stride;
  if (threadIdx.x == 0) {
    const int32_t token = p.tokens[r];
    values[0] = finite && token >= 0 && token < p.vocab ? Logit(row, token) - lse : -INFINITY;
  }
  // Merge: each round the block's largest head wins and its owner pops it.
  int head = 0;
  for (int k = 0; k < p.top_n; ++k) {
    const unsigned long long mine = head < p.top_n ? top[head] : 0;
    const unsigned long long best = BlockMaxKey(mine, keys);
    if (best != 0 && mine == best) ++head;  // keys are unique (they hold the id)
    if (threadIdx.x == 0) {
      const int32_t id = best == 0 ? k : KeyId(best);
      p.ids[r * p.ids_stride + k] = id;
      values[1 + k] = finite ? Logit(row, id) - lse : -INFINITY;
    }
  }
}

}  // namespace

cudaError_t LaunchTokenLogprobs(const TokenLogprobsParams& params, cudaStream_t stream) {
  if (params.num_rows == 0) return cudaSuccess;
  if (params.top_n < 0 || params.top_n > kMaxTop) return cudaErrorInvalidValue;
  TokenLogprobsKernel<<<static_cast<unsigned>(params.num_rows), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
