// LlamaModel's Kangaroo early-exit adapter (LoadEarlyExitAdapter, DraftPass::early_exit) on the
// CPU backend with the random `tiny` model: full steps fill the adapter's KV layer the same way
// for a prompt computed whole or token by token, an early-exit pass writes the shallow layers and
// the adapter's layer only and reports probabilities, and bad adapters are refused naming what
// is wrong.
#include <cmath>
#include <string>
#include <vector>

#include "common/core/thread_pool.h"
#include "common/model/llama_model.h"
#include "common/model/model_presets.h"
#include "common/model/safetensors_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/model_file_writers.h"

namespace sparseserve::model {
namespace {

using ::testing::HasSubstr;

class EarlyExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
    config_.num_layers = 4;  // exits after 1 or 2 of them
    model_ = *LlamaModel::CreateRandom(config_, &backend_, 3);
  }

  // An adapter with small deterministic weights; `q_rows` overrides q_proj's rows (a bad shape).
  absl::Status LoadAdapter(int exit_layer, int64_t q_rows = -1) {
    const int64_t hidden = config_.hidden_size, hd = config_.head_dim;
    const int64_t q_dim = q_rows >= 0 ? q_rows : config_.num_heads * hd;
    const int64_t kv_dim = config_.num_kv_heads * hd;
    auto weights = [](int64_t n, float scale, int salt) {
      std::vector<float> w(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) w[i] = scale * std::sin(0.37f * (i + 1) * (salt + 1));
      return testing::RawBytes(w);
    };
    const std::vector<testing::SafetensorsTestTensor> tensors = {
        {"adapter.input_norm.weight", "F32", {hidden}, weights(hidden, 1.0f, 0)},
        {"adapter.q_proj.weight", "F32", {q_dim, hidden}, weights(q_dim * hidden, 0.2f, 1)},
        {"adapter.k_proj.weight", "F32", {kv_dim, hidden}, weights(kv_dim * hidden, 0.2f, 2)},
        {"adapter.v_proj.weight", "F32", {kv_dim, hidden}, weights(kv_dim * hidden, 0.2f, 3)},
        {"adapter.o_proj.weight", "F32", {hidden, q_dim}, weights(hidden * q_dim, 0.2f, 4)},
        {"adapter.output_norm.weight", "F32", {hidden}, weights(hidden, 1.0f, 5)},
    };
    bytes_ = testing::BuildSafetensors(tensors);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromBuffer(
        "adapter", reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), nullptr);
    if (!file.ok()) return file.status();
    return model_->LoadEarlyExitAdapter(**file, exit_layer, config_.rope_pair_layout);
  }

  std::unique_ptr<PagedKvCache> NewCache() {
    PagedKvCacheShape shape;
    shape.num_layers = model_->kv_layers();
    shape.num_blocks = 4;
    shape.block_tokens = 16;
    shape.num_kv_heads = config_.num_kv_heads;
    shape.head_dim = config_.head_dim;
    return *PagedKvCache::Create(shape, backend_);
  }

  static std::vector<float> Layer(const PagedKvCache& cache, int l) {
    const Tensor& t = cache.layer(l);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  }

  ForwardSequence Seq(std::vector<int32_t> tokens, int32_t start) const {
    ForwardSequence s;
    s.tokens = std::move(tokens);
    s.start_pos = start;
    s.block_table = {1, 3};
    s.logits = LogitRows::kLast;
    return s;
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelConfig config_;
  std::unique_ptr<LlamaModel> model_;
  std::string bytes_;
};

TEST_F(EarlyExitTest, FullStepsFillTheAdapterLayerWholeOrTokenByToken) {
  ASSERT_TRUE(LoadAdapter(1).ok());
  ASSERT_EQ(model_->kv_layers(), config_.num_layers + 1);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 53 + 11) % 200);
  std::unique_ptr<PagedKvCache> whole = NewCache(), step = NewCache();
  ASSERT_TRUE(model_->Forward({Seq(prompt, 0)}, *whole).ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(model_->Forward({Seq({prompt[i]}, i)}, *step).ok());
  }
  const std::vector<float> a = Layer(*whole, config_.num_layers);
  const std::vector<float> b = Layer(*step, config_.num_layers);
  double norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-4) << i;
    norm += a[i] * a[i];
  }
  EXPECT_GT(norm, 1.0);  // written
}

TEST_F(EarlyExitTest, AnEarlyExitWritesTheShallowLayersAndTheAdapterOnly) {
  ASSERT_TRUE(LoadAdapter(2).ok());
  std::unique_ptr<PagedKvCache> cache = NewCache();
  std::vector<int32_t> prompt = {1, 5, 9, 13, 17};
  ASSERT_TRUE(model_->Forward({Seq(prompt, 0)}, *cache).ok());
  std::vector<std::vector<float>> before;
  for (int l = 0; l < model_->kv_layers(); ++l) before.push_back(Layer(*cache, l));
  kernels::SamplingBatch greedy;
  greedy.rows.resize(1);
  DraftPass pass;
  pass.early_exit = true;
  absl::StatusOr<std::vector<int32_t>> next =
      model_->ForwardSample({Seq({21}, 5)}, *cache, greedy, nullptr, &pass);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->size(), 1u);
  ASSERT_EQ(pass.top_probability.size(), 1u);
  EXPECT_GT(pass.top_probability[0], 0.0f);
  EXPECT_LE(pass.top_probability[0], 1.0f);
  for (int l = 0; l < model_->kv_layers(); ++l) {
    const bool written = l < 2 || l == config_.num_layers;
    EXPECT_EQ(Layer(*cache, l) != before[static_cast<size_t>(l)], written) << "layer " << l;
  }
}

TEST_F(EarlyExitTest, BadAdaptersAreRefused) {
  for (const int exit_layer : {0, config_.num_layers}) {
    const absl::Status s = LoadAdapter(exit_layer);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << exit_layer;
    EXPECT_THAT(s.message(), HasSubstr("exit layer"));
  }
  const absl::Status s = LoadAdapter(1, /*q_rows=*/3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("adapter.q_proj.weight"));
  EXPECT_FALSE(model_->has_early_exit_adapter());
  EXPECT_EQ(model_->kv_layers(), config_.num_layers);
}

}  // namespace
}  // namespace sparseserve::model
