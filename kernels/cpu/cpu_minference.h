// The CPU reference of MInference's per-layer index (kernels/minference_index.h): building it
// from a layer's queries and keys, and listing the keys a row sees under it.
#ifndef SPARSESERVE_KERNELS_CPU_CPU_MINFERENCE_H_
#define SPARSESERVE_KERNELS_CPU_CPU_MINFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/core/thread_pool.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"

namespace sparseserve::kernels::cpu_internal {

// Offsets into AttentionWorkspace::sparse_index of each sequence's index (-1 for sequences
// without one), and the total words in `*total`.
std::vector<int64_t> SparseIndexOffsets(const AttentionBatch& batch, int64_t* total);

// Builds layer `layer`'s index of every kMInference sequence of `plan` into
// plan.workspace->sparse_index (sized by PlanAttention) and adds their pairs to sparse_stats.
// q f32 [rows, heads, head_dim], kv_layer as Backend::WriteKv. kInvalidArgument for a layer
// outside a sequence's config.
absl::Status BuildMInferenceIndex(const AttentionPlan& plan, const Tensor& q,
                                  const Tensor& kv_layer, int layer, core::ThreadPool* pool);

// The keys row `row` (0 <= row < q_len) of `seq` sees under the index `area` of one head (as
// BuildMInferenceIndex wrote it, laid out as `shape`), ascending, into `keys`.
void MInferenceKeys(const SequenceAttention& seq, const MInferenceIndexShape& shape,
                    const int32_t* area, int32_t row, std::vector<int32_t>* keys);

}  // namespace sparseserve::kernels::cpu_internal

#endif  // SPARSESERVE_KERNELS_CPU_CPU_MINFERENCE_H_
