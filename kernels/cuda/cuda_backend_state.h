// Private state of CudaBackend shared by its source files: the cuBLASLt handle with its cached
// matmul plans, and the sampling buffers.
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_

#include <cublasLt.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/tensor/tensor.h"
#include "kernels/cuda/cuda_backend.h"

namespace sparseserve::kernels {

// One cuBLASLt plan per GEMM shape (rows, in, out, output dtype, bias epilogue): the heuristic
// query costs tens of microseconds, a decode step has a handful of distinct shapes.
struct CudaBackend::GemmCache {
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool>;  // n, in, out, f32 out, bias
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  absl::flat_hash_map<Key, Plan> plans;
  ~GemmCache();
};

// Sample's buffers, grown to the largest call so far and reused (work on them is ordered by the
// backend's one stream).
struct CudaBackend::SamplingState {
  std::vector<uint8_t> host;  // the plan of one call: SampleRowParams [m], then int32 ids
  Tensor plan;                // i32 words on the device holding `host`
  Tensor scratch;             // f32 [>= m * vocab] penalised logits and weights
};

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_
