// LlamaModel::CreateRandom on the CPU backend with the `tiny` preset: the forward pass gives
// finite logits, a seed fixes the model, and another seed gives another model.
#include <cmath>

#include "common/core/thread_pool.h"
#include "common/model/llama_model.h"
#include "common/model/model_presets.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::model {
namespace {

class LlamaRandomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
    for (int i = 0; i < 40; ++i) prompt_.push_back((i * 37 + 5) % config_.vocab_size);
  }

  // Logits of every prompt token, then of one decode step, from a fresh cache.
  absl::StatusOr<std::vector<float>> RunPrompt(const ModelConfig& config, uint64_t seed) {
    absl::StatusOr<std::unique_ptr<LlamaModel>> model =
        LlamaModel::CreateRandom(config, &backend_, seed);
    if (!model.ok()) return model.status();
    PagedKvCacheShape shape;
    shape.num_layers = config.num_layers;
    shape.num_blocks = 4;
    shape.block_tokens = 16;
    shape.num_kv_heads = config.num_kv_heads;
    shape.head_dim = config.head_dim;
    absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(shape, backend_);
    if (!cache.ok()) return cache.status();

    ForwardSequence prefill;
    prefill.tokens = prompt_;
    prefill.block_table = {2, 0, 3, 1};  // out of order: blocks are paged, not contiguous
    prefill.logits = LogitRows::kAll;
    absl::StatusOr<Tensor> logits = (*model)->Forward({prefill}, **cache);
    if (!logits.ok()) return logits.status();
    std::vector<float> out(logits->data<float>(), logits->data<float>() + logits->numel());

    ForwardSequence decode;
    decode.tokens = {7};
    decode.start_pos = static_cast<int32_t>(prompt_.size());
    decode.block_table = prefill.block_table;
    logits = (*model)->Forward({decode}, **cache);
    if (!logits.ok()) return logits.status();
    out.insert(out.end(), logits->data<float>(), logits->data<float>() + logits->numel());
    return out;
  }

  static void ExpectFiniteAndVaried(const std::vector<float>& logits) {
    float lo = logits.front(), hi = logits.front();
    for (size_t i = 0; i < logits.size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[i])) << "logit " << i;
      lo = std::min(lo, logits[i]);
      hi = std::max(hi, logits[i]);
    }
    EXPECT_GT(hi - lo, 1e-3f);  // not a degenerate constant output
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  ModelConfig config_;
  std::vector<int32_t> prompt_;
};

TEST_F(LlamaRandomTest, ForwardGivesFiniteLogits) {
  absl::StatusOr<std::vector<float>> logits = RunPrompt(config_, 1);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->size(), (prompt_.size() + 1) * config_.vocab_size);
  ExpectFiniteAndVaried(*logits);
}

TEST_F(LlamaRandomTest, SameSeedGivesIdenticalLogits) {
  absl::StatusOr<std::vector<float>> a = RunPrompt(config_, 42);
  absl::StatusOr<std::vector<float>> b = RunPrompt(config_, 42);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(LlamaRandomTest, DifferentSeedGivesDifferentLogits) {
  absl::StatusOr<std::vector<float>> a = RunPrompt(config_, 42);
  absl::StatusOr<std::vector<float>> b = RunPrompt(config_, 43);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  size_t num_different = 0;
  for (size_t i = 0; i < a->size(); ++i) num_different += (*a)[i] != (*b)[i];
  EXPECT_GT(num_different, a->size() / 2);
}

// The Qwen2 path (q/k/v biases) and tied embeddings through a deeper stack: still finite.
TEST_F(LlamaRandomTest, BiasesTiedEmbeddingsAndDepthStayFinite) {
  ModelConfig c = config_;
  c.arch = ModelArch::kQwen2;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.num_layers = 32;
  absl::StatusOr<std::vector<float>> logits = RunPrompt(c, 5);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ExpectFiniteAndVaried(*logits);
}

TEST_F(LlamaRandomTest, InvalidConfigIsRejected) {
  ModelConfig c = config_;
  c.num_kv_heads = 3;  // does not divide 4 heads
  absl::StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::CreateRandom(c, &backend_, 1);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::model
