#include "common/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sparseserve::sampling {

absl::Status Validate(const SamplingParams& params) {
  // Comparisons are written so that NaN fails them.
  if (!(params.temperature >= 0.0f) || std::isinf(params.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: temperature must be finite and >= 0, got ", params.temperature));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_k must be >= 0, got ", params.top_k));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p must be in (0, 1], got ", params.top_p));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: min_p must be in [0, 1], got ", params.min_p));
  }
  if (!(params.repetition_penalty > 0.0f) || std::isinf(params.repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: repetition_penalty must be finite and > 0, got ", params.repetition_penalty));
  }
  if (params.penalty_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: penalty_window must be >= 0, got ", params.penalty_window));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::sampling
