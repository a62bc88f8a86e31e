// One query row of one head attended by one warp, key by key, with an online softmax: the
// CUDA-core path shared by the generic kernel (any head_dim, any visibility rule) and the
// MInference kernel (head dims without a tensor-core variant). Lane l holds dimensions l, l + 32,
// ... of the query and the output; a key's score is reduced across the warp.
#ifndef SPARSESERVE_KERNELS_CUDA_WARP_ROW_ATTENTION_CUH_
#define SPARSESERVE_KERNELS_CUDA_WARP_ROW_ATTENTION_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace sparseserve::kernels::cuda {

inline constexpr int kWarpRowMaxDimsPerLane = 8;  // head_dim <= 32 * 8

class WarpRowAttention {
 public:
  // Loads the pre-scaled query row `q` [head_dim].
  __device__ WarpRowAttention(const __nv_bfloat16* q, int head_dim, float scale)
      : lane_(threadIdx.x % 32), hd_(head_dim) {
#pragma unroll
    for (int j = 0; j < kWarpRowMaxDimsPerLane; ++j) {
      const int d = lane_ + 32 * j;
      qv_[j] = d < hd_ ? __bfloat162float(q[d]) * scale : 0.0f;
      acc_[j] = 0.0f;
    }
  }

  // Adds the key at `kv + key_base` and its value at `kv + value_base` (head_dim contiguous
  // elements each). Every lane of the warp calls it with the same key.
  __device__ __forceinline__ void Attend(const __nv_bfloat16* kv, int64_t key_base,
                                         int64_t value_base) {
    float partial = 0.0f;
#pragma unroll
    for (int j = 0; j < kWarpRowMaxDimsPerLane; ++j) {
      const int d = lane_ + 32 * j;
      if (d < hd_) partial += qv_[j] * __bfloat162float(kv[key_base + d]);
    }
    partial = WarpReduce<ReduceOp::kSum>(partial);
    const float new_max = fmaxf(running_max_, partial);
    const float correction = __expf(running_max_ - new_max);
    const float p = __expf(partial - new_max);
    running_sum_ = running_sum_ * correction + p;
#pragma unroll
    for (int j = 0; j < kWarpRowMaxDimsPerLane; ++j) {
      const int d = lane_ + 32 * j;
      if (d < hd_) acc_[j] = acc_[j] * correction + p * __bfloat162float(kv[value_base + d]);
    }
    running_max_ = new_max;
  }

  // Writes the output row; a row that saw no key outputs zeros, never NaN.
  __device__ void Store(__nv_bfloat16* out) const {
#pragma unroll
    for (int j = 0; j < kWarpRowMaxDimsPerLane; ++j) {
      const int d = lane_ + 32 * j;
      if (d < hd_)
        out[d] = __float2bfloat16_rn(running_sum_ > 0.0f ? acc_[j] / running_sum_ : 0.0f);
    }
  }

 private:
  int lane_, hd_;
  float qv_[kWarpRowMaxDimsPerLane], acc_[kWarpRowMaxDimsPerLane];
  float running_max_ = -INFINITY, running_sum_ = 0.0f;
};

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_WARP_ROW_ATTENTION_CUH_
