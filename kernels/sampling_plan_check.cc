#include "kernels/sampling_plan_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace sparseserve::kernels {

absl::Status ValidateSamplingRow(const SamplingRow& row) {
  // Comparisons are written so that NaN fails them.
  if (!(row.temperature >= 0.0f) || std::isinf(row.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: temperature must be finite and >= 0, got ", row.temperature));
  }
  if (row.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_k must be >= 0, got ", row.top_k));
  }
  if (!(row.top_p > 0.0f && row.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p must be in (0, 1], got ", row.top_p));
  }
  if (!(row.min_p >= 0.0f && row.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: min_p must be in [0, 1], got ", row.min_p));
  }
  if (!(row.repetition_penalty > 0.0f) || std::isinf(row.repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: repetition_penalty must be finite and > 0, got ", row.repetition_penalty));
  }
  if (!(row.uniform >= 0.0 && row.uniform < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: uniform must be in [0, 1), got ", row.uniform));
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingBatch(const SamplingBatch& batch, int64_t num_rows, int64_t vocab) {
  if (vocab < 1 || vocab > kMaxSamplingVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: vocab of ", vocab, " outside [1, ", kMaxSamplingVocab, "]"));
  }
  if (static_cast<int64_t>(batch.rows.size()) != num_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: ", batch.rows.size(), " sampling rows for ", num_rows, " logits rows"));
  }
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    if (absl::Status s = ValidateSamplingRow(batch.rows[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("Sample: row ", i, ": ", s.message()));
    }
  }
  const std::vector<int32_t>& begin = batch.penalized_begin;
  const int64_t num_ids = static_cast<int64_t>(batch.penalized_ids.size());
  if (begin.empty()) {
    if (num_ids == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: ", num_ids, " penalised ids without penalized_begin offsets"));
  }
  if (static_cast<int64_t>(begin.size()) != num_rows + 1 || begin.front() != 0 ||
      begin.back() != num_ids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sample: penalized_begin must hold ", num_rows + 1, " offsets from 0 to ", num_ids,
        ", got ", begin.size(), " offsets from ", begin.front(), " to ", begin.back()));
  }
  for (size_t i = 1; i < begin.size(); ++i) {
    if (begin[i] < begin[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sample: penalized_begin decreases at row ", i - 1));
    }
  }
  for (size_t row = 0; row + 1 < begin.size(); ++row) {
    for (int32_t j = begin[row]; j < begin[row + 1]; ++j) {
      const int32_t id = batch.penalized_ids[static_cast<size_t>(j)];
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("Sample: row ", row, ": penalised id ", id,
                                                       " outside the vocabulary of ", vocab));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenLogprobsShapes(const Tensor& logits, const Tensor& tokens, int top_n,
                                         const Tensor& values, const Tensor& ids) {
  if (logits.ndim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: logits must be [m, vocab], got ", logits.DebugString()));
  }
  const int64_t m = logits.dim(0);
  const int64_t vocab = logits.dim(1);
  if (top_n < 0 || top_n > kMaxTopLogprobs || top_n > vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TokenLogprobs: top_n ", top_n, " outside [0, min(", kMaxTopLogprobs, ", ", vocab, ")]"));
  }
  if (tokens.ndim() != 1 || tokens.dim(0) != m) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: tokens must be [", m, "], got ", tokens.DebugString()));
  }
  if (values.ndim() != 2 || values.dim(0) != m || values.dim(1) < 1 + top_n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TokenLogprobs: values must be [", m, ", >= ", 1 + top_n, "], got ", values.DebugString()));
  }
  if (ids.ndim() != 2 || ids.dim(0) != m || ids.dim(1) < std::max(top_n, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("TokenLogprobs: ids must be [", m,
                                                   ", >= ", std::max(top_n, 1), "], got ",
                                                   ids.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
