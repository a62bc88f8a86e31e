#include "router/openai_response.h"

#include <utility>

#include "nlohmann/json.hpp"

namespace sparseserve::router {
namespace {

using Json = nlohmann::ordered_json;

// Token text may end inside a UTF-8 sequence: invalid bytes become U+FFFD instead of failing.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const char* ErrorType(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnauthenticated: return "authentication_error";
    case absl::StatusCode::kPermissionDenied: return "permission_error";
    case absl::StatusCode::kNotFound: return "not_found_error";
    case absl::StatusCode::kResourceExhausted: return "rate_limit_error";
    case absl::StatusCode::kUnavailable: return "service_unavailable_error";
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss: return "server_error";
    default: return "invalid_request_error";
  }
}

Json BytesJson(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string OpenAiErrorBody(const absl::Status& status) {
  Json error = {{"message", std::string(status.message())},
                {"type", ErrorType(status.code())},
                {"param", nullptr},
                {"code", HttpStatusOf(status.code())}};
  return Dump(Json{{"error", std::move(error)}});
}

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
    case v1::FINISH_REASON_CONTEXT: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_ABORTED: return "abort";
    default: return nullptr;
  }
}

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, std::string id,
                                             std::string model, int64_t created,
                                             const tokenizer::Tokenizer* tokenizer)
    : endpoint_(request.endpoint),
      top_logprobs_(request.top_logprobs),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(tokenizer) {}

std::vector<OpenAiResponseBuilder::TokenEntry> OpenAiResponseBuilder::Entries(
    const v1::GenerateResponse& message) const {
  std::vector<TokenEntry> out;
  if (top_logprobs_ < 0) return out;
  for (int i = 0; i < message.token_ids_size(); ++i) {
    out.push_back({message.token_ids(i),
                   i < message.logprobs_size() ? message.logprobs(i) : v1::TokenLogprobs()});
  }
  return out;
}

Json OpenAiResponseBuilder::LogprobsJson(const std::vector<TokenEntry>& tokens,
                                         int64_t* text_offset) const {
  if (top_logprobs_ < 0) return nullptr;
  auto spell = [&](int32_t id) { return tokenizer_->TokenBytes(id, /*with_special=*/true); };
  if (endpoint_ == OpenAiEndpoint::kCompletions) {
    // The legacy completions shape: parallel arrays.
    Json names = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    for (const TokenEntry& t : tokens) {
      const std::string s = spell(t.id);
      names.push_back(s);
      lps.push_back(t.logprobs.logprob());
      Json top = Json::object();
      for (int k = 0; k < t.logprobs.top_ids_size() && k < top_logprobs_; ++k) {
        top[spell(t.logprobs.top_ids(k))] = t.logprobs.top_logprobs(k);
      }
      tops.push_back(std::move(top));
      offsets.push_back(*text_offset);
      *text_offset += static_cast<int64_t>(s.size());
    }
    return Json{{"tokens", std::move(names)},
                {"token_logprobs", std::move(lps)},
                {"top_logprobs", std::move(tops)},
                {"text_offset", std::move(offsets)}};
  }
  Json content = Json::array();
  for (const TokenEntry& t : tokens) {
    const std::string s = spell(t.id);
    Json top = Json::array();
    for (int k = 0; k < t.logprobs.top_ids_size() && k < top_logprobs_; ++k) {
      const std::string alt = spell(t.logprobs.top_ids(k));
      top.push_back(
          {{"token", alt}, {"logprob", t.logprobs.top_logprobs(k)}, {"bytes", BytesJson(alt)}});
    }
    content.push_back({{"token", s},
                       {"logprob", t.logprobs.logprob()},
                       {"bytes", BytesJson(s)},
                       {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

Json OpenAiResponseBuilder::UsageJson() const {
  const int prompt = usage_.prompt_tokens();
  const int completion = usage_.completion_tokens();
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", usage_.cached_prompt_tokens()}}}};
}

std::string OpenAiResponseBuilder::ChunkEnvelope(Json choices, bool with_usage) const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  Json envelope = {{"id", id_},
                   {"object", chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", created_},
                   {"model", model_},
                   {"choices", std::move(choices)}};
  // With include_usage every chunk carries "usage": null and one last chunk the numbers.
  if (include_usage_) envelope["usage"] = with_usage ? UsageJson() : Json(nullptr);
  return Dump(envelope);
}

std::vector<std::string> OpenAiResponseBuilder::StreamChunks(const v1::GenerateResponse& message) {
  std::vector<std::string> chunks;
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  const char* finish = FinishReasonName(message.finish_reason());
  if (chat && !role_sent_) {
    role_sent_ = true;
    Json choice = {{"index", 0},
                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    chunks.push_back(ChunkEnvelope(Json::array({std::move(choice)}), false));
  }
  const std::vector<TokenEntry> entries = Entries(message);
  const bool has_content = !message.text().empty() || !entries.empty();
  if (has_content || finish != nullptr) {
    Json choice = {{"index", 0}};
    if (chat) {
      choice["delta"] = message.text().empty() ? Json::object() : Json{{"content", message.text()}};
    } else {
      choice["text"] = message.text();
    }
    choice["logprobs"] =
        entries.empty() ? Json(nullptr) : LogprobsJson(entries, &streamed_text_bytes_);
    choice["finish_reason"] = finish == nullptr ? Json(nullptr) : Json(finish);
    chunks.push_back(ChunkEnvelope(Json::array({std::move(choice)}), false));
  }
  if (finish != nullptr && include_usage_) {
    usage_ = message.usage();
    chunks.push_back(ChunkEnvelope(Json::array(), true));
  }
  return chunks;
}

void OpenAiResponseBuilder::Add(const v1::GenerateResponse& message) {
  text_ += message.text();
  for (TokenEntry& t : Entries(message)) tokens_.push_back(std::move(t));
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    finish_ = message.finish_reason();
    usage_ = message.usage();
  }
}

std::string OpenAiResponseBuilder::Body() const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  const char* finish = FinishReasonName(finish_);
  Json choice = {{"index", 0}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
  }
  int64_t text_offset = 0;
  choice["logprobs"] = LogprobsJson(tokens_, &text_offset);
  choice["finish_reason"] = finish == nullptr ? Json(nullptr) : Json(finish);
  return Dump(Json{{"id", id_},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created_},
                   {"model", model_},
                   {"choices", Json::array({std::move(choice)})},
                   {"usage", UsageJson()}});
}

}  // namespace sparseserve::router
