// The shadow-dense monitor through ModelRunner on stories260K (CPU reference): the observer gets
// one call per shadowed step with every (sequence, layer) of it — prefill chunks and decode
// steps alike — exactly 0 while a sliding window covers the context and above 0 once it does not;
// nothing at rate 0 or for dense requests; rates outside [0, 1] are rejected.
#include <vector>

#include "common/core/thread_pool.h"
#include "common/engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

class ShadowDenseRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    for (int i = 0; i < 50; ++i) prompt_.push_back(3 + (i * 53) % 500);
  }

  // A runner at `rate` whose observer appends to calls_ (one entry per call).
  std::unique_ptr<ModelRunner> Runner(double rate) {
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.prefill_chunk_tokens = 32;    // the 50-token prompt takes two chunks
    options.enable_prefix_cache = false;  // every run prefills the whole prompt
    options.shadow_dense_rate = rate;
    auto runner = ModelRunner::Create(source_, &backend_, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    (*runner)->set_shadow_error_observer(
        [this](absl::Span<const model::ShadowAttentionError> errors) {
          calls_.emplace_back(errors.begin(), errors.end());
        });
    return std::move(*runner);
  }

  static kernels::AttentionPattern Window(int window) {
    kernels::AttentionPattern p;
    p.kind = kernels::AttentionMethodKind::kSlidingWindow;
    p.window = window;
    return p;
  }

  // Prefills the prompt under `pattern` and decodes `steps` greedy tokens under it.
  void Run(ModelRunner& runner, const kernels::AttentionPattern& pattern, int steps) {
    kernels::SamplingBatch greedy;
    greedy.rows.resize(1);
    SequenceKv seq;
    absl::StatusOr<int32_t> token = runner.PrefillSampled(prompt_, seq, greedy, pattern);
    ASSERT_TRUE(token.ok()) << token.status();
    for (int i = 0; i < steps; ++i) {
      StepRows rows;
      rows.seq = &seq;
      rows.tokens = {*token};
      rows.pattern = pattern;
      absl::StatusOr<std::vector<int32_t>> next =
          runner.Step(absl::MakeConstSpan(&rows, 1), greedy);
      ASSERT_TRUE(next.ok()) << next.status();
      token = next->front();
    }
    runner.Release(seq);
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelSource source_;
  std::vector<int32_t> prompt_;
  std::vector<std::vector<model::ShadowAttentionError>> calls_;
};

TEST_F(ShadowDenseRunnerTest, EverySparseStepIsReportedAtRateOne) {
  auto runner = Runner(1.0);
  const size_t layers = static_cast<size_t>(runner->config().num_layers);
  Run(*runner, Window(1000), 4);
  ASSERT_EQ(calls_.size(), 2u + 4u);  // two prefill chunks, four decode steps
  for (const auto& call : calls_) {
    ASSERT_EQ(call.size(), layers);
    for (const model::ShadowAttentionError& e : call) {
      EXPECT_EQ(e.sequence, 0);
      EXPECT_EQ(e.method, kernels::AttentionMethodKind::kSlidingWindow);
      EXPECT_EQ(e.relative_l2, 0.0f) << "layer " << e.layer;
    }
  }
  calls_.clear();
  Run(*runner, Window(16), 4);
  ASSERT_EQ(calls_.size(), 6u);
  // Rows past the 16th of the first chunk, and every later row, miss keys: all above 0.
  for (size_t c = 0; c < calls_.size(); ++c) {
    for (const model::ShadowAttentionError& e : calls_[c]) {
      EXPECT_GT(e.relative_l2, 0.0f) << "call " << c << " layer " << e.layer;
    }
  }
  calls_.clear();
  Run(*runner, {}, 3);  // dense: never shadowed
  EXPECT_TRUE(calls_.empty());
}

TEST_F(ShadowDenseRunnerTest, RateZeroReportsNothing) {
  auto runner = Runner(0.0);
  Run(*runner, Window(16), 4);
  EXPECT_TRUE(calls_.empty());
}

TEST_F(ShadowDenseRunnerTest, RatesOutsideZeroToOneAreRejected) {
  for (double rate : {-0.1, 1.5}) {
    ModelRunnerOptions options;
    options.shadow_dense_rate = rate;
    EXPECT_EQ(ModelRunner::Create(source_, &backend_, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace sparseserve::engine
