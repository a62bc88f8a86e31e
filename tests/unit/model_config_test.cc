#include "common/model/model_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/model/gguf_file.h"
#include "gtest/gtest.h"
#include "model_file_writers.h"

namespace sparseserve::model {
namespace {

// Llama-3.1-8B's config.json, abridged to the fields that matter.
constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr char kQwen2[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
  "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
  "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

constexpr char kMistral[] = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 5120, "head_dim": 128, "intermediate_size": 14336,
  "max_position_embeddings": 1024000, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 131072})";

TEST(ModelConfigTest, ParsesLlama31WithLlama3RopeScaling) {
  auto c = ParseHfConfig(kLlama31, "llama/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kLlama);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0f);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_pair_layout, RopePairLayout::kHalves);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->weight_dtype, DType::kBf16);
  EXPECT_EQ(ModelArchName(c->arch), "llama");
}

TEST(ModelConfigTest, ParsesQwen2WithBiasAndTiedEmbeddings) {
  auto c = ParseHfConfig(kQwen2, "qwen/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kQwen2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->attention_bias);  // Qwen2 always has q/k/v biases
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{151645});
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
}

TEST(ModelConfigTest, ParsesMistralWithExplicitHeadDim) {
  auto c = ParseHfConfig(kMistral, "mistral/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kMistral);
  EXPECT_EQ(c->head_dim, 128);  // not 5120 / 32
  EXPECT_EQ(c->hidden_size, 5120);
  EXPECT_EQ(c->max_position_embeddings, 1024000);  // sliding_window null: full attention
}

TEST(ModelConfigTest, MistralSlidingWindowIsKeptOnEveryLayer) {
  std::string text = kMistral;
  text.replace(text.find("\"sliding_window\": null"), 22, "\"sliding_window\": 4096");
  auto c = ParseHfConfig(text, "mistral/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_position_embeddings, 1024000);  // the context is not cut to the window
  EXPECT_EQ(c->sliding_window, 4096);
  ASSERT_EQ(c->windowed_layers.size(), static_cast<size_t>(c->num_layers));
  EXPECT_TRUE(c->AllLayersWindowed());
  EXPECT_TRUE(ValidateModelConfig(*c).ok());
}

TEST(ModelConfigTest, Qwen2SlidingWindowFromMaxWindowLayers) {
  // transformers' Qwen2: layers >= max_window_layers use the window.
  auto c =
      ParseHfConfig(absl::StrReplaceAll(
                        kQwen2, {{"\"use_sliding_window\": false", "\"use_sliding_window\": true"},
                                 {"\"sliding_window\": 32768", "\"sliding_window\": 1024"}}),
                    "qwen2/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 1024);
  ASSERT_EQ(c->windowed_layers.size(), static_cast<size_t>(c->num_layers));
  for (int l = 0; l < c->num_layers; ++l) EXPECT_EQ(c->windowed_layers[l], l >= 21) << l;
  EXPECT_FALSE(c->AllLayersWindowed());
  // Without use_sliding_window, sliding_window is ignored (full attention everywhere).
  auto full = ParseHfConfig(kQwen2, "qwen2/config.json");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->sliding_window, 0);
}

TEST(ModelConfigTest, DefaultsAndLinearScaling) {
  auto c = ParseHfConfig(R"({"model_type":"llama","vocab_size":32,"hidden_size":16,
      "intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":4,
      "max_position_embeddings":64,"rope_scaling":{"type":"linear","factor":2.0},
      "eos_token_id":null,"dtype":"float16"})",
                         "c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0f);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->weight_dtype, DType::kF16);
}

// transformers 5 moves rope_theta and the scaling into `rope_parameters`.
TEST(ModelConfigTest, ParsesTransformers5RopeParameters) {
  auto c = ParseHfConfig(R"({"model_type":"llama","vocab_size":511,"hidden_size":64,
      "head_dim":16,"intermediate_size":160,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":2,"max_position_embeddings":512,"dtype":"float32",
      "rope_parameters":{"factor":4.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
      "original_max_position_embeddings":64,"rope_theta":20000.0,"rope_type":"llama3"}})",
                         "t5/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_theta, 20000.0f);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);
  c = ParseHfConfig(R"({"model_type":"qwen2","vocab_size":400,"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
      "num_key_value_heads":1,"max_position_embeddings":512,
      "rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"}})",
                    "t5/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
}

