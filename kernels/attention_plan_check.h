// Validation of one sequence of an AttentionBatch against the query rows and the KV pool, shared
// by every backend so that a bad plan fails the same way everywhere (before any kernel runs).
#ifndef SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_
#define SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/attention_plan.h"

namespace sparseserve::kernels {

// kUnimplemented for a pattern other than kDense (named after `backend`); kInvalidArgument when
// the rows do not fit `num_rows`, kv_len < q_len, the block table is too short or names a block
// outside [0, num_blocks), or q_positions are malformed.
absl::Status ValidateSequenceAttention(const SequenceAttention& seq, int64_t num_rows,
                                       int block_tokens, int64_t num_blocks, size_t idx,
                                       absl::string_view backend);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ATTENTION_PLAN_CHECK_H_
