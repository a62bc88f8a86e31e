// The OpenAI API's request parsing and response writing (router/openai_request.h,
// router/openai_response.h): each field's mapping onto GenerateRequest, every refusal naming its
// field, and the JSON shapes of bodies, stream chunks and errors; the API key file and check
// (router/api_keys.h).
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api_keys.h"
#include "router/openai_request.h"
#include "router/openai_response.h"

namespace sparseserve::router {
namespace {

using Json = nlohmann::json;

OpenAiRequest Completion(const std::string& body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(body, OpenAiEndpoint::kCompletions);
  EXPECT_TRUE(r.ok()) << r.status() << " for " << body;
  return r.ok() ? *r : OpenAiRequest();
}

OpenAiRequest Chat(const std::string& body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(body, OpenAiEndpoint::kChatCompletions);
  EXPECT_TRUE(r.ok()) << r.status() << " for " << body;
  return r.ok() ? *r : OpenAiRequest();
}

// The refusal's message for a completions body (empty when it was accepted).
std::string Refusal(const std::string& body,
                    OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(body, endpoint);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(r.status().message());
}

TEST(OpenAiRequestTest, CompletionFieldsMapOntoGenerateRequest) {
  const OpenAiRequest r = Completion(
      R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
          "seed": -3, "stop": ["a", "", "b"], "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": 2, "top_k": 40,
          "min_p": 0.1, "repetition_penalty": 1.2, "ignore_eos": true, "stop_token_ids": [2],
          "user": "ignored", "unknown_extension": {"x": 1}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.generate.text(), "Once");
  EXPECT_EQ(r.generate.max_tokens(), 7);
  ASSERT_TRUE(r.generate.sampling().has_temperature());
  EXPECT_EQ(r.generate.sampling().temperature(), 0.0f);
  EXPECT_EQ(r.generate.sampling().top_p(), 0.5f);
  EXPECT_EQ(r.generate.sampling().seed(), static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.generate.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(r.generate.sampling().min_p(), 0.1f);
  EXPECT_FLOAT_EQ(r.generate.sampling().repetition_penalty(), 1.2f);
  ASSERT_EQ(r.generate.stop_size(), 2);  // empty stop strings are dropped
  EXPECT_EQ(r.generate.stop(1), "b");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.generate.ignore_eos());
  EXPECT_EQ(r.generate.stop_token_ids(0), 2);
}

TEST(OpenAiRequestTest, PromptShapesAndDefaults) {
  EXPECT_EQ(Completion(R"({"prompt": "x"})").generate.max_tokens(), 16);  // OpenAI's default
  EXPECT_FALSE(Completion(R"({"prompt": "x"})").generate.sampling().has_temperature());
  EXPECT_EQ(Completion(R"({"prompt": "x"})").top_logprobs, -1);
  EXPECT_EQ(Completion(R"({"prompt": ["only"]})").generate.text(), "only");
  const OpenAiRequest ids = Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.generate.token_ids().ids_size(), 3);
  EXPECT_EQ(ids.generate.token_ids().ids(2), 3);
  EXPECT_EQ(Completion(R"({"prompt": [[4, 5]]})").generate.token_ids().ids_size(), 2);
  EXPECT_EQ(Completion(R"({"prompt": "x", "n": 1, "echo": false, "best_of": 1})").generate.text(),
            "x");
  EXPECT_EQ(
      Completion(R"({"prompt": "x", "presence_penalty": 0, "logit_bias": {}})").generate.text(),
      "x");
}

TEST(OpenAiRequestTest, RefusalsNameTheirField) {
  EXPECT_EQ(Refusal("{bad"), "body: not valid JSON");
  EXPECT_EQ(Refusal("[1]"), "body: must be a JSON object");
  EXPECT_EQ(Refusal("{}"), "prompt: is required");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": 3})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]"},
      {R"({"prompt": "x", "n": 2})", "n"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "suffix": "s"})", "suffix"},
      {R"({"prompt": "x", "logit_bias": {"5": 1}})", "logit_bias"},
      {R"({"prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty"},
      {R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt[1]"},
      {R"({"prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "seed": "1"})", "seed"},
      {R"({"prompt": "x", "prefill_attention": {"method": "minference", "bogus": 1}})",
       "prefill_attention"},
      {R"({"prompt": "x", "decode_attention": {"tokenselect_k": "many"}})", "decode_attention"},
      {R"({"prompt": "x", "speculation": 1})", "speculation"},
  };
  for (const auto& [body, field] : cases) {
    const std::string message = Refusal(body);
    EXPECT_EQ(message.rfind(field, 0), 0u) << body << " -> '" << message << "'";
  }
}

