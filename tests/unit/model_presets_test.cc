// Synthetic model presets: each is a valid config with its published parameter count, and an
// unknown name is a kNotFound that lists the valid ones.
#include "common/model/model_presets.h"

#include "gtest/gtest.h"

namespace sparseserve::model {
namespace {

// Parameters of the Llama block stack with untied embedding and lm_head.
int64_t NumParams(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  int64_t layer = 2 * h * q + 2 * h * kv + 3 * h * c.intermediate_size + 2 * h;
  if (c.attention_bias) layer += q + 2 * kv;
  return 2 * int64_t{c.vocab_size} * h + c.num_layers * layer + h;
}

TEST(ModelPresetsTest, EveryPresetIsAValidConfig) {
  const std::vector<std::string> names = SyntheticModelNames();
  ASSERT_EQ(names.size(), 7u);
  for (const std::string& name : names) {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_TRUE(ValidateModelConfig(*c).ok()) << name << ": " << ValidateModelConfig(*c);
  }
}

TEST(ModelPresetsTest, ShapesMatchThePublishedModels) {
  absl::StatusOr<ModelConfig> llama = SyntheticModelConfig("llama3-8b");
  ASSERT_TRUE(llama.ok());
  EXPECT_NEAR(NumParams(*llama) / 1e9, 8.03, 0.01);  // Llama-3.1-8B: 8.03B
  EXPECT_EQ(llama->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(llama->max_position_embeddings, 131072);

  absl::StatusOr<ModelConfig> qwen = SyntheticModelConfig("qwen2-7b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_NEAR(NumParams(*qwen) / 1e9, 7.62, 0.01);  // Qwen2-7B: 7.62B
  EXPECT_TRUE(qwen->attention_bias);
  EXPECT_EQ(qwen->max_position_embeddings, 131072);  // the 128K benchmark context

  // One rank of TP 2: every matrix halved (embedding and LM head by vocabulary); the norms,
  // 0.27M parameters, whole.
  absl::StatusOr<ModelConfig> rank = SyntheticModelConfig("llama3-8b-tp2-rank");
  ASSERT_TRUE(rank.ok());
  EXPECT_EQ(rank->num_kv_heads, 4);
  EXPECT_NEAR(NumParams(*rank) / 1e9, 8.03 / 2, 0.01);

  absl::StatusOr<ModelConfig> layer70 = SyntheticModelConfig("llama3-70b-layer");
  ASSERT_TRUE(layer70.ok());
  EXPECT_EQ(layer70->num_layers, 1);
  // One of Llama-3.1-70B's 80 layers: (70.55B - 2 x 1.05B embeddings) / 80 = 0.856B.
  EXPECT_NEAR((NumParams(*layer70) - 2 * int64_t{128256} * 8192) / 1e9, 0.856, 0.001);

  absl::StatusOr<ModelConfig> llama70 = SyntheticModelConfig("llama3-70b");
  ASSERT_TRUE(llama70.ok());
  EXPECT_NEAR(NumParams(*llama70) / 1e9, 70.55, 0.01);  // Llama-3.1-70B: 70.55B

  absl::StatusOr<ModelConfig> mistral = SyntheticModelConfig("mistral-7b");
  ASSERT_TRUE(mistral.ok());
  EXPECT_NEAR(NumParams(*mistral) / 1e9, 7.24, 0.01);  // Mistral-7B-v0.1: 7.24B
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_TRUE(mistral->AllLayersWindowed());
  EXPECT_EQ(mistral->max_position_embeddings, 131072);

  absl::StatusOr<ModelConfig> tiny = SyntheticModelConfig("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_LT(NumParams(*tiny) * 4, 4 << 20);  // a few MB in f32
}

TEST(ModelPresetsTest, UnknownNameListsTheValidOnes) {
  absl::StatusOr<ModelConfig> c = SyntheticModelConfig("llama9-1t");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  const std::string message(c.status().message());
  EXPECT_NE(message.find("llama9-1t"), std::string::npos) << message;
  for (const std::string& name : SyntheticModelNames()) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace sparseserve::model
