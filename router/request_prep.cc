#include "router/request_prep.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/core/status.h"
#include "common/rpc/request_conversion.h"
#include "common/sampling/sampling_params.h"

namespace sparseserve::router {
namespace {

absl::Status CheckIds(absl::Span<const int32_t> ids, int vocab_size, absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", ids[i], " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string NewRequestId() {
  absl::BitGen gen;
  return absl::StrFormat("req-%016x", absl::Uniform<uint64_t>(gen));
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const tokenizer::Tokenizer& tokenizer,
                                               const PrepareLimits& limits) {
  PreparedRequest out;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) return absl::InvalidArgumentError("prompt: text is empty");
      absl::StatusOr<std::vector<int32_t>> ids =
          tokenizer.Encode(request.text(), /*add_special=*/true);
      if (!ids.ok()) return AnnotateStatus(ids.status(), "prompt: text");
      out.prompt_ids = *std::move(ids);
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      out.prompt_ids.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET: break;
  }
  if (out.prompt_ids.empty()) {
    return absl::InvalidArgumentError("prompt: no text and no token ids");
  }
  SS_RETURN_IF_ERROR(CheckIds(out.prompt_ids, limits.vocab_size, "prompt token_ids"));
  if (static_cast<int64_t>(out.prompt_ids.size()) >= limits.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", out.prompt_ids.size(), " tokens, the model's context is ", limits.max_context));
  }
  if (request.max_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: ", request.max_tokens(), " is negative"));
  }
  out.max_tokens = request.max_tokens() == 0 ? limits.default_max_tokens : request.max_tokens();
  SS_RETURN_IF_ERROR(
      AnnotateStatus(sampling::Validate(rpc::SamplingFromProto(request.sampling())), "sampling"));
  SS_RETURN_IF_ERROR(rpc::RequestOptionsFromProto(request.prefill_attention(),
                                                  request.decode_attention(), request.speculation(),
                                                  limits.request_defaults)
                         .status());
  out.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  SS_RETURN_IF_ERROR(CheckIds(out.stop_token_ids, limits.vocab_size, "stop_token_ids"));
  out.stop.assign(request.stop().begin(), request.stop().end());
  out.sampling = request.sampling();
  out.prefill_attention = request.prefill_attention();
  out.decode_attention = request.decode_attention();
  out.speculation = request.speculation();
  out.ignore_eos = request.ignore_eos();
  if (request.has_top_logprobs()) {
    if (request.top_logprobs() < 0 || request.top_logprobs() > kMaxRequestTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("top_logprobs: ", request.top_logprobs(),
                                                     " is outside [0, ", kMaxRequestTopLogprobs,
                                                     "]"));
    }
    out.top_logprobs = request.top_logprobs();
  }
  out.request_id = request.request_id().empty() ? NewRequestId() : request.request_id();
  return out;
}

}  // namespace sparseserve::router
