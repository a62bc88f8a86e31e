// The shadow-dense monitor's comparison on the GPU (Backend::RelativeL2Error): one CTA per row
// range sums the squared difference and the reference's squared norm, then thread 0 writes their
// ratio's square root. A shadowed step runs it once per layer on a few rows, so a plain block
// reduction is enough; it is launched without programmatic overlap, so it starts only after the
// shadow attention it reads has finished.
#include <cuda_bf16.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RelativeL2ErrorKernel(const bf16_t* actual, const bf16_t* expected, int64_t rows,
                                      int64_t row_elems, const int32_t* ranges, float* out) {
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x;
  int64_t first = ranges[2 * i];
  int64_t last = first + ranges[2 * i + 1];
  first = first < 0 ? 0 : first;
  last = last > rows ? rows : last;
  const auto* a = reinterpret_cast<const __nv_bfloat16*>(actual);
  const auto* b = reinterpret_cast<const __nv_bfloat16*>(expected);
  float diff = 0, ref = 0;
  for (int64_t e = first * row_elems + threadIdx.x; e < last * row_elems; e += kThreads) {
    const float x = __bfloat162float(a[e]), y = __bfloat162float(b[e]);
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  diff = BlockReduce<ReduceOp::kSum>(diff, scratch);
  ref = BlockReduce<ReduceOp::kSum>(ref, scratch);
  if (threadIdx.x == 0) out[i] = diff == 0.0f ? 0.0f : ref == 0.0f ? 1.0f : sqrtf(diff / ref);
}

}  // namespace

cudaError_t LaunchRelativeL2Error(const bf16_t* actual, const bf16_t* expected, int64_t rows,
                                  int64_t row_elems, const int32_t* ranges, int64_t num_ranges,
                                  float* out, cudaStream_t stream) {
  RelativeL2ErrorKernel<<<static_cast<unsigned>(num_ranges), kThreads, 0, stream>>>(
      actual, expected, rows, row_elems, ranges, out);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
