#include "common/sampling/sampling_params.h"

#include "absl/strings/str_cat.h"
#include "kernels/sampling_plan.h"
#include "kernels/sampling_plan_check.h"

namespace sparseserve::sampling {

absl::Status Validate(const SamplingParams& params) {
  // The knobs a backend sees are checked by the backends' own rules (one set of rules).
  kernels::SamplingRow row;
  row.temperature = params.temperature;
  row.top_k = params.top_k;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.repetition_penalty = params.repetition_penalty;
  if (absl::Status s = kernels::ValidateSamplingRow(row); !s.ok()) return s;
  if (params.penalty_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: penalty_window must be >= 0, got ", params.penalty_window));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::sampling