// A body nested far deeper than any field allows is refused without walking it on the stack
// (a 100,000-deep array would otherwise overflow a server thread's stack).
TEST(OpenAiRequestTest, DeepNestingIsRefusedNotRecursed) {
  EXPECT_EQ(Refusal(R"({"prompt": [[[1]]]})").rfind("prompt", 0), 0u);
  const int depth = 100000;
  const std::string deep = std::string(depth, '[') + "1" + std::string(depth, ']');
  EXPECT_EQ(Refusal(R"({"prompt": )" + deep + "}").rfind("prompt", 0), 0u);
  EXPECT_EQ(Refusal(R"({"prompt": "x", "speculation": {"method": )" + deep + "}}")
                .rfind("speculation: nests too deep", 0),
            0u);
}

TEST(ApiKeysTest, FileRulesAndConstantTimeCheck) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  };
  absl::StatusOr<std::vector<std::string>> keys =
      LoadApiKeys(write("keys", "\xEF\xBB\xBF# comment\n  alpha-1 \n\nbeta_2\r\n"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{"alpha-1", "beta_2"}));
  EXPECT_TRUE(AuthorizationAccepted("Bearer beta_2", *keys));
  EXPECT_FALSE(AuthorizationAccepted("Bearer beta_", *keys));
  EXPECT_FALSE(AuthorizationAccepted("Bearer beta_23", *keys));
  EXPECT_FALSE(AuthorizationAccepted("beta_2", *keys));
  EXPECT_FALSE(AuthorizationAccepted("", *keys));
  EXPECT_TRUE(AuthorizationAccepted("", {}));  // no keys: no authentication
  EXPECT_EQ(LoadApiKeys(write("empty", "# none\n\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status bad = LoadApiKeys(write("bad", "good\nk\xC3\xA9y\n")).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("line 2"), absl::string_view::npos);
  EXPECT_EQ(bad.message().find("k\xC3\xA9y"), absl::string_view::npos);  // never the key
  EXPECT_EQ(LoadApiKeys(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(OpenAiRequestTest, EngineMethodsAreExtraFieldsInTheirProtoJson) {
  const OpenAiRequest r = Completion(
      R"({"prompt": "x", "prefill_attention": {"method": "minference",
          "sparse_prefill_threshold": 64}, "decode_attention": {"method": "tokenselect",
          "tokenselect_k": 32}, "speculation": {"method": "lookahead", "max_draft": 4}})");
  EXPECT_EQ(r.generate.prefill_attention().method(), "minference");
  EXPECT_EQ(r.generate.prefill_attention().sparse_prefill_threshold(), 64);
  EXPECT_EQ(r.generate.decode_attention().tokenselect_k(), 32);
  EXPECT_EQ(r.generate.speculation().method(), "lookahead");
  EXPECT_EQ(r.generate.speculation().max_draft(), 4);
}

TEST(OpenAiRequestTest, ChatMessagesAndLogprobs) {
  const OpenAiRequest r = Chat(
      R"({"messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                      {"type": "text", "text": "there"}]},
          {"role": "assistant", "content": null}],
          "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 9})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.generate.max_tokens(), 9);
  EXPECT_FALSE(r.generate.has_text());  // rendered by the caller
  EXPECT_EQ(
      Chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").top_logprobs,
      0);
  EXPECT_EQ(Chat(R"({"messages": [{"role": "user", "content": "x"}]})").generate.max_tokens(), 0);
  constexpr auto kChat = OpenAiEndpoint::kChatCompletions;
  EXPECT_EQ(Refusal("{}", kChat), "messages: is required");
  EXPECT_EQ(Refusal(R"({"messages": []})", kChat).rfind("messages", 0), 0u);
  EXPECT_EQ(Refusal(R"({"messages": [{"content": "x"}]})", kChat).rfind("messages[0]", 0), 0u);
  EXPECT_EQ(
      Refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", kChat)
          .rfind("messages[0].content[0]", 0),
      0u);
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", kChat)
                .rfind("top_logprobs", 0),
            0u);
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", kChat)
                .rfind("logprobs", 0),
            0u);
}

TEST(OpenAiResponseTest, ErrorsCarryTheirHttpStatus) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);
  const Json body = Json::parse(OpenAiErrorBody(absl::ResourceExhaustedError("queue full")));
  EXPECT_EQ(body["error"]["message"], "queue full");
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["code"], 429);
}

