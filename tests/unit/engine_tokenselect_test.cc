// TokenSelect decode through ModelRunner on the real stories260K model (CPU reference): a budget
// covering the context equals dense token for token, and a small one equals dense until the
// context outgrows it; a step batching dense and TokenSelect sequences equals each sequence run
// alone; the chunked-prefill variant selects per chunk and keeps its chunks (and output) on
// prefix-cache hits; the runner refuses k above its state capacity, and per-KV-head selections
// unless sized for them (which then also equal dense at a covering budget and keep most greedy
// tokens at a small one); and on 400 teacher-forced
// tokens with a budget of 16 + 64 + 16 the agreement with dense and the selection-cache hit rate
// for θ in {0.5, 0.7, 0.9} are printed (stories260K is trained, so the figures mean something).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/core/thread_pool.h"
#include "common/engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

kernels::AttentionPattern TokenSelect(int k, int initial, int local, float theta,
                                      bool per_kv_head = false) {
  kernels::AttentionPattern p;
  p.kind = kernels::AttentionMethodKind::kTokenSelect;
  p.tokenselect = {k, initial, local, theta, per_kv_head};
  return p;
}

kernels::SamplingBatch Greedy(int rows) {
  kernels::SamplingBatch b;
  b.rows.resize(rows);  // temperature 0
  return b;
}

class TokenSelectRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    MakeRunner(/*per_kv_head=*/false);
  }

  void MakeRunner(bool per_kv_head) {
    runner_.reset();
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.tokenselect_max_k = 1024;
    options.tokenselect_per_kv_head = per_kv_head;
    options.max_sequences = 8;
    auto runner = ModelRunner::Create(source_, &backend_, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
  }

  struct Run {
    std::vector<int32_t> picked;  // the greedy token after each fed token
    SequenceKv seq;               // released; counters kept
  };

  // Prefills `prompt` densely, then feeds `feed` one decode step at a time under `pattern`.
  Run TeacherForced(const std::vector<int32_t>& prompt, const std::vector<int32_t>& feed,
                    const kernels::AttentionPattern& pattern) {
    Run run;
    auto first = runner_->PrefillSampled(prompt, run.seq, Greedy(1));
    EXPECT_TRUE(first.ok()) << first.status();
    for (int32_t t : feed) {
      StepRows rows;
      rows.seq = &run.seq;
      rows.tokens = {t};
      rows.pattern = pattern;
      auto next = runner_->Step(absl::MakeConstSpan(&rows, 1), Greedy(1));
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      run.picked.push_back(next->front());
    }
    const SequenceKv counters = run.seq;
    runner_->Release(run.seq);
    run.seq.decode_computed_pairs = counters.decode_computed_pairs;
    run.seq.decode_causal_pairs = counters.decode_causal_pairs;
    run.seq.selection_cache_hits = counters.selection_cache_hits;
    run.seq.selection_cache_queries = counters.selection_cache_queries;
    return run;
  }

  // BOS and the model's own dense greedy story of `n` tokens: natural text to teacher-force.
  std::vector<int32_t> Story(int n) {
    std::vector<int32_t> story = {1};
    SequenceKv seq;
    auto first = runner_->PrefillSampled(story, seq, Greedy(1));
    EXPECT_TRUE(first.ok()) << first.status();
    story.push_back(*first);
    while (static_cast<int>(story.size()) < n) {
      StepRows rows;
      rows.seq = &seq;
      rows.tokens = {story.back()};
      auto next = runner_->Step(absl::MakeConstSpan(&rows, 1), Greedy(1));
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      story.push_back(next->front());
    }
    runner_->Release(seq);
    return story;
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelSource source_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_F(TokenSelectRunnerTest, CoveringBudgetIsDenseAndASmallOneIsDenseUntilOutgrown) {
  const std::vector<int32_t> story = Story(420);
  const std::vector<int32_t> prompt(story.begin(), story.begin() + 8);
  const std::vector<int32_t> feed(story.begin() + 8, story.end() - 1);
  const Run dense = TeacherForced(prompt, feed, {});
  const Run covering = TeacherForced(prompt, feed, TokenSelect(1024, 16, 16, 0.9f));
  EXPECT_EQ(covering.picked, dense.picked);
  EXPECT_EQ(covering.seq.selection_cache_queries, 0);
  EXPECT_DOUBLE_EQ(covering.seq.decode_attention_density(), 1.0);
  // 16 + 64 + 16: a step with cached prefix P selects once P - 16 - 16 > 64, i.e. from P = 97
  // (the step feeding story[97]); every token picked before is dense's.
  const Run small = TeacherForced(prompt, feed, TokenSelect(64, 16, 16, 0.9f));
  ASSERT_EQ(small.picked.size(), dense.picked.size());
  const size_t first_sparse = 97 - prompt.size();  // index into feed of the first sparse step
  for (size_t i = 0; i < first_sparse; ++i) ASSERT_EQ(small.picked[i], dense.picked[i]) << i;
  EXPECT_GT(small.seq.selection_cache_queries, 0);
  EXPECT_LT(small.seq.decode_attention_density(), 0.6);
}

TEST_F(TokenSelectRunnerTest, AgreementWithDenseAndHitRatesOnStories) {
  const std::vector<int32_t> story = Story(420);
  const std::vector<int32_t> prompt(story.begin(), story.begin() + 8);
  const std::vector<int32_t> feed(story.begin() + 8, story.end() - 1);
  const Run dense = TeacherForced(prompt, feed, {});
  for (float theta : {0.5f, 0.7f, 0.9f}) {
    const Run sparse = TeacherForced(prompt, feed, TokenSelect(64, 16, 16, theta));
    ASSERT_EQ(sparse.picked.size(), dense.picked.size());
    int agree = 0;
    for (size_t i = 0; i < dense.picked.size(); ++i) agree += sparse.picked[i] == dense.picked[i];
    const double agreement = static_cast<double>(agree) / static_cast<double>(dense.picked.size());
    const double hit_rate = sparse.seq.selection_cache_hits / sparse.seq.selection_cache_queries;
    std::printf(
        "stories260K TokenSelect 16+64+16 over %zu tokens, theta %.1f: token agreement with dense "
        "%.3f, selection-cache hit rate %.3f, decode density %.3f\n",
        story.size(), theta, agreement, hit_rate, sparse.seq.decode_attention_density());
    // A trained model keeps most greedy tokens under a budget of a quarter of its context.
    EXPECT_GT(agreement, 0.9) << theta;
    EXPECT_GT(sparse.seq.selection_cache_queries, 0);
    EXPECT_LT(sparse.seq.decode_attention_density(), 0.6);
  }
}

TEST_F(TokenSelectRunnerTest, MixedBatchEqualsEachSequenceAlone) {
  const std::vector<int32_t> story = Story(300);
  // Sequence 0 dense, 1 TokenSelect that never outgrows its budget, 2 and 3 TokenSelect that do
  // (3 with a cache that always reuses a fresh-enough selection).
  const std::vector<kernels::AttentionPattern> patterns = {{},
                                                           TokenSelect(512, 16, 16, 0.9f),
                                                           TokenSelect(32, 8, 16, 0.9f),
                                                           TokenSelect(32, 8, 16, -1.0f)};
  const std::vector<size_t> prompt_len = {20, 40, 60, 80};
  const int steps = 150;
  std::vector<std::vector<int32_t>> alone(patterns.size());
  for (size_t s = 0; s < patterns.size(); ++s) {
    const std::vector<int32_t> prompt(story.begin(), story.begin() + prompt_len[s]);
    const std::vector<int32_t> feed(story.begin() + prompt_len[s],
                                    story.begin() + prompt_len[s] + steps);
    alone[s] = TeacherForced(prompt, feed, patterns[s]).picked;
  }
  std::vector<SequenceKv> seqs(patterns.size());
  for (size_t s = 0; s < patterns.size(); ++s) {
    const std::vector<int32_t> prompt(story.begin(), story.begin() + prompt_len[s]);
    ASSERT_TRUE(runner_->PrefillSampled(prompt, seqs[s], Greedy(1)).ok());
  }
  std::vector<std::vector<int32_t>> batched(patterns.size());
  for (int i = 0; i < steps; ++i) {
    // Rows in a rotating order: a sequence's state follows it, not its row.
    std::vector<StepRows> rows(patterns.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t s = (r + i) % rows.size();
      rows[r].seq = &seqs[s];
      rows[r].tokens = {story[prompt_len[s] + i]};
      rows[r].pattern = patterns[s];
    }
    auto next = runner_->Step(rows, Greedy(static_cast<int>(rows.size())));
    ASSERT_TRUE(next.ok()) << next.status();
    for (size_t r = 0; r < rows.size(); ++r) batched[(r + i) % rows.size()].push_back((*next)[r]);
  }
  for (size_t s = 0; s < patterns.size(); ++s) EXPECT_EQ(batched[s], alone[s]) << "sequence " << s;
  EXPECT_GT(seqs[3].selection_cache_hits, 0);
  EXPECT_EQ(seqs[1].selection_cache_queries, 0);
  for (SequenceKv& seq : seqs) runner_->Release(seq);
}

TEST_F(TokenSelectRunnerTest, ChunkedPrefillSelectsPerChunkAndKeepsChunksOnPrefixHits) {
  ModelRunnerOptions options;
  options.block_tokens = 16;
  options.prefill_chunk_tokens = 64;
  options.tokenselect_max_k = 64;
  options.max_sequences = 4;
  auto made = ModelRunner::Create(source_, &backend_, options);
  ASSERT_TRUE(made.ok()) << made.status();
  ModelRunner& runner = **made;
  const std::vector<int32_t> story = Story(300);
  AttentionChoice choice;
  choice.method = AttentionMethod::kTokenSelect;
  choice.tokenselect_k = 32;
  choice.tokenselect_initial = 8;
  choice.tokenselect_local = 16;
  absl::StatusOr<kernels::AttentionPattern> pattern =
      runner.PrefillPattern(choice, static_cast<int64_t>(story.size()));
  ASSERT_TRUE(pattern.ok()) << pattern.status();
  auto prefill = [&](ModelRunner& r, const kernels::AttentionPattern& p, SequenceKv* seq) {
    absl::StatusOr<Tensor> logits = r.Prefill(story, *seq, nullptr, p);
    EXPECT_TRUE(logits.ok()) << logits.status();
    return logits.ok() ? *logits : Tensor();
  };
  SequenceKv dense_seq, first, second;
  const Tensor dense = prefill(*runner_, {}, &dense_seq);  // the other runner: its own cache
  runner_->Release(dense_seq);
  const Tensor cold = prefill(runner, *pattern, &first);
  EXPECT_EQ(first.num_cached_prompt_tokens, 0);
  EXPECT_LT(first.prefill_attention_density(), 0.7);
  EXPECT_GT(first.selection_cache_queries, 0);
  EXPECT_EQ(first.decode_causal_pairs, 0);  // prompt chunks count as prefill work
  runner.Release(first);
  // The same prompt again: 18 full blocks (288 tokens) are cached, cut to 4 whole chunks (256),
  // so every chunk selects as in the cold run, and the logits are the same bit for bit.
  const Tensor warm = prefill(runner, *pattern, &second);
  EXPECT_EQ(second.num_cached_prompt_tokens, 256);
  ASSERT_EQ(warm.numel(), cold.numel());
  EXPECT_EQ(std::memcmp(warm.raw_data(), cold.raw_data(), cold.numel() * sizeof(float)), 0);
  runner.Release(second);
  // A sparse prefill still predicts what dense does on a trained model.
  const float* a = cold.data<float>();
  const float* b = dense.data<float>();
  EXPECT_EQ(std::max_element(a, a + cold.numel()) - a, std::max_element(b, b + dense.numel()) - b);
}

TEST_F(TokenSelectRunnerTest, RefusesKAboveTheStateCapacity) {
  AttentionChoice choice;
  choice.method = AttentionMethod::kTokenSelect;
  choice.tokenselect_k = 1024;
  EXPECT_TRUE(runner_->DecodePattern(choice).ok());
  choice.tokenselect_k = 1025;
  absl::StatusOr<kernels::AttentionPattern> refused = runner_->DecodePattern(choice);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--tokenselect-k"), std::string::npos);
}

TEST_F(TokenSelectRunnerTest, PerKvHeadSelectionsNeedTheirStateAndKeepDenseTokens) {
  ASSERT_GT(runner_->config().num_kv_heads, 1);
  AttentionChoice choice;
  choice.method = AttentionMethod::kTokenSelect;
  choice.tokenselect_k = 64;
  choice.tokenselect_per_kv_head = true;
  absl::StatusOr<kernels::AttentionPattern> refused = runner_->DecodePattern(choice);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--tokenselect-per-kv-head"), std::string::npos);

  const std::vector<int32_t> story = Story(420);
  const std::vector<int32_t> prompt(story.begin(), story.begin() + 8);
  const std::vector<int32_t> feed(story.begin() + 8, story.end() - 1);
  const Run dense = TeacherForced(prompt, feed, {});
  const Run per_layer = TeacherForced(prompt, feed, TokenSelect(64, 16, 16, 0.9f));
  MakeRunner(/*per_kv_head=*/true);
  ASSERT_TRUE(runner_->DecodePattern(choice).ok());
  const Run covering = TeacherForced(prompt, feed, TokenSelect(1024, 16, 16, 0.9f, true));
  EXPECT_EQ(covering.picked, dense.picked);
  const Run small = TeacherForced(prompt, feed, TokenSelect(64, 16, 16, 0.9f, true));
  ASSERT_EQ(small.picked.size(), dense.picked.size());
  const size_t first_sparse = 97 - prompt.size();
  for (size_t i = 0; i < first_sparse; ++i) ASSERT_EQ(small.picked[i], dense.picked[i]) << i;
  int agree = 0, agree_layer = 0;
  for (size_t i = 0; i < dense.picked.size(); ++i) {
    agree += small.picked[i] == dense.picked[i];
    agree_layer += per_layer.picked[i] == dense.picked[i];
  }
  const double n = static_cast<double>(dense.picked.size());
  std::printf(
      "stories260K TokenSelect 16+64+16 over %zu tokens, theta 0.9: token agreement with dense "
      "%.3f per KV head, %.3f per layer; decode density %.3f\n",
      story.size(), agree / n, agree_layer / n, small.seq.decode_attention_density());
  EXPECT_GT(agree / n, 0.9);
  EXPECT_LT(small.seq.decode_attention_density(), 0.6);
  // The per-layer path still works on a runner sized for lists per KV head.
  const Run per_layer_again = TeacherForced(prompt, feed, TokenSelect(64, 16, 16, 0.9f));
  EXPECT_EQ(per_layer_again.picked, per_layer.picked);
}

}  // namespace
}  // namespace sparseserve::engine
