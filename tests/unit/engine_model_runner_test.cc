// ModelRunner on the real stories260K model: chunked prefill == one-shot prefill (paged KV
// across block boundaries), prefix-cache reuse gives the same logits, decode == prefill of the
// longer prompt, sampling on the backend == the host sampler on decode logits, and pool
// exhaustion is an error, not a crash.
#include <algorithm>
#include "common/engine/model_runner.h"

#include <fstream>

#include "common/core/thread_pool.h"
#include "common/engine/minference_config.h"
#include "common/sampling/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

class ModelRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    // A prompt of 150 tokens: two full 64-token blocks and a partial third.
    for (int i = 0; i < 150; ++i) prompt_.push_back(3 + (i * 37) % 500);
  }

  std::unique_ptr<ModelRunner> MakeRunner(ModelRunnerOptions options) {
    auto runner = ModelRunner::Create(source_, &backend_, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return runner.ok() ? std::move(*runner) : nullptr;
  }

  static void ExpectClose(const Tensor& a, const Tensor& b, float tol) {
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "logit " << i;
    }
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelSource source_;
  std::vector<int32_t> prompt_;
};

TEST_F(ModelRunnerTest, ChunkedPrefillEqualsOneShot) {
  ModelRunnerOptions one_shot;
  one_shot.enable_prefix_cache = false;
  ModelRunnerOptions chunked = one_shot;
  chunked.prefill_chunk_tokens = 23;  // chunks straddle block boundaries
  chunked.block_tokens = 16;
  auto a = MakeRunner(one_shot);
  auto b = MakeRunner(chunked);
  SequenceKv sa, sb;
  auto la = a->Prefill(prompt_, sa);
  auto lb = b->Prefill(prompt_, sb);
  ASSERT_TRUE(la.ok() && lb.ok());
  ExpectClose(*la, *lb, 1e-4f);
  a->Release(sa);
  b->Release(sb);
  EXPECT_EQ(a->pool().num_used_blocks(), 0);
  EXPECT_EQ(b->pool().num_used_blocks(), 0);
}

TEST_F(ModelRunnerTest, SecondIdenticalPromptReusesEveryFullBlock) {
  auto runner = MakeRunner({});
  SequenceKv first;
  auto l1 = runner->Prefill(prompt_, first);
  ASSERT_TRUE(l1.ok());
  Tensor logits1 = *l1;
  runner->Release(first);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);

  SequenceKv second;
  auto l2 = runner->Prefill(prompt_, second);
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(second.num_cached_prompt_tokens, 128);  // both full blocks came from the cache
  const kv::PrefixCacheStats stats = runner->pool().prefix_cache_stats();
  EXPECT_EQ(stats.num_hits, 2);
  ExpectClose(logits1, *l2, 1e-5f);
  runner->Release(second);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

// One greedy row per sequence, no penalised ids.
kernels::SamplingBatch GreedyRows(size_t n) {
  kernels::SamplingBatch batch;
  batch.rows.resize(n);  // temperature 0
  return batch;
}

