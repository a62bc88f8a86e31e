// CudaBackend::Sample — checks a SamplingBatch on the host, uploads it as one plan (row knobs and
// penalised ids, one H2D copy) and launches the sampling kernel over a reused scratch buffer; and
// CudaBackend::TokenLogprobs, the logprobs of the sampled tokens.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/sampling_plan_check.h"

namespace sparseserve::kernels {
namespace {

absl::Status CheckSampleTensor(const Tensor& t, DType dtype, int ndim, const char* name) {
  if (t.device() != Device::kCuda || t.dtype() != dtype || t.ndim() != ndim || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("Sample: ", name, " must be a contiguous CUDA ",
                                                   DTypeName(dtype), " tensor of ", ndim,
                                                   " dims, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaBackend::Sample(const Tensor& logits, const SamplingBatch& batch,
                                 const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckSampleTensor(logits, DType::kF32, 2, "logits"));
  SS_RETURN_IF_ERROR(CheckSampleTensor(out, DType::kI32, 1, "out"));
  const int64_t rows = logits.dim(0);
  const int64_t vocab = logits.dim(1);
  if (out.dim(0) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sample: out is ", out.DebugString(), " for ", rows, " logits rows"));
  }
  SS_RETURN_IF_ERROR(ValidateSamplingBatch(batch, rows, vocab));
  if (rows == 0) return absl::OkStatus();
  if (!sampling_) sampling_ = std::make_unique<SamplingState>();
  SamplingState& state = *sampling_;

  // The plan: SampleRowParams [rows] then the int32 ids, in one buffer and one copy.
  const size_t rows_bytes = static_cast<size_t>(rows) * sizeof(cuda::SampleRowParams);
  const size_t ids_bytes = batch.penalized_ids.size() * sizeof(int32_t);
  state.host.resize(rows_bytes + ids_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    const SamplingRow& row = batch.rows[static_cast<size_t>(r)];
    cuda::SampleRowParams params{};
    params.uniform = row.uniform;
    params.inv_temperature = row.temperature == 0.0f ? 0.0f : 1.0f / row.temperature;
    params.top_p = row.top_p;
    params.min_p = row.min_p;
    params.repetition_penalty = row.repetition_penalty;
    params.top_k = row.top_k;
    params.greedy = row.temperature == 0.0f ? 1 : 0;
    if (!batch.penalized_begin.empty()) {
      params.ids_begin = batch.penalized_begin[static_cast<size_t>(r)];
      params.ids_end = batch.penalized_begin[static_cast<size_t>(r) + 1];
    }
    std::memcpy(state.host.data() + static_cast<size_t>(r) * sizeof(params), &params,
                sizeof(params));
  }
  if (ids_bytes > 0) {
    std::memcpy(state.host.data() + rows_bytes, batch.penalized_ids.data(), ids_bytes);
  }
  const int64_t plan_words = static_cast<int64_t>((state.host.size() + 3) / 4);
  if (state.plan.numel() < plan_words) {
    SS_ASSIGN_OR_RETURN(state.plan,
                        Allocate(DType::kI32, {std::max<int64_t>(1024, 2 * plan_words)}));
  }
  if (state.scratch.numel() < rows * vocab) {
    SS_ASSIGN_OR_RETURN(state.scratch, Allocate(DType::kF32, {rows * vocab}));
  }
  // Pageable source: the call returns once the bytes are staged, so `host` may change after.
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(state.plan.raw_data(), state.host.data(), state.host.size(),
                                 cudaMemcpyHostToDevice, stream()),
                 "Sample plan upload"));
  cuda::SampleParams params;
  params.logits = logits.data<float>();
  params.scratch = state.scratch.data<float>();
  params.rows = static_cast<const cuda::SampleRowParams*>(state.plan.raw_data());
  params.penalized_ids = reinterpret_cast<const int32_t*>(
      static_cast<const uint8_t*>(state.plan.raw_data()) + rows_bytes);
  params.num_rows = rows;
  params.vocab = static_cast<int32_t>(vocab);
  params.out = out.data<int32_t>();
  return CudaStatus(cuda::LaunchSample(params, stream()), "Sample");
}

absl::Status CudaBackend::TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                                        const Tensor& values, const Tensor& ids) {
  SS_RETURN_IF_ERROR(CheckSampleTensor(logits, DType::kF32, 2, "logits"));
  SS_RETURN_IF_ERROR(CheckSampleTensor(tokens, DType::kI32, 1, "tokens"));
  SS_RETURN_IF_ERROR(CheckSampleTensor(values, DType::kF32, 2, "values"));
  SS_RETURN_IF_ERROR(CheckSampleTensor(ids, DType::kI32, 2, "ids"));
  SS_RETURN_IF_ERROR(ValidateTokenLogprobsShapes(logits, tokens, top_n, values, ids));
  cuda::TokenLogprobsParams params;
  params.logits = logits.data<float>();
  params.tokens = tokens.data<int32_t>();
  params.num_rows = logits.dim(0);
  params.vocab = static_cast<int32_t>(logits.dim(1));
  params.top_n = top_n;
  params.values = values.data<float>();
  params.values_stride = values.dim(1);
  params.ids = ids.data<int32_t>();
  params.ids_stride = ids.dim(1);
  return CudaStatus(cuda::LaunchTokenLogprobs(params, stream()), "TokenLogprobs");
}

}  // namespace sparseserve::kernels