// `kLlama31` with `from` replaced by `to`.
std::string Llama31With(const std::string& from, const std::string& to) {
  const std::string out = absl::StrReplaceAll(kLlama31, {{from, to}});
  EXPECT_NE(out, kLlama31) << from;
  return out;
}

void ExpectError(const std::string& json, absl::StatusCode code, const std::string& fragment) {
  auto c = ParseHfConfig(json, "bad/config.json");
  ASSERT_FALSE(c.ok()) << fragment;
  EXPECT_EQ(c.status().code(), code) << c.status();
  EXPECT_NE(c.status().message().find("bad/config.json"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find(fragment), std::string::npos) << c.status();
}

TEST(ModelConfigTest, MalformedAndWrongTypesAreInvalidArgument) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectError("{\"model_type\": ", kInvalid, "not valid JSON");
  ExpectError("[]", kInvalid, "not a JSON object");
  ExpectError(Llama31With("\"hidden_size\": 4096", "\"hidden_size\": \"4096\""), kInvalid,
              "'hidden_size' must be an integer, got string");
  ExpectError(Llama31With("\"num_hidden_layers\": 32", "\"num_hidden_layers\": -32"), kInvalid,
              "'num_hidden_layers'");
  ExpectError(Llama31With("\"vocab_size\": 128256", "\"vocab_size\": 1e99"), kInvalid,
              "'vocab_size'");
  ExpectError(Llama31With("\"vocab_size\": 128256", "\"vocab_size\": 99999999999"), kInvalid,
              "'vocab_size'");
  ExpectError(Llama31With(", \"vocab_size\": 128256", ""), kInvalid, "'vocab_size' is missing");
  ExpectError(Llama31With("\"model_type\": \"llama\",", ""), kInvalid, "'model_type' is missing");
  ExpectError(Llama31With("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1"), kInvalid,
              "'rms_norm_eps'");
  ExpectError(Llama31With("\"rope_theta\": 500000.0", "\"rope_theta\": \"big\""), kInvalid,
              "'rope_theta' must be a number");
  ExpectError(Llama31With("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0"), kInvalid,
              "'tie_word_embeddings' must be a bool");
  ExpectError(Llama31With("[128001, 128008, 128009]", "[128001, \"x\"]"), kInvalid,
              "'eos_token_id'");
  ExpectError(Llama31With("\"bfloat16\"", "\"int8\""), kInvalid, "'torch_dtype'");
  ExpectError(Llama31With("\"factor\": 8.0, ", ""), kInvalid, "'rope_scaling.factor' is missing");
  ExpectError(Llama31With("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"), kInvalid,
              "num_kv_heads");
  ExpectError(Llama31With("\"bos_token_id\": 128000", "\"bos_token_id\": 128256"), kInvalid,
              "bos_token_id");
  ExpectError(Llama31With("\"high_freq_factor\": 4.0", "\"high_freq_factor\": 0.5"), kInvalid,
              "high_freq_factor");
}

TEST(ModelConfigTest, UnsupportedFeaturesAreUnimplemented) {
  const auto kUnimpl = absl::StatusCode::kUnimplemented;
  ExpectError(Llama31With("\"model_type\": \"llama\"", "\"model_type\": \"gpt2\""), kUnimpl,
              "'gpt2'");
  ExpectError(Llama31With("\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\""), kUnimpl,
              "'yarn'");
  ExpectError(Llama31With("\"mlp_bias\": false", "\"mlp_bias\": true"), kUnimpl, "mlp_bias");
}

