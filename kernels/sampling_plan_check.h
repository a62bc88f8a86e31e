// Validation of sampling knobs and of a SamplingBatch, shared by every backend (so a bad plan fails
// the same way everywhere, before any kernel runs) and by common/sampling's SamplingParams (one
// set of rules for a request's knobs and a row's). Pure functions; thread-safe.
#ifndef SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_
#define SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
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

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_SAMPLING_PLAN_CHECK_H_
