// Validation of an AttentionBatch against a step's shapes, shared by every backend so that a bad
// plan fails the same way everywhere (before any kernel runs).
#ifndef SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_
#define SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/attention_plan.h"

namespace sparseserve::kernels {

// kOk for the patterns with a reference semantics (dense, sliding window with window >= 1 and
// sinks >= 0, MInference with a complete config, TokenSelect with k >= 1, initial, local >= 0),
// kInvalidArgument for bad parameters.
absl::Status CheckPatternSupported(const AttentionPattern& pattern);

// kInvalidArgument, naming the sequence, when: block_tokens < 1; a sequence's rows fall outside
// [0, shape.num_rows) or overlap another's; kv_len < q_len; the block table is too short or names
// a block outside [0, shape.num_blocks); a mask is not q_len * q_len values of 0 or 1; the shape
// is not a GQA shape; a TokenSelect sequence with rows has no state slot. The pattern check as
// CheckPatternSupported.
absl::Status ValidateAttentionBatch(const AttentionBatch& batch, const AttentionShape& shape);

// Words of AttentionWorkspace::sparse_index that `seq` needs: one MInferenceIndexShape area per
// query head for kMInference, 0 otherwise. REQUIRES: the batch passed ValidateAttentionBatch.
int64_t SparseIndexWords(const SequenceAttention& seq);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_
