// OpenAI response bodies: the Generation API's streamed GenerateResponse messages written as a
// `text_completion` / `chat.completion` object, or as server-sent-event chunks
// (`text_completion` / `chat.completion.chunk`, then `[DONE]`), and errors as OpenAI's
// {"error": {...}} with the HTTP status a gRPC status code maps to. docs/api.md shows each shape.
// One OpenAiResponseBuilder per request; not thread-safe. The free functions are.
#ifndef SPARSESERVE_ROUTER_OPENAI_RESPONSE_H_
#define SPARSESERVE_ROUTER_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json_fwd.hpp"
#include "router/openai_request.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::router {

// The HTTP status of an error: 400 invalid argument / out of range / failed precondition,
// 401 unauthenticated, 403 permission denied, 404 not found, 409 already exists, 429 resource
// exhausted (a full queue), 501 unimplemented, 503 unavailable (no worker), 504 deadline
// exceeded, 499 cancelled, 500 otherwise.
int HttpStatusOf(absl::StatusCode code);

// {"error": {"message", "type", "param": null, "code"}}; type as OpenAI names them
// (invalid_request_error, authentication_error, not_found_error, rate_limit_error, ...).
std::string OpenAiErrorBody(const absl::Status& status);

// "length" | "stop" | "abort" (vLLM's name for an aborted request) | null while running.
const char* FinishReasonName(v1::FinishReason reason);

class OpenAiResponseBuilder {
 public:
  // `tokenizer` (borrowed) spells the logprobs' tokens. `id` is the response's "id", `created`
  // its Unix time.
  OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model,
                        int64_t created, const tokenizer::Tokenizer* tokenizer);

  // Streaming: the data payloads of the SSE events for one message, in order (a chat stream's
  // first message also yields the assistant role delta; the last one the finish chunk and, with
  // include_usage, a usage chunk). The caller writes each as "data: <payload>\n\n" and ends the
  // stream with "data: [DONE]\n\n".
  std::vector<std::string> StreamChunks(const v1::GenerateResponse& message);

  // Not streaming: adds a message's tokens and text; Body() is the whole response once the last
  // message was added.
  void Add(const v1::GenerateResponse& message);
  std::string Body() const;

 private:
  struct TokenEntry {
    int32_t id;
    v1::TokenLogprobs logprobs;
  };
  std::string ChunkEnvelope(nlohmann::ordered_json choices, bool with_usage) const;
  // null when the request asked for no logprobs. `text_offset`: the completion text's byte
  // offset of the first token, advanced past these tokens (the completions shape lists offsets).
  nlohmann::ordered_json LogprobsJson(const std::vector<TokenEntry>& tokens,
                                      int64_t* text_offset) const;
  nlohmann::ordered_json UsageJson() const;
  std::vector<TokenEntry> Entries(const v1::GenerateResponse& message) const;

  const OpenAiEndpoint endpoint_;
  const int top_logprobs_;
  const bool include_usage_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const tokenizer::Tokenizer* const tokenizer_;

  bool role_sent_ = false;
  std::string text_;
  std::vector<TokenEntry> tokens_;
  int64_t streamed_text_bytes_ = 0;  // text offsets of a streamed completion's logprobs
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_OPENAI_RESPONSE_H_
