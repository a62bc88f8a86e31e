// Validation of sampling knobs and of a SamplingBatch, shared by every backend (so a bad plan fails
// the same way everywhere, before any kernel runs) and by common/sampling's SamplingParams (one
// set of rules for a request's knobs and a row's). Pure functions; thread-safe.
#ifndef SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_
#define SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/tensor/tensor.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::kernels {

// kInvalidArgument naming the field for: temperature < 0, NaN or infinite; top_k < 0; top_p
// outside (0, 1]; min_p outside [0, 1]; repetition_penalty <= 0, NaN or infinite; uniform outside
// [0, 1) or NaN.
absl::Status ValidateSamplingRow(const SamplingRow& row);

// kInvalidArgument for: vocab outside [1, kMaxSamplingVocab]; batch.rows.size() != num_rows; an
// invalid row (naming it); penalized_begin neither empty (with no ids) nor num_rows + 1
// non-decreasing offsets from 0 to penalized_ids.size(); a penalised id outside [0, vocab).
absl::Status ValidateSamplingBatch(const SamplingBatch& batch, int64_t num_rows, int64_t vocab);

// The shape rules of Backend::TokenLogprobs (dtypes and devices are the backend's to check):
// kInvalidArgument naming the tensor for logits not 2-D, tokens not [m], values not [m, >= 1 +
// top_n], ids not [m, >= max(top_n, 1)], or top_n outside [0, min(kMaxTopLogprobs, vocab)].
absl::Status ValidateTokenLogprobsShapes(const Tensor& logits, const Tensor& tokens, int top_n,
                                         const Tensor& values, const Tensor& ids);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_
