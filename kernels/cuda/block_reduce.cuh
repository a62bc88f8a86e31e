// Block-wide reductions shared by the CUDA kernels: a warp shuffle tree, one partial per warp
// in shared memory, then a second shuffle tree. The one way kernels here reduce across a block.
#ifndef SPARSESERVE_KERNELS_CUDA_BLOCK_REDUCE_CUH_
#define SPARSESERVE_KERNELS_CUDA_BLOCK_REDUCE_CUH_

namespace sparseserve::kernels::cuda {

enum class ReduceOp { kSum, kMax };

// The sum or maximum of `v` over the warp, returned to every lane (a butterfly: every lane
// combines in the same order, so all get the same bits). Every lane of the warp must call it.
template <ReduceOp kOp, class T>
__device__ __forceinline__ T WarpReduce(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kOp == ReduceOp::kSum ? v + other : fmax(v, other);
  }
  return v;
}

// The sum or maximum of `v` over the block, returned to every thread. `scratch` holds 32 floats
// of shared memory; every thread of the block must call it (it synchronises twice, so the
// caller may reuse `scratch` right after).
template <ReduceOp kOp>
__device__ __forceinline__ float BlockReduce(float v, float* scratch) {
  const float identity = kOp == ReduceOp::kSum ? 0.0f : -INFINITY;
  v = WarpReduce<kOp>(v);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? scratch[lane] : identity;
  v = WarpReduce<kOp>(v);
  __syncthreads();
  return v;
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_BLOCK_REDUCE_CUH_