TEST_F(ModelRunnerTest, DecodeSampledGreedyRowsPickTheArgmaxOfDecodeLogits) {
  ModelRunnerOptions options;
  options.enable_prefix_cache = false;
  auto runner = MakeRunner(options);
  SequenceKv a, b, c;
  ASSERT_TRUE(runner->Prefill(absl::MakeConstSpan(prompt_).first(60), a).ok());
  ASSERT_TRUE(runner->Prefill(absl::MakeConstSpan(prompt_).first(60), b).ok());
  ASSERT_TRUE(runner->Prefill(absl::MakeConstSpan(prompt_).first(33), c).ok());
  const int vocab = source_.config.vocab_size;
  std::vector<int32_t> ta = {prompt_[60], prompt_[33]}, tb = ta;
  for (int step = 0; step < 8; ++step) {  // crosses the 64-token block boundary
    auto logits = runner->Decode({&a, &c}, ta);
    ASSERT_TRUE(logits.ok()) << logits.status();
    auto greedy = runner->DecodeSampled({&b}, {tb[0]}, GreedyRows(1));
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    ASSERT_EQ(greedy->size(), 1u);
    const float* row = logits->data<float>();
    const int32_t want = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    EXPECT_EQ((*greedy)[0], want) << "step " << step;
    const float* row_c = row + vocab;
    ta = {want, static_cast<int32_t>(std::max_element(row_c, row_c + vocab) - row_c)};
    tb = {(*greedy)[0]};
  }
  EXPECT_EQ(a.tokens, b.tokens);
  for (SequenceKv* s : {&a, &b, &c}) runner->Release(*s);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

// Two sequences with different knobs in one batch: sampling on the backend (NextRow rows, their
// penalised ids concatenated) picks what the host Sampler picks from Decode's logits, step by
// step, with the same seeds.
TEST_F(ModelRunnerTest, DecodeSampledEqualsHostSamplerOnDecodeLogits) {
  ModelRunnerOptions options;
  options.enable_prefix_cache = false;
  auto runner = MakeRunner(options);
  sampling::SamplingParams p0;
  p0.temperature = 0.9f;
  p0.top_k = 40;
  p0.top_p = 0.9f;
  p0.repetition_penalty = 1.3f;
  p0.penalty_window = 16;
  p0.seed = 11;
  sampling::SamplingParams p1;
  p1.temperature = 1.2f;
  p1.min_p = 0.05f;
  p1.repetition_penalty = 0.8f;  // < 1 favours repeats: penalised logits grow
  p1.seed = 12;
  sampling::Sampler host0(p0), host1(p1), dev0(p0), dev1(p1);
  SequenceKv ha, hb, da, db;
  const auto prompt_a = absl::MakeConstSpan(prompt_).first(60);
  const auto prompt_b = absl::MakeConstSpan(prompt_).first(33);
  for (auto [seq, prompt] : {std::pair{&ha, prompt_a}, std::pair{&hb, prompt_b},
                             std::pair{&da, prompt_a}, std::pair{&db, prompt_b}}) {
    ASSERT_TRUE(runner->Prefill(prompt, *seq).ok());
  }
  const int vocab = source_.config.vocab_size;
  std::vector<int32_t> th = {prompt_[60], prompt_[33]}, td = th;
  std::vector<int32_t> history_a(prompt_a.begin(), prompt_a.end());
  std::vector<int32_t> history_b(prompt_b.begin(), prompt_b.end());
  int distinct_from_greedy = 0;
  for (int step = 0; step < 12; ++step) {
    auto logits = runner->Decode({&ha, &hb}, th);
    ASSERT_TRUE(logits.ok()) << logits.status();
    history_a.push_back(th[0]);
    history_b.push_back(th[1]);
    th = {host0.Sample(logits->data<float>(), vocab, history_a),
          host1.Sample(logits->data<float>() + vocab, vocab, history_b)};
    const float* row = logits->data<float>();
    distinct_from_greedy += th[0] != std::max_element(row, row + vocab) - row;

    kernels::SamplingBatch batch;
    batch.penalized_begin.push_back(0);
    batch.rows.push_back(dev0.NextRow(history_a, &batch.penalized_ids));
    batch.penalized_begin.push_back(static_cast<int32_t>(batch.penalized_ids.size()));
    batch.rows.push_back(dev1.NextRow(history_b, &batch.penalized_ids));
    batch.penalized_begin.push_back(static_cast<int32_t>(batch.penalized_ids.size()));
    auto picked = runner->DecodeSampled({&da, &db}, td, batch);
    ASSERT_TRUE(picked.ok()) << picked.status();
    td = *picked;
    EXPECT_EQ(td, th) << "step " << step;
  }
  EXPECT_GT(distinct_from_greedy, 0) << "the test should sample, not only take the argmax";
  for (SequenceKv* s : {&ha, &hb, &da, &db}) runner->Release(*s);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

TEST_F(ModelRunnerTest, DecodeSampledRejectsAMismatchedPlanBeforeChangingAnything) {
  ModelRunnerOptions options;
  options.enable_prefix_cache = false;
  auto runner = MakeRunner(options);
  SequenceKv seq;
  ASSERT_TRUE(runner->Prefill(absl::MakeConstSpan(prompt_).first(64), seq).ok());
  const size_t blocks = seq.block_ids.size();
  auto two_rows = runner->DecodeSampled({&seq}, {prompt_[64]}, GreedyRows(2));
  EXPECT_EQ(two_rows.status().code(), absl::StatusCode::kInvalidArgument);
  kernels::SamplingBatch bad_id = GreedyRows(1);
  bad_id.penalized_ids = {source_.config.vocab_size};
  bad_id.penalized_begin = {0, 1};
  EXPECT_EQ(runner->DecodeSampled({&seq}, {prompt_[64]}, bad_id).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq.tokens.size(), 64u);
  EXPECT_EQ(seq.block_ids.size(), blocks);  // position 64 would have needed a new block
  runner->Release(seq);
}

TEST_F(ModelRunnerTest, DecodeStepEqualsPrefillOfLongerPrompt) {
  ModelRunnerOptions options;
  options.enable_prefix_cache = false;
  auto runner = MakeRunner(options);
  SequenceKv seq;
  ASSERT_TRUE(runner->Prefill(absl::MakeConstSpan(prompt_).first(127), seq).ok());
  // Token 127 fills the second block exactly; token 128 needs a new block.
  auto d1 = runner->Decode({&seq}, {prompt_[127]});
  ASSERT_TRUE(d1.ok());
  auto d2 = runner->Decode({&seq}, {prompt_[128]});
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(seq.block_ids.size(), 3u);
  SequenceKv ref;
  auto lref = runner->Prefill(absl::MakeConstSpan(prompt_).first(129), ref);
  ASSERT_TRUE(lref.ok());
  ExpectClose(*d2, *lref, 1e-4f);
  runner->Release(seq);
  runner->Release(ref);
}

TEST_F(ModelRunnerTest, ExhaustedPoolIsResourceExhaustedAndHoldsNothing) {
  ModelRunnerOptions options;
  options.kv_cache_tokens = 128;  // two blocks; the prompt needs three
  auto runner = MakeRunner(options);
  SequenceKv seq;
  auto logits = runner->Prefill(prompt_, seq);
  EXPECT_EQ(logits.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
  EXPECT_TRUE(seq.block_ids.empty());
}

TEST_F(ModelRunnerTest, RejectsEmptyAndOverlongPrompts) {
  auto runner = MakeRunner({});
  SequenceKv seq;
  EXPECT_EQ(runner->Prefill({}, seq).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> huge(runner->max_context(), 5);
  EXPECT_EQ(runner->Prefill(huge, seq).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad_id = {1, 100000};
  EXPECT_EQ(runner->Prefill(bad_id, seq).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

}  // namespace
}  // namespace sparseserve::engine

namespace sparseserve::engine {
namespace {

// MInference on the real model (issue 12): a config mixing the three patterns per head really
// computes less than dense, a prefix-cache hit gives the logits of the run without it, prompts
// below the threshold run dense, and a request may not name another config file.
class MInferenceRunnerTest : public ModelRunnerTest {
 protected:
  void SetUp() override {
    ModelRunnerTest::SetUp();
    if (IsSkipped()) return;
    const model::ModelConfig& c = source_.config;
    kernels::MInferenceConfig config =
        kernels::MInferenceConfig::Uniform(c.num_layers, c.num_heads);
    for (size_t i = 0; i < config.heads.size(); ++i) {
      config.heads[i] =
          i % 3 == 0   ? kernels::HeadPattern{kernels::HeadPatternKind::kAShape, 8, 48}
          : i % 3 == 1 ? kernels::HeadPattern{kernels::HeadPatternKind::kBlockSparse, 3, 0}
                       : kernels::HeadPattern{kernels::HeadPatternKind::kVerticalSlash, 30, 100};
    }
    // One file per test: ctest runs this fixture's tests in parallel processes, and one of them
    // must never read the file while another is writing it.
    config_path_ = ::testing::TempDir() + "/minference_runner_test_" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
    std::ofstream(config_path_) << MInferenceConfigJson(config);
    for (int i = 150; i < 450; ++i) prompt_.push_back(3 + (i * 53) % 500);
  }

  std::unique_ptr<ModelRunner> MInferenceRunner(bool prefix_cache) {
    ModelRunnerOptions options;
    options.prefill_chunk_tokens = 128;
    options.enable_prefix_cache = prefix_cache;
    options.minference_config = config_path_;
    return MakeRunner(options);
  }

  AttentionChoice choice_{.method = AttentionMethod::kMInference, .sparse_prefill_threshold = 0};
  std::string config_path_;
};

TEST_F(MInferenceRunnerTest, PrefixHitEqualsTheRunWithoutItAndWorkIsSparse) {
  auto runner = MInferenceRunner(/*prefix_cache=*/true);
  auto pattern = runner->PrefillPattern(choice_, static_cast<int64_t>(prompt_.size()));
  ASSERT_TRUE(pattern.ok()) << pattern.status();
  ASSERT_EQ(pattern->kind, kernels::AttentionMethodKind::kMInference);
  SequenceKv first;
  auto l1 = runner->Prefill(prompt_, first, nullptr, *pattern);
  ASSERT_TRUE(l1.ok()) << l1.status();
  const double density = first.sparse_computed_pairs / first.sparse_causal_pairs;
  EXPECT_GT(density, 0.05);
  EXPECT_LT(density, 0.9);
  runner->Release(first);
  SequenceKv second;
  auto l2 = runner->Prefill(prompt_, second, nullptr, *pattern);
  ASSERT_TRUE(l2.ok()) << l2.status();
  // 450 tokens: 7 full blocks of 64 match, cut to the 3 chunks of 128 (384 tokens).
  EXPECT_EQ(second.num_cached_prompt_tokens, 384);
  ExpectClose(*l1, *l2, 0.0f);
  // And the run without a prefix cache at all, and a dense run that differs.
  auto fresh = MInferenceRunner(/*prefix_cache=*/false);
  SequenceKv third, dense_seq;
  auto l3 = fresh->Prefill(prompt_, third, nullptr, *pattern);
  ASSERT_TRUE(l3.ok());
  ExpectClose(*l1, *l3, 0.0f);
  auto dense = fresh->Prefill(prompt_, dense_seq);
  ASSERT_TRUE(dense.ok());
  float max_diff = 0;
  for (int64_t i = 0; i < dense->numel(); ++i) {
    max_diff = std::max(max_diff, std::abs(dense->data<float>()[i] - l1->data<float>()[i]));
  }
  EXPECT_GT(max_diff, 1e-3f);
  EXPECT_EQ(dense_seq.sparse_causal_pairs, 0.0);
}

TEST_F(MInferenceRunnerTest, ShortPromptsRunDenseAndForeignConfigsAreRefused) {
  auto runner = MInferenceRunner(/*prefix_cache=*/false);
  AttentionChoice choice = choice_;
  choice.sparse_prefill_threshold = 451;
  auto pattern = runner->PrefillPattern(choice, 450);
  ASSERT_TRUE(pattern.ok());
  EXPECT_EQ(pattern->kind, kernels::AttentionMethodKind::kDense);
  EXPECT_EQ(runner->PrefillPattern(choice, 451)->kind, kernels::AttentionMethodKind::kMInference);
  choice.minference_config = "/etc/passwd";
  EXPECT_EQ(runner->PrefillPattern(choice, 451).status().code(),
            absl::StatusCode::kInvalidArgument);
  choice.minference_config = config_path_;
  EXPECT_TRUE(runner->PrefillPattern(choice, 451).ok());
  ModelRunnerOptions bad;
  bad.minference_config = ::testing::TempDir() + "/missing.json";
  EXPECT_EQ(ModelRunner::Create(source_, &backend_, bad).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sparseserve::engine
