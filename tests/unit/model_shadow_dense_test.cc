// The shadow-dense quality monitor at the model level (LlamaModel::set_shadow_dense), on the CPU
// reference: a sliding window that covers the whole context measures an error of exactly 0, a
// shorter one more than 0 (proof the monitor can fail); rate 0 records nothing, rate 1 every
// (sparse sequence, layer) call of every step; dense sequences are never shadowed; shadowing
// never changes the step's own output.
#include <algorithm>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/model/llama_model.h"
#include "common/model/model_presets.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::model {
namespace {

using kernels::AttentionMethodKind;
using kernels::AttentionPattern;

AttentionPattern Window(int window, int sinks = 0) {
  AttentionPattern p;
  p.kind = AttentionMethodKind::kSlidingWindow;
  p.window = window;
  p.sink_tokens = sinks;
  return p;
}

class ShadowDenseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
  }
  std::unique_ptr<LlamaModel> MakeModel(double rate) {
    auto model = LlamaModel::CreateRandom(config_, &cpu_, 5);
    EXPECT_TRUE(model.ok()) << model.status();
    (*model)->set_shadow_dense(rate, 7);
    return std::move(*model);
  }
  std::unique_ptr<PagedKvCache> MakeCache() {
    auto cache = PagedKvCache::Create(
        {config_.num_layers, 32, 16, config_.num_kv_heads, config_.head_dim}, cpu_);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }
  // Sequence s: a prompt of `length` tokens in blocks [8 s, 8 s + 8) under `pattern`.
  static ForwardSequence Prompt(int s, int length, const AttentionPattern& pattern) {
    ForwardSequence seq;
    for (int i = 0; i < length; ++i) seq.tokens.push_back((i * 37 + 11 * s) % 1000);
    for (int b = 0; b < 8; ++b) seq.block_table.push_back(8 * s + b);
    seq.pattern = pattern;
    return seq;
  }
  // Prefills every sequence alone, then turns each into its next decode row (token 3).
  static void PrefillThenDecodeRow(LlamaModel& model, PagedKvCache& cache,
                                   std::vector<ForwardSequence>& seqs) {
    for (ForwardSequence& seq : seqs) {
      ASSERT_TRUE(model.Forward({seq}, cache).ok());
      seq.start_pos = static_cast<int32_t>(seq.tokens.size());
      seq.tokens = {3};
    }
  }

  ModelConfig config_;
  core::ThreadPool pool_{2};
  kernels::CpuBackend cpu_{&pool_};
};

TEST_F(ShadowDenseTest, WindowCoveringTheContextMeasuresZeroAndAShortOneMore) {
  auto model = MakeModel(1.0);
  auto cache = MakeCache();
  // A 40-token prompt, prefilled in one step under each pattern: window 64 covers every key,
  // window 8 (no sinks) drops most of them.
  for (int window : {64, 8}) {
    std::vector<ForwardSequence> batch = {Prompt(0, 40, Window(window))};
    ASSERT_TRUE(model->Forward(batch, *cache).ok());
    const std::vector<ShadowAttentionError>& errors = model->shadow_errors();
    ASSERT_EQ(errors.size(), static_cast<size_t>(config_.num_layers)) << "window " << window;
    for (int l = 0; l < config_.num_layers; ++l) {
      EXPECT_EQ(errors[l].layer, l);
      EXPECT_EQ(errors[l].sequence, 0);
      EXPECT_EQ(errors[l].method, AttentionMethodKind::kSlidingWindow);
      if (window == 64) {
        EXPECT_EQ(errors[l].relative_l2, 0.0f) << "layer " << l;
      } else {
        EXPECT_GT(errors[l].relative_l2, 1e-3f) << "layer " << l;
      }
    }
  }
}

TEST_F(ShadowDenseTest, RateZeroRecordsNothingAndRateOneEverySparseCall) {
  for (double rate : {0.0, 1.0}) {
    auto model = MakeModel(rate);
    auto cache = MakeCache();
    // Sequence 1 is dense and sits between two sparse ones.
    std::vector<ForwardSequence> seqs = {Prompt(0, 30, Window(8, 2)), Prompt(1, 20, {}),
                                         Prompt(2, 25, Window(100))};
    PrefillThenDecodeRow(*model, *cache, seqs);
    for (int step = 0; step < 5; ++step) {
      ASSERT_TRUE(model->Forward(seqs, *cache).ok());
      const std::vector<ShadowAttentionError>& errors = model->shadow_errors();
      if (rate == 0) {
        EXPECT_TRUE(errors.empty());
      } else {
        // Layer-major, then sequences 0 and 2: never the dense sequence 1.
        ASSERT_EQ(errors.size(), 2u * config_.num_layers);
        for (int l = 0; l < config_.num_layers; ++l) {
          EXPECT_EQ(errors[2 * l].sequence, 0);
          EXPECT_EQ(errors[2 * l + 1].sequence, 2);
          EXPECT_EQ(errors[2 * l].layer, l);
          EXPECT_GT(errors[2 * l].relative_l2, 0.0f);      // window 8 of 30+ keys
          EXPECT_EQ(errors[2 * l + 1].relative_l2, 0.0f);  // window 100 covers 25+ keys
        }
      }
      for (ForwardSequence& seq : seqs) ++seq.start_pos;
    }
  }
}

TEST_F(ShadowDenseTest, DenseStepsAreNeverShadowed) {
  auto model = MakeModel(1.0);
  auto cache = MakeCache();
  std::vector<ForwardSequence> seqs = {Prompt(0, 12, {}), Prompt(1, 9, {})};
  ASSERT_TRUE(model->Forward(seqs, *cache).ok());
  EXPECT_TRUE(model->shadow_errors().empty());
}

TEST_F(ShadowDenseTest, ShadowingLeavesTheStepsOutputUnchangedAndFollowsTheRate) {
  auto plain = MakeModel(0.0);
  auto shadowed = MakeModel(0.3);
  auto plain_cache = MakeCache();
  auto shadowed_cache = MakeCache();
  std::vector<ForwardSequence> a = {Prompt(0, 17, Window(6, 1)), Prompt(1, 9, {})};
  std::vector<ForwardSequence> b = a;
  PrefillThenDecodeRow(*plain, *plain_cache, a);
  PrefillThenDecodeRow(*shadowed, *shadowed_cache, b);
  int shadowed_steps = 0;
  constexpr int kSteps = 60;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<Tensor> want = plain->Forward(a, *plain_cache);
    absl::StatusOr<Tensor> got = shadowed->Forward(b, *shadowed_cache);
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(want->numel(), got->numel());
    EXPECT_TRUE(
        std::equal(want->data<float>(), want->data<float>() + want->numel(), got->data<float>()))
        << "step " << step;
    shadowed_steps += shadowed->shadow_errors().empty() ? 0 : 1;
    for (auto* seqs : {&a, &b}) {
      for (ForwardSequence& seq : *seqs) ++seq.start_pos;
    }
  }
  // 60 draws at 0.3 (seeded, so the count is fixed): some steps, not all.
  EXPECT_GT(shadowed_steps, 5);
  EXPECT_LT(shadowed_steps, 35);
}

}  // namespace
}  // namespace sparseserve::model
