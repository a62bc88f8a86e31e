// ModelConfig: the architecture hyper-parameters of a decoder-only transformer, read from a
// Hugging Face `config.json` or from GGUF metadata.
//
// Plain value type; immutable after loading, safe to share between threads.
#ifndef SPARSESERVE_COMMON_MODEL_MODEL_CONFIG_H_
#define SPARSESERVE_COMMON_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/dtype.h"

namespace sparseserve::model {

class GgufFile;

// Architectures sharing the Llama block (RMSNorm, RoPE, GQA attention, SwiGLU FFN).
enum class ModelArch { kLlama, kMistral, kQwen2 };
absl::string_view ModelArchName(ModelArch arch);

enum class RopeScalingType { kNone, kLinear, kLlama3 };

// `rope_scaling` of config.json. Llama 3.1's "llama3" type rescales low frequencies only.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;                          // linear and llama3: wavelength multiplier
  float low_freq_factor = 1.0f;                 // llama3 only
  float high_freq_factor = 4.0f;                // llama3 only
  int original_max_position_embeddings = 8192;  // llama3 only
};

// Which pair of dimensions RoPE rotates inside a head, as stored in the checkpoint.
// HF checkpoints rotate halves (i, i + head_dim/2); llama2.c and GGUF `llama` checkpoints rotate
// adjacent pairs (2i, 2i+1). sparseserve computes with halves and converts Q/K rows at load.
enum class RopePairLayout { kHalves, kAdjacent };

struct ModelConfig {
  ModelArch arch = ModelArch::kLlama;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                 // hidden_size / num_heads unless given explicitly
  int max_position_embeddings = 0;  // context length the model was configured for
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  RopePairLayout rope_pair_layout = RopePairLayout::kHalves;  // of the checkpoint's Q/K rows
  bool attention_bias = false;       // q/k/v biases (Qwen2); Llama's also covers o_proj
  bool tie_word_embeddings = false;  // lm_head shares the token embedding
  int32_t bos_token_id = -1;         // -1: none
  std::vector<int32_t> eos_token_ids;
  DType weight_dtype = DType::kF32;  // `torch_dtype` / dominant GGUF tensor type
  // The model's own sliding-window attention (Mistral `sliding_window`; Qwen2 with
  // `use_sliding_window` on layers >= `max_window_layers`): on a windowed layer a query at KV
  // index p sees keys k > p - sliding_window (itself included, no sinks), as transformers'
  // sliding-window mask. 0 = every layer attends the whole context.
  int sliding_window = 0;
  std::vector<bool> windowed_layers;  // [num_layers] when sliding_window > 0, else empty

  // True when every layer is windowed: keys that left the window are never read again, so
  // their KV blocks can go back to the pool while the sequence keeps going (rolling KV).
  bool AllLayersWindowed() const;
};

// Parses a Hugging Face config.json. `source` names the file in error messages.
// Returns kInvalidArgument for malformed JSON, missing or out-of-range fields, and
// kUnimplemented for unsupported `model_type` or `rope_scaling` types.
absl::StatusOr<ModelConfig> ParseHfConfig(absl::string_view json_text, absl::string_view source);

// Reads `general.architecture` and `<arch>.*` keys (context_length, embedding_length,
// block_count, feed_forward_length, attention.head_count(_kv), attention.layer_norm_rms_epsilon,
// rope.freq_base, vocab from tokenizer.ggml.tokens) and the tokenizer's bos/eos ids.
// Llama/Mistral GGUF checkpoints have kAdjacent Q/K rows; Qwen2 has kHalves.
// Same error codes as ParseHfConfig.
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf);

// Checks internal consistency (positive sizes, heads divide, head_dim even, ...).
// Returns kInvalidArgument naming the offending field.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Parameters of one decoder layer's matrices (q, k, v, o and the MLP): each multiplies every
// token once.
int64_t LayerMatrixParams(const ModelConfig& c);
// Parameters of every tensor, the embedding and lm_head counted once each (once in all if tied):
// the model's size (Lookahead's defaults scale with it; `bench model` prints it).
int64_t NumModelParams(const ModelConfig& c);
// Parameters one forward step reads: every layer tensor, the final norm and lm_head (the
// embedding table is gathered, not read whole).
int64_t StepWeightParams(const ModelConfig& c);

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_MODEL_CONFIG_H_
