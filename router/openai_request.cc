#include "router/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace sparseserve::router {
namespace {

using Json = nlohmann::json;

// Deepest nesting accepted in a method object (the proto messages are one level deep).
constexpr int kMaxMethodDepth = 8;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The member `name` of `body`, or null when absent or JSON null (OpenAI clients send null for
// "not set").
const Json* Member(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> IntegerField(const Json& value, absl::string_view field, int64_t lo,
                                     int64_t hi) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(field, absl::StrCat("must be at most ", hi));
    }
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else {
    return FieldError(field, "must be an integer");
  }
  if (v < lo || v > hi) {
    return FieldError(field, absl::StrCat(v, " is outside [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<double> NumberField(const Json& value, absl::string_view field, double lo,
                                   double hi) {
  if (!value.is_number()) return FieldError(field, "must be a number");
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return FieldError(field, absl::StrCat(v, " is outside [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<bool> BoolField(const Json& value, absl::string_view field) {
  if (!value.is_boolean()) return FieldError(field, "must be true or false");
  return value.get<bool>();
}

absl::StatusOr<std::string> StringField(const Json& value, absl::string_view field) {
  if (!value.is_string()) return FieldError(field, "must be a string");
  return value.get<std::string>();
}

// A token-id array: every element an integer in int32 range (the router checks the vocabulary).
absl::StatusOr<std::vector<int32_t>> TokenIdsField(const Json& value, absl::string_view field) {
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    absl::StatusOr<int64_t> id = IntegerField(value[i], absl::StrCat(field, "[", i, "]"), 0,
                                              std::numeric_limits<int32_t>::max());
    if (!id.ok()) return id.status();
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// Nesting depth of `value` (a scalar is 1), counted without recursion: a body may nest
// arbitrarily deep and must not be walked on the stack.
int Depth(const Json& value) {
  int deepest = 0;
  std::vector<std::pair<const Json*, int>> stack = {{&value, 1}};
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, depth);
    if (node->is_structured()) {
      for (const Json& child : *node) stack.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

// `prompt`: a string, an array of one string, an array of token ids, or an array of one such
// array (n = 1: several prompts in one request are refused, not batched). `nested`: inside the
// outer array (one level of nesting at most).
absl::Status ParsePrompt(const Json& prompt, v1::GenerateRequest* out, bool nested = false) {
  if (prompt.is_string()) {
    out->set_text(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt.is_array() || prompt.empty()) {
    return FieldError("prompt",
                      "must be a string, an array of token ids, or an array of one of "
                      "those");
  }
  if (prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    if (nested) return FieldError("prompt", "nests arrays more than two deep");
    return ParsePrompt(prompt[0], out, /*nested=*/true);
  }
  if (prompt[0].is_string() || prompt[0].is_array()) {
    return FieldError("prompt",
                      absl::StrCat(prompt.size(), " prompts in one request; send one per request"));
  }
  absl::StatusOr<std::vector<int32_t>> ids = TokenIdsField(prompt, "prompt");
  if (!ids.ok()) return ids.status();
  out->mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  return absl::OkStatus();
}

// `messages`: [{role, content}], content a string or an array of {"type": "text", "text"} parts.
absl::StatusOr<std::vector<tokenizer::ChatMessage>> ParseMessages(const Json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return FieldError("messages", "must be a non-empty array");
  }
  std::vector<tokenizer::ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = absl::StrCat("messages[", i, "]");
    const Json& m = messages[i];
    if (!m.is_object()) return FieldError(field, "must be an object");
    tokenizer::ChatMessage message;
    const Json* role = Member(m, "role");
    if (role == nullptr) return FieldError(field, "has no role");
    absl::StatusOr<std::string> r = StringField(*role, absl::StrCat(field, ".role"));
    if (!r.ok()) return r.status();
    message.role = *std::move(r);
    if (const Json* content = Member(m, "content"); content != nullptr) {
      if (content->is_string()) {
        message.content = content->get<std::string>();
      } else if (content->is_array()) {
        for (size_t p = 0; p < content->size(); ++p) {
          const Json& part = (*content)[p];
          const std::string part_field = absl::StrCat(field, ".content[", p, "]");
          const Json* type = part.is_object() ? Member(part, "type") : nullptr;
          const Json* text = part.is_object() ? Member(part, "text") : nullptr;
          if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" ||
              text == nullptr || !text->is_string()) {
            return FieldError(part_field,
                              "only parts {\"type\": \"text\", \"text\": ...} are "
                              "supported");
          }
          message.content += text->get<std::string>();
        }
      } else {
        return FieldError(absl::StrCat(field, ".content"), "must be a string or an array of parts");
      }
    }
    out.push_back(std::move(message));
  }
  return out;
}

absl::Status ParseStop(const Json& stop, v1::GenerateRequest* out) {
  if (stop.is_string()) {
    if (!stop.get<std::string>().empty()) out->add_stop(stop.get<std::string>());
    return absl::OkStatus();
  }
  if (!stop.is_array()) return FieldError("stop", "must be a string or an array of strings");
  for (size_t i = 0; i < stop.size(); ++i) {
    absl::StatusOr<std::string> s = StringField(stop[i], absl::StrCat("stop[", i, "]"));
    if (!s.ok()) return s.status();
    if (!s->empty()) out->add_stop(*std::move(s));
  }
  return absl::OkStatus();
}

// An engine method object (prefill_attention, decode_attention, speculation) as its proto JSON;
// unknown fields are refused there (a misspelt knob must not silently run the default).
absl::Status ParseMethodObject(const Json& value, absl::string_view field,
                               google::protobuf::Message* out) {
  if (!value.is_object()) return FieldError(field, "must be an object");
  // The messages are flat: anything deeper is malformed, and dump() below recurses.
  if (Depth(value) > kMaxMethodDepth) return FieldError(field, "nests too deep");
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      value.dump(-1, ' ', false, Json::error_handler_t::replace), out, options);
  if (!status.ok()) return FieldError(field, std::string(status.message()));
  return absl::OkStatus();
}

// Fields OpenAI defines that sparseserve cannot honour: a 400 rather than different output.
absl::Status RefuseUnsupported(const Json& body) {
  if (const Json* n = Member(body, "n"); n != nullptr) {
    absl::StatusOr<int64_t> v = IntegerField(*n, "n", 1, 1);
    if (!v.ok()) return FieldError("n", "only n = 1 is supported");
  }
  if (const Json* b = Member(body, "best_of"); b != nullptr) {
    absl::StatusOr<int64_t> v = IntegerField(*b, "best_of", 1, 1);
    if (!v.ok()) return FieldError("best_of", "only best_of = 1 is supported");
  }
  if (const Json* e = Member(body, "echo"); e != nullptr && !(e->is_boolean() && !e->get<bool>())) {
    return FieldError("echo", "is not supported");
  }
  if (const Json* s = Member(body, "suffix");
      s != nullptr && !(s->is_string() && s->get_ref<const std::string&>().empty())) {
    return FieldError("suffix", "is not supported");
  }
  if (const Json* l = Member(body, "logit_bias"); l != nullptr && !(l->is_object() && l->empty())) {
    return FieldError("logit_bias", "is not supported");
  }
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (const Json* p = Member(body, name); p != nullptr && !(p->is_number() && *p == 0)) {
      return FieldError(name, "is not supported (use repetition_penalty)");
    }
  }
  if (const Json* t = Member(body, "tools"); t != nullptr && !(t->is_array() && t->empty())) {
    return FieldError("tools", "is not supported");
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const Json& body, OpenAiEndpoint endpoint, OpenAiRequest* out) {
  const Json* logprobs = Member(body, "logprobs");
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (logprobs == nullptr) return absl::OkStatus();
    absl::StatusOr<int64_t> n = IntegerField(*logprobs, "logprobs", 0, kMaxTopLogprobs);
    if (!n.ok()) return n.status();
    out->top_logprobs = static_cast<int>(*n);
    return absl::OkStatus();
  }
  bool wanted = false;
  if (logprobs != nullptr) {
    absl::StatusOr<bool> b = BoolField(*logprobs, "logprobs");
    if (!b.ok()) return b.status();
    wanted = *b;
  }
  int top = 0;
  if (const Json* t = Member(body, "top_logprobs"); t != nullptr) {
    absl::StatusOr<int64_t> n = IntegerField(*t, "top_logprobs", 0, kMaxTopLogprobs);
    if (!n.ok()) return n.status();
    if (!wanted && *n > 0) return FieldError("top_logprobs", "needs logprobs: true");
    top = static_cast<int>(*n);
  }
  if (wanted) out->top_logprobs = top;
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& body, v1::SamplingParams* s) {
  if (const Json* t = Member(body, "temperature"); t != nullptr) {
    absl::StatusOr<double> v = NumberField(*t, "temperature", 0, 2);
    if (!v.ok()) return v.status();
    s->set_temperature(static_cast<float>(*v));
  }
  if (const Json* t = Member(body, "top_p"); t != nullptr) {
    absl::StatusOr<double> v = NumberField(*t, "top_p", 0, 1);
    if (!v.ok()) return v.status();
    if (*v == 0) return FieldError("top_p", "must be > 0");
    s->set_top_p(static_cast<float>(*v));
  }
  if (const Json* t = Member(body, "top_k"); t != nullptr) {
    // vLLM spells "off" as -1 or 0.
    absl::StatusOr<int64_t> v = IntegerField(*t, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (!v.ok()) return v.status();
    s->set_top_k(*v < 0 ? 0 : static_cast<int32_t>(*v));
  }
  if (const Json* t = Member(body, "min_p"); t != nullptr) {
    absl::StatusOr<double> v = NumberField(*t, "min_p", 0, 1);
    if (!v.ok()) return v.status();
    s->set_min_p(static_cast<float>(*v));
  }
  if (const Json* t = Member(body, "repetition_penalty"); t != nullptr) {
    absl::StatusOr<double> v = NumberField(*t, "repetition_penalty", 0, 1e6);
    if (!v.ok()) return v.status();
    if (*v == 0) return FieldError("repetition_penalty", "must be > 0");
    s->set_repetition_penalty(static_cast<float>(*v));
  }
  if (const Json* t = Member(body, "seed"); t != nullptr) {
    // OpenAI's seed is a signed 64-bit integer; the engine's RNG takes its bits.
    absl::StatusOr<int64_t> v = IntegerField(*t, "seed", std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max());
    if (!v.ok()) return v.status();
    s->set_seed(static_cast<uint64_t>(*v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, OpenAiEndpoint endpoint) {
  const Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON");
  if (!json.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  SS_RETURN_IF_ERROR(RefuseUnsupported(json));

  OpenAiRequest out;
  out.endpoint = endpoint;
  v1::GenerateRequest& g = out.generate;
  if (const Json* model = Member(json, "model"); model != nullptr) {
    absl::StatusOr<std::string> m = StringField(*model, "model");
    if (!m.ok()) return m.status();
    out.model = *std::move(m);
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    const Json* prompt = Member(json, "prompt");
    if (prompt == nullptr) return FieldError("prompt", "is required");
    SS_RETURN_IF_ERROR(ParsePrompt(*prompt, &g));
    g.set_max_tokens(16);
  } else {
    const Json* messages = Member(json, "messages");
    if (messages == nullptr) return FieldError("messages", "is required");
    absl::StatusOr<std::vector<tokenizer::ChatMessage>> m = ParseMessages(*messages);
    if (!m.ok()) return m.status();
    out.messages = *std::move(m);
    if (const Json* a = Member(json, "add_generation_prompt"); a != nullptr) {
      absl::StatusOr<bool> b = BoolField(*a, "add_generation_prompt");
      if (!b.ok()) return b.status();
      out.add_generation_prompt = *b;
    }
  }
  // Chat clients send max_completion_tokens (the newer name); either is accepted.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (const Json* m = Member(json, name); m != nullptr) {
      absl::StatusOr<int64_t> v = IntegerField(*m, name, 1, std::numeric_limits<int32_t>::max());
      if (!v.ok()) return v.status();
      g.set_max_tokens(static_cast<int32_t>(*v));
    }
  }
  if (const Json* s = Member(json, "stream"); s != nullptr) {
    absl::StatusOr<bool> b = BoolField(*s, "stream");
    if (!b.ok()) return b.status();
    out.stream = *b;
  }
  if (const Json* o = Member(json, "stream_options"); o != nullptr) {
    if (!o->is_object()) return FieldError("stream_options", "must be an object");
    if (const Json* u = Member(*o, "include_usage"); u != nullptr) {
      absl::StatusOr<bool> b = BoolField(*u, "stream_options.include_usage");
      if (!b.ok()) return b.status();
      out.include_usage = *b;
    }
  }
  SS_RETURN_IF_ERROR(ParseLogprobs(json, endpoint, &out));
  SS_RETURN_IF_ERROR(ParseSampling(json, g.mutable_sampling()));
  if (const Json* stop = Member(json, "stop"); stop != nullptr) {
    SS_RETURN_IF_ERROR(ParseStop(*stop, &g));
  }
  if (const Json* ids = Member(json, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return FieldError("stop_token_ids", "must be an array of token ids");
    absl::StatusOr<std::vector<int32_t>> v = TokenIdsField(*ids, "stop_token_ids");
    if (!v.ok()) return v.status();
    g.mutable_stop_token_ids()->Assign(v->begin(), v->end());
  }
  if (const Json* e = Member(json, "ignore_eos"); e != nullptr) {
    absl::StatusOr<bool> b = BoolField(*e, "ignore_eos");
    if (!b.ok()) return b.status();
    g.set_ignore_eos(*b);
  }
  if (const Json* p = Member(json, "prefill_attention"); p != nullptr) {
    SS_RETURN_IF_ERROR(ParseMethodObject(*p, "prefill_attention", g.mutable_prefill_attention()));
  }
  if (const Json* d = Member(json, "decode_attention"); d != nullptr) {
    SS_RETURN_IF_ERROR(ParseMethodObject(*d, "decode_attention", g.mutable_decode_attention()));
  }
  if (const Json* s = Member(json, "speculation"); s != nullptr) {
    SS_RETURN_IF_ERROR(ParseMethodObject(*s, "speculation", g.mutable_speculation()));
  }
  return out;
}

}  // namespace sparseserve::router
