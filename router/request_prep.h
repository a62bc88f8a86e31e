// Request preparation: turns a client GenerateRequest into the token-level request the router
// routes (validation, tokenization, defaults, request id).
//
// Stateless functions; thread-safe (the Tokenizer is immutable and shared).
#ifndef SPARSESERVE_ROUTER_REQUEST_PREP_H_
#define SPARSESERVE_ROUTER_REQUEST_PREP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/request_options.h"
#include "common/tokenizer/tokenizer.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::router {

struct PrepareLimits {
  int vocab_size = 0;            // token ids must be in [0, vocab_size)
  int max_context = 0;           // prompts must be shorter than this (tokens)
  int default_max_tokens = 256;  // used when the request's max_tokens is 0
  // Fill the request's unset attention / speculation choices for its checks only.
  engine::RequestOptions request_defaults;
};

// A validated request, ready to route.
struct PreparedRequest {
  std::string request_id;           // the client's, or a generated "req-<16 hex>"
  std::vector<int32_t> prompt_ids;  // tokenized text (BOS per the tokenizer) or the given ids
  v1::SamplingParams sampling;      // as sent by the client (forwarded to the workers)
  // The attention and speculation choices as sent by the client (forwarded to the workers,
  // which fill unset ones from their own flags).
  v1::PrefillAttention prefill_attention;
  v1::DecodeAttention decode_attention;
  v1::Speculation speculation;
  int max_tokens = 0;             // > 0
  std::vector<std::string> stop;  // stop strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Log probabilities per token with this many alternatives; unset = none.
  std::optional<int> top_logprobs;
};

// Most alternatives GenerateRequest.top_logprobs may ask for (as OpenAI's API).
inline constexpr int kMaxRequestTopLogprobs = 5;

// A new random request id, "req-" + 16 hex digits.
std::string NewRequestId();

// Validates and tokenizes `request`. Returns kInvalidArgument (naming the field) for: no prompt
// (no text and no ids, or an empty one), text the tokenizer rejects, a token id or stop token
// id outside [0, vocab_size), a prompt of max_context tokens or more, max_tokens < 0, sampling
// parameters sampling::Validate rejects, top_logprobs outside [0, kMaxRequestTopLogprobs], an
// unknown attention or speculation method or one
// engine::Validate rejects (with limits.request_defaults filling unset choices); kUnimplemented
// naming a chosen method this build does not have yet.
absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const tokenizer::Tokenizer& tokenizer,
                                               const PrepareLimits& limits);

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_REQUEST_PREP_H_
