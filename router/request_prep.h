// Request preparation: turns a client GenerateRequest into the token-level request the router
// routes (validation, tokenization, defaults, request id).
//
// Stateless functions; thread-safe (the Tokenizer is immutable and shared).
#ifndef SPARSESERVE_ROUTER_REQUEST_PREP_H_
#define SPARSESERVE_ROUTER_REQUEST_PREP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/sampling_params.h"
#include "common/tokenizer/tokenizer.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::router {

struct PrepareLimits {
  int vocab_size = 0;            // token ids must be in [0, vocab_size)
  int max_context = 0;           // prompts must be shorter than this (tokens)
  int default_max_tokens = 256;  // used when the request's max_tokens is 0
};

// A validated request, ready to route.
struct PreparedRequest {
  std::string request_id;           // the client's, or a generated "req-<16 hex>"
  std::vector<int32_t> prompt_ids;  // tokenized text (BOS per the tokenizer) or the given ids
  v1::SamplingParams sampling;      // as sent by the client (forwarded to the workers)
  int max_tokens = 0;               // > 0
  std::vector<std::string> stop;    // stop strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

// The engine's SamplingParams for the proto's fields: has_temperature=false means 1.0; top_p 0
// means 1 (off); repetition_penalty 0 means 1 (off).
sampling::SamplingParams SamplingFromProto(const v1::SamplingParams& proto);

// A new random request id, "req-" + 16 hex digits.
std::string NewRequestId();

// Validates and tokenizes `request`. Returns kInvalidArgument (naming the field) for: no prompt
// (no text and no ids, or an empty one), text the tokenizer rejects, a token id or stop token
// id outside [0, vocab_size), a prompt of max_context tokens or more, max_tokens < 0, sampling
// parameters sampling::Validate rejects.
absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const tokenizer::Tokenizer& tokenizer,
                                               const PrepareLimits& limits);

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_REQUEST_PREP_H_
