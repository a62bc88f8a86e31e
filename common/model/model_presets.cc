#include "common/model/model_presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sparseserve::model {
namespace {

// Llama 3.1's RoPE: theta 500000 with the "llama3" rescaling that stretches 8K-trained
// frequencies to 128K (config.json `rope_scaling`).
void SetLlama31Rope(ModelConfig& c) {
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.max_position_embeddings = 131072;
}

// meta-llama/Llama-3.1-8B.
ModelConfig Llama3_8b() {
  ModelConfig c;
  c.arch = ModelArch::kLlama;
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-5f;
  SetLlama31Rope(c);
  c.tie_word_embeddings = false;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001};
  c.weight_dtype = DType::kBf16;
  return c;
}

// One decoder layer of meta-llama/Llama-3.1-70B (which has 80): the per-layer cost of the 70B
// shape on one GPU, where the whole model (140 GB in bf16) does not fit. Embedding and lm_head
// are the full 128256 x 8192 ones.
ModelConfig Llama3_70bLayer() {
  ModelConfig c = Llama3_8b();
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_layers = 1;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  return c;
}

// What one rank of a tensor-parallel group of 2 computes for Llama-3.1-8B (issue 19): half the
// heads, KV heads, FFN columns and vocabulary, on one GPU with no collectives. A TP 2 decode step
// less this one's is what the all-reduces and the logits' gather cost.
ModelConfig Llama3_8bTp2Rank() {
  ModelConfig c = Llama3_8b();
  c.vocab_size = 128256 / 2;
  c.intermediate_size = 14336 / 2;
  c.num_heads = 32 / 2;
  c.num_kv_heads = 8 / 2;
  c.bos_token_id = 1, c.eos_token_ids = {2};  // inside the rank's half of the vocabulary
  return c;
}

// meta-llama/Llama-3.1-70B, all 80 layers (140 GB in bf16: for tensor parallelism, issue 19).
ModelConfig Llama3_70b() {
  ModelConfig c = Llama3_70bLayer();
  c.num_layers = 80;
  return c;
}

// mistralai/Mistral-7B-v0.1: a 4096-token sliding window on every layer (rolling KV). Its
// config.json says max_position_embeddings 32768; the preset allows 131072 so that long-context
// runs can show the KV a window bounds (RoPE is computed per position; no tensor changes).
ModelConfig Mistral_7b() {
  ModelConfig c;
  c.arch = ModelArch::kMistral;
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.max_position_embeddings = 131072;
  c.sliding_window = 4096;
  c.windowed_layers.assign(c.num_layers, true);
  c.tie_word_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.weight_dtype = DType::kBf16;
  return c;
}

// Qwen/Qwen2-7B: q/k/v biases, 7:1 GQA.
ModelConfig Qwen2_7b() {
  ModelConfig c;
  c.arch = ModelArch::kQwen2;
  c.vocab_size = 152064;
  c.hidden_size = 3584;
  c.intermediate_size = 18944;
  c.num_layers = 28;
  c.num_heads = 28;
  c.num_kv_heads = 4;
  c.head_dim = 128;
  c.attention_bias = true;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  // The released config.json says 32768: Qwen2-7B reaches 128K only with YaRN (factor 4) added to
  // its config by hand. The preset allows 131072 so that the 128K-context benchmark can run this
  // shape; RoPE scaling changes no tensor shape and no cost, so it is left out.
  c.max_position_embeddings = 131072;
  c.tie_word_embeddings = false;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151643};
  c.weight_dtype = DType::kBf16;
  return c;
}

// A ~2 MB Llama (f32) for tests: two layers, GQA 2:1, fast on the CPU backend.
ModelConfig Tiny() {
  ModelConfig c;
  c.arch = ModelArch::kLlama;
  c.vocab_size = 1000;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.weight_dtype = DType::kF32;
  return c;
}

struct Preset {
  const char* name;
  ModelConfig (*make)();
};

constexpr Preset kPresets[] = {
    {"llama3-8b", &Llama3_8b},
    {"llama3-8b-tp2-rank", &Llama3_8bTp2Rank},
    {"llama3-70b-layer", &Llama3_70bLayer},
    {"llama3-70b", &Llama3_70b},
    {"mistral-7b", &Mistral_7b},
    {"qwen2-7b", &Qwen2_7b},
    {"tiny", &Tiny},
};

}  // namespace

std::vector<std::string> SyntheticModelNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

absl::StatusOr<ModelConfig> SyntheticModelConfig(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
  }
  return absl::NotFoundError(absl::StrCat("unknown synthetic model '", name, "'; valid presets: ",
                                          absl::StrJoin(SyntheticModelNames(), ", ")));
}

}  // namespace sparseserve::model
