// Private state of CudaBackend shared by its source files: the cuBLASLt handle with its cached
// matmul plans, the device copy of the current attention plan, and the sampling buffers.
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

// An AttentionBatch flattened into one int32 array (its host copy is kept to skip re-uploads
// when the next layer passes the same batch), plus the decode split-KV workspace.
struct CudaBackend::AttentionMetadata {
  std::vector<int32_t> host;  // what `device` holds
  uint64_t plan_id = 0;       // the AttentionBatch it was built from (0: unknown)
  Tensor device;              // i32, grown as needed
  Tensor partial;             // f32 split-KV partial outputs, grown as needed
  // Offsets (in int32 elements) into `host`/`device` and counts.
  int64_t decode_header = 0, seqs = 0, decode_items = 0, merges = 0, merge_seqs = 0,
          prefill_tiles = 0, row_seq = 0, tables = 0;
  int num_prefill_tiles = 0, num_merges = 0, total_q = 0;
  int max_decode_items = 0;  // the decode grid: a bound on split-KV chunks fixed by the batch
  bool generic = false;      // head_dim without a tensor-core kernel: every row on the generic one
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
