// Routing policy (cost, prefix overlap, conditional disaggregation), stop strings and request
// preparation: the router's pure parts, tested without gRPC.
#include <cstdint>
#include <string>
#include <vector>

#include "common/engine/model_source.h"
#include "common/kv/block_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/output_text.h"
#include "router/request_prep.h"
#include "router/routing_policy.h"
#include "router/stop_strings.h"

namespace sparseserve::router {
namespace {

using ::testing::HasSubstr;

DecodeCandidate Healthy(int free_blocks, int total_blocks, int overlap, int running = 0) {
  return {.healthy = true,
          .block_tokens = 16,
          .num_running = running,
          .num_free_blocks = free_blocks,
          .num_total_blocks = total_blocks,
          .overlap_blocks = overlap};
}

TEST(RoutingPolicyTest, CountsOnlyLeadingCachedBlocks) {
  std::vector<int32_t> prompt(16 * 4);
  for (int i = 0; i < static_cast<int>(prompt.size()); ++i) prompt[i] = i;
  const std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, 16);
  ASSERT_EQ(hashes.size(), 4u);
  EXPECT_EQ(CountCachedPrefixBlocks(hashes, {hashes[0], hashes[1]}), 2);
  // Block 2 cached without block 1 is useless: the chain breaks at block 1.
  EXPECT_EQ(CountCachedPrefixBlocks(hashes, {hashes[0], hashes[2], hashes[3]}), 1);
  EXPECT_EQ(CountCachedPrefixBlocks(hashes, {hashes[1]}), 0);
  EXPECT_EQ(CountCachedPrefixBlocks(hashes, {hashes[0], hashes[1], hashes[2], hashes[3]}), 4);
}

TEST(RoutingPolicyTest, CostIsWeightedUncachedBlocksPlusActiveBlocks) {
  const RoutingConfig config{.uncached_block_weight = 2.0};
  // 40 tokens = 3 blocks (the partial tail counts); 1 cached; 100 - 70 = 30 active.
  EXPECT_DOUBLE_EQ(DecodeCost(Healthy(70, 100, 1), 40, config), 2.0 * 2 + 30);
  EXPECT_EQ(NumPromptBlocks(32, 16), 2);
  EXPECT_EQ(NumPromptBlocks(33, 16), 3);
}

TEST(RoutingPolicyTest, PrefersPrefixOverlapOverSlightlyLowerLoad) {
  const RoutingConfig config;
  // 640 tokens = 40 blocks. Worker 0: nothing cached, 10 active -> 50. Worker 1: 30 cached,
  // 20 active -> 10 + 20 = 30.
  std::vector<DecodeCandidate> c = {Healthy(90, 100, 0), Healthy(80, 100, 30)};
  EXPECT_EQ(ChooseDecodeWorker(c, 640, config), 1);
  // A heavily loaded worker loses despite its cache: 10 + 60 = 70 > 50.
  c[1] = Healthy(40, 100, 30);
  EXPECT_EQ(ChooseDecodeWorker(c, 640, config), 0);
}

TEST(RoutingPolicyTest, TiesGoToFewerRunningThenLowestIndex) {
  const RoutingConfig config;
  std::vector<DecodeCandidate> c = {Healthy(50, 100, 0, 3), Healthy(50, 100, 0, 1),
                                    Healthy(50, 100, 0, 1)};
  EXPECT_EQ(ChooseDecodeWorker(c, 64, config), 1);
  c[1].num_running = 3;
  c[2].num_running = 3;
  EXPECT_EQ(ChooseDecodeWorker(c, 64, config), 0);
}

TEST(RoutingPolicyTest, SkipsUnhealthyWorkers) {
  const RoutingConfig config;
  std::vector<DecodeCandidate> c = {Healthy(100, 100, 4), Healthy(10, 100, 0)};
  c[0].healthy = false;
  EXPECT_EQ(ChooseDecodeWorker(c, 64, config), 1);
  c[1].healthy = false;
  EXPECT_FALSE(ChooseDecodeWorker(c, 64, config).has_value());
  EXPECT_FALSE(Route(c, {}, 64, config).has_value());
}

TEST(RoutingPolicyTest, DisaggregatesOnlyLongUncachedPromptsWithAPrefillWorker) {
  const RoutingConfig config{.disagg_threshold_tokens = 1024};
  const std::vector<PrefillCandidate> prefill = {{.healthy = true, .num_running = 2},
                                                 {.healthy = true, .num_running = 0}};
  std::vector<DecodeCandidate> decode = {Healthy(100, 100, 0)};
  // 1024 uncached tokens: at the threshold -> disaggregated, on the idler prefill worker.
  std::optional<RouteDecision> d = Route(decode, prefill, 1024, config);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->disaggregate);
  EXPECT_EQ(d->prefill_idx, 1);
  // 1023 tokens: local.
  d = Route(decode, prefill, 1023, config);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->disaggregate);
  // 2000 tokens of which 64 blocks (1024 tokens) are cached: 976 uncached -> local.
  decode[0].overlap_blocks = 64;
  d = Route(decode, prefill, 2000, config);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->disaggregate);
  EXPECT_EQ(d->overlap_blocks, 64);
  // Long and uncached, but no healthy prefill worker: local.
  decode[0].overlap_blocks = 0;
  const std::vector<PrefillCandidate> down = {{.healthy = false}};
  d = Route(decode, down, 4096, config);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->disaggregate);
  EXPECT_EQ(d->decode_idx, 0);
}

