// OpenAI request bodies: a `POST /v1/completions` or `/v1/chat/completions` JSON body parsed and
// checked into the public Generation API's GenerateRequest (docs/api.md lists every field).
//
// Fields OpenAI defines and sparseserve honours map one to one (max_tokens, temperature, top_p,
// stop, seed, n = 1, stream, stream_options.include_usage, logprobs / top_logprobs); those it
// cannot honour (n > 1, echo, suffix, best_of > 1, logit_bias, presence/frequency penalties) are a
// 400 naming the field instead of being ignored, so a client never gets silently different output.
// vLLM's extensions (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids) and the engine's
// per-request methods (prefill_attention, decode_attention, speculation, as their proto JSON) are
// extra body fields. Unknown top-level fields are ignored, as OpenAI's API does. Pure functions;
// thread-safe.
#ifndef SPARSESERVE_ROUTER_OPENAI_REQUEST_H_
#define SPARSESERVE_ROUTER_OPENAI_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/chat_template.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::router {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;  // "" when the body names none
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
  // Log probabilities asked for: -1 = none; else the top alternatives per token, 0..5
  // (completions: `logprobs: N`; chat: `logprobs: true` with `top_logprobs: N`).
  int top_logprobs = -1;
  // The prompt, sampling, limits and methods; for chat the prompt is left unset (the caller
  // renders `messages` with the model's chat template).
  v1::GenerateRequest generate;
  // Chat only, at least one; content parts of type "text" concatenated.
  std::vector<tokenizer::ChatMessage> messages;
  bool add_generation_prompt = true;  // chat: the template's assistant header
};

// Most top alternatives a token's logprobs may list (OpenAI's limit for completions).
inline constexpr int kMaxTopLogprobs = 5;

// Parses `body`. kInvalidArgument whose message names the offending field ("max_tokens: must be
// an integer >= 0") for malformed JSON, a wrong type, an out-of-range value or an unsupported
// feature. max_tokens defaults to 16 for completions (OpenAI's default) and to the server's
// default for chat.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, OpenAiEndpoint endpoint);

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_OPENAI_REQUEST_H_
