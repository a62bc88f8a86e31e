// Log probabilities of sampled tokens on the device (Backend::TokenLogprobs): one CTA per logits
// row. A block max and a block sum of exp(l - max) give the row's log-sum-exp; each thread keeps
// the top_n largest logits of its strided elements in a sorted register list, and top_n rounds of
// a block-wide max over 64-bit keys (orderable float bits, then the inverted id, so a tie goes to
// the lower id) merge the lists. kernels::TokenLogprobsRow is the host reference (it sums in
// double; the two agree to float rounding).
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;
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

__global__ void __launch_bounds__(kThreads)
    TokenLogprobsKernel(const TokenLogprobsParams p) {
  __shared__ float reduce[32];
  __shared__ unsigned long long keys[32];
  const int64_t r = blockIdx.x;
  const float* row = p.logits + r * p.vocab;

  float local_max = -INFINITY;
  // The thread's top list, sorted by key descending; 0 = empty (no real key is 0).
  unsigned long long top[kMaxTop];
  for (int k = 0; k < kMaxTop; ++k) top[k] = 0;
  for (int64_t i = threadIdx.x; i < p.vocab; i += kThreads) {
    const float l = Logit(row, i);
    local_max = fmaxf(local_max, l);
    if (p.top_n == 0) continue;
    const unsigned long long key = Key(l, static_cast<int32_t>(i));
    if (key <= top[p.top_n - 1]) continue;
    int at = p.top_n - 1;
    while (at > 0 && key > top[at - 1]) {
      top[at] = top[at - 1];
      --at;
    }
    top[at] = key;
  }
  const float max = BlockReduce<ReduceOp::kMax>(local_max, reduce);
  float local_sum = 0.0f;
  if (isfinite(max)) {
    for (int64_t i = threadIdx.x; i < p.vocab; i += kThreads) local_sum += __expf(Logit(row, i) - max);
  }
  const float sum = BlockReduce<ReduceOp::kSum>(local_sum, reduce);
  const bool finite = isfinite(max);
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