TEST(StopStringMatcherTest, CutsTextAtTheStopStringAcrossPushes) {
  StopStringMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.Push("hello E"), "hello ");  // "E" may start "END"
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("Dtrailing"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, ReleasesHeldTextThatDoesNotBecomeAStop) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("EN"), "");
  EXPECT_EQ(m.Push("x"), "ENx");
  EXPECT_EQ(m.Push("abc EN"), "abc ");
  EXPECT_EQ(m.Flush(), "EN");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, EarliestStopWinsAndEmptyStopsAreIgnored) {
  StopStringMatcher m({"", "cd", "bcde"});
  EXPECT_EQ(m.Push("abcdef"), "a");
  EXPECT_TRUE(m.stopped());
  StopStringMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

class RouterTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<engine::ModelSource> source =
        engine::OpenModelSource(SPARSESERVE_TEST_DATA_DIR "/tiny_llama");
    ASSERT_TRUE(source.ok()) << source.status();
    tokenizer_ = std::move(source->tokenizer);
  }
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

TEST_F(RouterTokenizerTest, OutputTextKeepsTheLeadingSpaceAndStopsOnAStopString) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode("the café is open", false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  OutputText all(*tokenizer_, {});
  std::string text;
  for (int32_t id : *ids) text += all.Push(id);
  text += all.Flush();
  EXPECT_EQ(text, " the café is open");

  OutputText stopped(*tokenizer_, {"is"});
  text.clear();
  for (int32_t id : *ids) text += stopped.Push(id);
  text += stopped.Flush();
  EXPECT_TRUE(stopped.stopped());
  EXPECT_EQ(text, " the café ");
}

TEST_F(RouterTokenizerTest, PrepareRequestTokenizesAndAppliesDefaults) {
  v1::GenerateRequest request;
  request.set_text("Once upon a time");
  const PrepareLimits limits{.vocab_size = 511, .max_context = 512, .default_max_tokens = 256};
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(request, *tokenizer_, limits);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->prompt_ids, *tokenizer_->Encode("Once upon a time", true));
  EXPECT_EQ(prepared->prompt_ids.front(), tokenizer_->bos_id());
  EXPECT_EQ(prepared->max_tokens, 256);
  EXPECT_EQ(prepared->request_id.rfind("req-", 0), 0u);
  EXPECT_EQ(prepared->request_id.size(), 20u);
}

TEST_F(RouterTokenizerTest, PrepareRequestRejectsMalformedRequests) {
  const PrepareLimits limits{.vocab_size = 511, .max_context = 512, .default_max_tokens = 256};
  auto code = [&](const v1::GenerateRequest& r) {
    return PrepareRequest(r, *tokenizer_, limits).status().code();
  };
  v1::GenerateRequest r;
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);  // no prompt
  r.set_text("");
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r.mutable_token_ids()->add_ids(511);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);  // id outside the vocabulary
  r.mutable_token_ids()->set_ids(0, 5);
  EXPECT_TRUE(PrepareRequest(r, *tokenizer_, limits).ok());
  for (int i = 1; i < 512; ++i) r.mutable_token_ids()->add_ids(5);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);  // 512 tokens = the whole context
  r.mutable_token_ids()->mutable_ids()->Truncate(511);
  EXPECT_TRUE(PrepareRequest(r, *tokenizer_, limits).ok());
  r.set_max_tokens(-1);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r.set_max_tokens(4);
  r.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r.mutable_sampling()->set_top_p(0.0f);  // 0 means off
  r.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r.mutable_sampling()->set_temperature(0.0f);  // greedy
  EXPECT_TRUE(PrepareRequest(r, *tokenizer_, limits).ok());
  r.add_stop_token_ids(-3);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
}

TEST_F(RouterTokenizerTest, PrepareRequestChecksOptionsAndForwardsThemAsGiven) {
  PrepareLimits limits{.vocab_size = 511, .max_context = 512, .default_max_tokens = 256};
  v1::GenerateRequest r;
  r.set_text("Once upon a time");
  auto status = [&] { return PrepareRequest(r, *tokenizer_, limits).status(); };

  r.mutable_decode_attention()->set_method("sparse");
  EXPECT_EQ(status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status().message(), HasSubstr("decode_attention.method"));
  r.mutable_decode_attention()->set_method("tokenselect");  // workers' backends decide
  EXPECT_TRUE(status().ok()) << status();
  r.mutable_decode_attention()->set_tokenselect_k(0);
  EXPECT_EQ(status().code(), absl::StatusCode::kInvalidArgument);
  r.mutable_decode_attention()->clear_tokenselect_k();
  r.mutable_decode_attention()->set_method("sliding-window");
  r.mutable_decode_attention()->set_window(0);
  EXPECT_EQ(status().code(), absl::StatusCode::kInvalidArgument);

  // The router's defaults fill what the request leaves unset, for the check only: the request
  // goes on as given, and each worker fills it from its own flags.
  r.mutable_decode_attention()->clear_window();
  EXPECT_EQ(status().code(), absl::StatusCode::kInvalidArgument);  // default window 0
  limits.request_defaults.decode.window = 64;
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(r, *tokenizer_, limits);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->decode_attention.method(), "sliding-window");
  EXPECT_FALSE(prepared->decode_attention.has_window());
  EXPECT_FALSE(prepared->prefill_attention.has_window());
  EXPECT_TRUE(prepared->prefill_attention.method().empty());

  // A speculation parameter out of range is refused by the router already.
  r.mutable_decode_attention()->set_method("dense");
  r.mutable_speculation()->set_method("kangaroo");
  r.mutable_speculation()->set_kangaroo_eta(1.5f);
  EXPECT_EQ(status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status().message(), HasSubstr("kangaroo eta"));
}

}  // namespace
}  // namespace sparseserve::router
