// CpuBackend::Sample and TokenLogprobs — the sampling reference (kernels/sampling_reference.h) row
// by row.
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"
#include "kernels/sampling_plan_check.h"

namespace sparseserve::kernels {

using cpu_internal::CheckDim;
using cpu_internal::CheckTensor;

absl::Status CpuBackend::Sample(const Tensor& logits, const SamplingBatch& batch,
                                const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(logits, DType::kF32, 2, "Sample", "logits"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kI32, 1, "Sample", "out"));
  SS_RETURN_IF_ERROR(CheckDim(out, 0, logits.dim(0), "Sample", "out"));
  const int64_t rows = logits.dim(0);
  const int64_t vocab = logits.dim(1);
  SS_RETURN_IF_ERROR(ValidateSamplingBatch(batch, rows, vocab));
  const absl::Span<const int32_t> ids(batch.penalized_ids);
  for (int64_t r = 0; r < rows; ++r) {
    const absl::Span<const float> row(logits.data<float>() + r * vocab, static_cast<size_t>(vocab));
    absl::Span<const int32_t> row_ids;
    if (!batch.penalized_begin.empty()) {
      const size_t begin = static_cast<size_t>(batch.penalized_begin[static_cast<size_t>(r)]);
      const size_t end = static_cast<size_t>(batch.penalized_begin[static_cast<size_t>(r) + 1]);
      row_ids = ids.subspan(begin, end - begin);
    }
    out.data<int32_t>()[r] =
        SampleRow(row, batch.rows[static_cast<size_t>(r)], row_ids, &sampling_scratch_);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                                       const Tensor& values, const Tensor& ids) {
  SS_RETURN_IF_ERROR(CheckTensor(logits, DType::kF32, 2, "TokenLogprobs", "logits"));
  SS_RETURN_IF_ERROR(CheckTensor(tokens, DType::kI32, 1, "TokenLogprobs", "tokens"));
  SS_RETURN_IF_ERROR(CheckTensor(values, DType::kF32, 2, "TokenLogprobs", "values"));
  SS_RETURN_IF_ERROR(CheckTensor(ids, DType::kI32, 2, "TokenLogprobs", "ids"));
  SS_RETURN_IF_ERROR(ValidateTokenLogprobsShapes(logits, tokens, top_n, values, ids));
  const int64_t rows = logits.dim(0);
  const int64_t vocab = logits.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t token = tokens.data<int32_t>()[r];
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("TokenLogprobs: tokens[", r, "] = ", token, " outside [0, ", vocab, ")"));
    }
    TokenLogprobsRow(
        absl::Span<const float>(logits.data<float>() + r * vocab, static_cast<size_t>(vocab)),
        token, top_n,
        absl::Span<float>(values.data<float>() + r * values.dim(1),
                          static_cast<size_t>(values.dim(1))),
        absl::Span<int32_t>(ids.data<int32_t>() + r * ids.dim(1), static_cast<size_t>(ids.dim(1))));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