v1::GenerateResponse Message(const std::string& text, const std::vector<int32_t>& ids,
                             v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED) {
  v1::GenerateResponse m;
  m.set_text(text);
  for (int32_t id : ids) {
    m.add_token_ids(id);
    v1::TokenLogprobs* lp = m.add_logprobs();
    lp->set_logprob(-0.5f * static_cast<float>(id));
    lp->add_top_ids(id);
    lp->add_top_logprobs(-0.5f * static_cast<float>(id));
    lp->add_top_ids(id + 1);
    lp->add_top_logprobs(-2.0f);
  }
  if (finish != v1::FINISH_REASON_UNSPECIFIED) {
    m.set_finish_reason(finish);
    m.mutable_usage()->set_prompt_tokens(4);
    m.mutable_usage()->set_completion_tokens(3);
    m.mutable_usage()->set_cached_prompt_tokens(2);
  }
  return m;
}

// Token spelling for logprobs without a real vocabulary: ids as letters.
class LetterTokenizer : public tokenizer::Tokenizer {
 public:
  LetterTokenizer() : Tokenizer({.vocab_size = 26}) {}
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view, bool) const override {
    return std::vector<int32_t>();
  }
  std::string TokenBytes(int32_t id, bool) const override {
    return std::string(1, static_cast<char>('a' + id));
  }
};

TEST(OpenAiResponseTest, CompletionBodyWithLogprobs) {
  OpenAiRequest request = Completion(R"({"prompt": "x", "logprobs": 1})");
  const LetterTokenizer tokenizer;
  OpenAiResponseBuilder builder(request, "cmpl-1", "m", 100, &tokenizer);
  builder.Add(Message("bc", {1, 2}));
  builder.Add(Message("d", {3}, v1::FINISH_REASON_LENGTH));
  const Json body = Json::parse(builder.Body());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["created"], 100);
  EXPECT_EQ(body["choices"][0]["text"], "bcd");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  const Json& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json({"b", "c", "d"}));
  EXPECT_EQ(lp["text_offset"], Json({0, 1, 2}));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -1.5f);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);  // logprobs: 1 alternative of the 2 sent
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["b"].get<float>(), -0.5f);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(body["usage"]["total_tokens"], 7);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(OpenAiResponseTest, ChatStreamChunks) {
  OpenAiRequest request = Chat(
      R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2})");
  const LetterTokenizer tokenizer;
  OpenAiResponseBuilder builder(request, "chatcmpl-1", "m", 5, &tokenizer);
  std::vector<Json> chunks;
  for (const v1::GenerateResponse& m :
       {Message("b", {1}), Message("", {}, v1::FINISH_REASON_STOP)}) {
    for (const std::string& c : builder.StreamChunks(m)) chunks.push_back(Json::parse(c));
  }
  ASSERT_EQ(chunks.size(), 4u);  // role, content, finish, usage
  for (const Json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_TRUE(c.contains("usage"));
  }
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "b");
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
  const Json& content = chunks[1]["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(content["token"], "b");
  EXPECT_EQ(content["bytes"], Json({98}));
  EXPECT_EQ(content["top_logprobs"].size(), 2u);
  EXPECT_EQ(content["top_logprobs"][1]["token"], "c");
  EXPECT_EQ(chunks[2]["choices"][0]["delta"], Json::object());
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chunks[2]["usage"].is_null());
  EXPECT_TRUE(chunks[3]["choices"].empty());
  EXPECT_EQ(chunks[3]["usage"]["completion_tokens"], 3);
}

TEST(OpenAiResponseTest, CompletionStreamWithoutUsageHasNoUsageField) {
  OpenAiRequest request = Completion(R"({"prompt": "x", "stream": true})");
  const LetterTokenizer tokenizer;
  OpenAiResponseBuilder builder(request, "cmpl-2", "m", 5, &tokenizer);
  const std::vector<std::string> a = builder.StreamChunks(Message("bc", {1, 2}));
  const std::vector<std::string> b =
      builder.StreamChunks(Message("", {}, v1::FINISH_REASON_ABORTED));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  const Json first = Json::parse(a[0]);
  EXPECT_EQ(first["choices"][0]["text"], "bc");
  EXPECT_TRUE(first["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  EXPECT_EQ(Json::parse(b[0])["choices"][0]["finish_reason"], "abort");
}

}  // namespace
}  // namespace sparseserve::router