TEST(ModelConfigTest, ValidateNamesTheField) {
  ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  EXPECT_TRUE(ValidateModelConfig(c).ok());
  ModelConfig bad = c;
  bad.head_dim = 3;
  EXPECT_NE(ValidateModelConfig(bad).message().find("head_dim"), std::string::npos);
  bad = c;
  bad.num_layers = 0;
  EXPECT_NE(ValidateModelConfig(bad).message().find("num_layers"), std::string::npos);
  bad = c;
  bad.eos_token_ids = {10};
  EXPECT_EQ(ValidateModelConfig(bad).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelConfigGgufTest, Stories260K) {
  auto gguf = GgufFile::Open(testing::StoriesPath("stories260K.gguf"));
  if (absl::IsNotFound(gguf.status())) GTEST_SKIP() << gguf.status();
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto c = ModelConfigFromGguf(**gguf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kLlama);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 5);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->vocab_size, 512);  // from tokenizer.ggml.tokens: no llama.vocab_size key
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(c->rope_pair_layout, RopePairLayout::kAdjacent);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);  // the file carries output.weight
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c->weight_dtype, DType::kF32);
}

std::vector<std::string> QwenKvs() {
  using testing::KvScalar;
  return {testing::KvString("general.architecture", "qwen2"),
          KvScalar<uint32_t>("qwen2.context_length", 4, 128),
          KvScalar<uint32_t>("qwen2.embedding_length", 4, 16),
          KvScalar<uint32_t>("qwen2.block_count", 4, 1),
          KvScalar<uint32_t>("qwen2.feed_forward_length", 4, 32),
          KvScalar<uint32_t>("qwen2.attention.head_count", 4, 4),
          KvScalar<uint32_t>("qwen2.attention.head_count_kv", 4, 2),
          KvScalar<float>("qwen2.attention.layer_norm_rms_epsilon", 6, 1e-6f),
          KvScalar<float>("qwen2.rope.freq_base", 6, 1e6f),
          KvScalar<uint32_t>("qwen2.vocab_size", 4, 100),
          KvScalar<uint32_t>("tokenizer.ggml.eos_token_id", 4, 7)};
}

absl::StatusOr<ModelConfig> ConfigOf(const std::vector<std::string>& kvs,
                                     const std::vector<testing::GgufTestTensor>& tensors) {
  const std::string bytes = testing::BuildGguf(kvs, tensors);
  auto gguf = GgufFile::FromBuffer("q.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                   bytes.size(), nullptr);
  if (!gguf.ok()) return gguf.status();
  return ModelConfigFromGguf(**gguf);
}

TEST(ModelConfigGgufTest, Qwen2HalvesBf16TiedAndLinearScaling) {
  const testing::GgufTestTensor embd{"token_embd.weight", 30, {16, 100}, std::string(3200, 0)};
  const testing::GgufTestTensor norm{"output_norm.weight", 0, {16}, std::string(64, 0)};
  std::vector<std::string> kvs = QwenKvs();
  kvs.push_back(testing::KvString("qwen2.rope.scaling.type", "linear"));
  kvs.push_back(testing::KvScalar<float>("qwen2.rope.scaling.factor", 6, 4.0f));
  auto c = ConfigOf(kvs, {embd, norm});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kQwen2);
  EXPECT_EQ(c->rope_pair_layout, RopePairLayout::kHalves);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->weight_dtype, DType::kBf16);
  EXPECT_EQ(c->vocab_size, 100);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 4.0f);
}

TEST(ModelConfigGgufTest, ErrorsNameTheKey) {
  std::vector<std::string> kvs = QwenKvs();
  kvs.erase(kvs.begin() + 2);  // embedding_length
  auto c = ConfigOf(kvs, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("qwen2.embedding_length"), std::string::npos);
  kvs = QwenKvs();
  kvs[0] = testing::KvString("general.architecture", "falcon");
  EXPECT_EQ(ConfigOf(kvs, {}).status().code(), absl::StatusCode::kUnimplemented);
  kvs = QwenKvs();
  kvs.push_back(testing::KvString("qwen2.rope.scaling.type", "yarn"));
  EXPECT_EQ(ConfigOf(kvs, {}).status().code(), absl::StatusCode::kUnimplemented);
  kvs = QwenKvs();
  kvs[6] = testing::KvScalar<uint32_t>("qwen2.attention.head_count_kv", 4, 3);
  c = ConfigOf(kvs, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("q.gguf"), std::string::npos) << c.status();
  // Mostly-quantized weights are refused up front.
  const testing::GgufTestTensor q4{"blk.0.ffn_up.weight", 12, {256, 8}, std::string(1152, 0)};
  c = ConfigOf(QwenKvs(), {q4});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("Q4_K"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace sparseserve::model
