// Private state of CudaBackend shared by its source files: the cuBLASLt handle with its cached
// matmul plans, the sampling buffers, the MInference configs on the device, and the sparse
// methods' host-side plans.
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_

#include <cublasLt.h>

#include <cstdint>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/minference_index.h"

namespace sparseserve::kernels {

// Whether Linear takes the skinny weight-streaming kernel for n rows of `in` inputs (decode steps;
// cuda_linear.cc).
bool TakesSkinnyGemm(int64_t n, int64_t in);

// Whether the decode step's fused form `name` is on (swiglu: LinearSiluMul, rope:
// LinearRopeWriteKv, each a skinny GEMM epilogue): both by default; $SPARSESERVE_CUDA_FUSE lists
// the ones to keep ("none": every op by itself), for A/B runs.
bool FusesDecodeEpilogue(std::string_view name);

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

// MInference configs' head patterns on the device, uploaded once per config rather than per
// step. Keyed by the config's address: the entry's shared_ptr co-owns the (immutable) config, so
// the address cannot be reused by another config while the entry lives. Entries are never
// evicted (a process uses a handful of configs, a few KB each).
struct CudaBackend::MInferenceState {
  struct Heads {
    std::shared_ptr<const MInferenceConfig> config;
    Tensor heads;  // i32 [num_layers, num_heads, 3]: (kind, v, s)
  };
  absl::flat_hash_map<const MInferenceConfig*, Heads> configs;
};

// The MInference part of one attention plan, laid out on the host by PlanMInference.
struct CudaMInferencePlan {
  std::vector<cuda::MInferenceSeqInfo> seqs;
  std::vector<int32_t> rows;   // (record, chunk row) pairs, one per MInference query row
  int64_t index_words = 0;     // sparse_index words of the whole batch
  int64_t scratch_floats = 0;  // estimation scratch the index build needs
  int max_key_tiles = 0, max_query_blocks = 0;
};

// The TokenSelect part of one attention plan, laid out on the host by PlanTokenSelect
// (cuda_tokenselect.cc).
struct CudaTokenSelectPlan {
  std::vector<cuda::TokenSelectSeqInfo> seqs;  // every kTokenSelect sequence with rows
  std::vector<int32_t> rows;                // (record, chunk row) pairs of the selecting sequences
  std::vector<int32_t> merges;              // per row: (first item, items)
  std::vector<int32_t> merge_rows;          // per row: its packed query row
  int candidate_cap = 0, chunk_tokens = 0;  // selection grid bounds (0: nothing selects)
  int max_lists = 1;                        // the most selection lists of a record
  int items_per_row = 0, item_tokens = 0;   // attention grid bounds
  int64_t scratch_floats = 0;               // AttentionWorkspace::selection_scratch
  int64_t partial_floats = 0;               // attention partials (outputs and log-sum-exps)
};

// Lays out the kTokenSelect sequences of `batch` (host only). table_begins / mask_begins hold each
// sequence's offsets in the plan's concatenated block tables and masks; sm_count sizes the grids.
// kUnimplemented for head dims other than 64 and 128 or GQA groups over 16; kResourceExhausted
// when the scratch would not fit int32 candidate offsets.
absl::Status PlanTokenSelect(const AttentionBatch& batch, const AttentionShape& shape,
                             const std::vector<int32_t>& table_begins,
                             const std::vector<int32_t>& mask_begins, int sm_count,
                             CudaTokenSelectPlan* plan);

// kInvalidArgument when a selecting TokenSelect sequence of `plan` has no CUDA i32 state or a
// state slot too small for layer `layer` (checked before any launch, as the CPU does).
absl::Status CheckTokenSelectState(const AttentionPlan& plan, int layer);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_STATE_H_
