// ModelConfigFromGguf (declared in model_config.h): the GGUF metadata half of ModelConfig.
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"

namespace sparseserve::model {
namespace {

constexpr uint64_t kInt32Max = static_cast<uint64_t>(std::numeric_limits<int32_t>::max());

// `<arch>.<suffix>` as a positive int; `fallback` when absent unless `required`.
absl::StatusOr<int> ReadPositiveInt(const GgufFile& gguf, const std::string& key, bool required,
                                    int fallback = 0) {
  const GgufMetadata& md = gguf.metadata();
  if (!md.Has(key)) {
    if (required) return md.GetUint(key).status();  // kNotFound naming the key
    return fallback;
  }
  SS_ASSIGN_OR_RETURN(uint64_t v, md.GetUint(key));
  if (v == 0 || v > kInt32Max) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf.source(), ": metadata key '", key, "' value ", v, " is outside [1, ", kInt32Max, "]"));
  }
  return static_cast<int>(v);
}

// A token id key; -1 when absent or beyond int32 (llama.cpp writes UINT32_MAX for "none").
absl::StatusOr<int32_t> ReadTokenId(const GgufMetadata& md, const std::string& key) {
  if (!md.Has(key)) return -1;
  SS_ASSIGN_OR_RETURN(uint64_t v, md.GetUint(key));
  return v > kInt32Max ? -1 : static_cast<int32_t>(v);
}

// The tensor type holding the most elements.
absl::StatusOr<DType> DominantDType(const GgufFile& gguf) {
  std::map<uint32_t, uint64_t> elems_by_type;
  for (const GgufTensorInfo& info : gguf.tensor_infos()) {
    uint64_t& sum = elems_by_type[info.ggml_type];
    const uint64_t n = static_cast<uint64_t>(info.shape.numel());
    sum = n > std::numeric_limits<uint64_t>::max() - sum ? std::numeric_limits<uint64_t>::max()
                                                         : sum + n;
  }
  uint32_t best_type = kGgmlTypeF32;
  uint64_t best = 0;
  for (const auto& [type, n] : elems_by_type) {
    if (n > best) {
      best_type = type;
      best = n;
    }
  }
  switch (best_type) {
    case kGgmlTypeF32: return DType::kF32;
    case kGgmlTypeF16: return DType::kF16;
    case kGgmlTypeBf16: return DType::kBf16;
    default:
      return absl::UnimplementedError(absl::StrCat(gguf.source(), ": weights are mostly ggml type ",
                                                   GgmlTypeName(best_type),
                                                   "; only F32, F16 and BF16 are supported"));
  }
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf) {
  const GgufMetadata& md = gguf.metadata();
  const std::string& source = gguf.source();
  ModelConfig config;
  SS_ASSIGN_OR_RETURN(std::string arch, md.GetString("general.architecture"));
  if (arch == "llama") {
    config.arch = ModelArch::kLlama;
  } else if (arch == "mistral") {
    config.arch = ModelArch::kMistral;
  } else if (arch == "qwen2") {
    config.arch = ModelArch::kQwen2;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(source, ": general.architecture '", arch, "' is not supported"));
  }
  auto key = [&arch](absl::string_view suffix) { return absl::StrCat(arch, ".", suffix); };

  SS_ASSIGN_OR_RETURN(config.max_position_embeddings,
                      ReadPositiveInt(gguf, key("context_length"), true));
  SS_ASSIGN_OR_RETURN(config.hidden_size, ReadPositiveInt(gguf, key("embedding_length"), true));
  SS_ASSIGN_OR_RETURN(config.num_layers, ReadPositiveInt(gguf, key("block_count"), true));
  SS_ASSIGN_OR_RETURN(config.intermediate_size,
                      ReadPositiveInt(gguf, key("feed_forward_length"), true));
  SS_ASSIGN_OR_RETURN(config.num_heads, ReadPositiveInt(gguf, key("attention.head_count"), true));
  SS_ASSIGN_OR_RETURN(config.num_kv_heads, ReadPositiveInt(gguf, key("attention.head_count_kv"),
                                                           false, config.num_heads));
  SS_ASSIGN_OR_RETURN(double eps, md.GetFloat(key("attention.layer_norm_rms_epsilon")));
  config.rms_norm_eps = static_cast<float>(eps);
  if (md.Has(key("rope.freq_base"))) {
    SS_ASSIGN_OR_RETURN(double theta, md.GetFloat(key("rope.freq_base")));
    config.rope_theta = static_cast<float>(theta);
  }

  if (md.Has(key("vocab_size"))) {
    SS_ASSIGN_OR_RETURN(config.vocab_size, ReadPositiveInt(gguf, key("vocab_size"), true));
  } else if (md.Has("tokenizer.ggml.tokens")) {
    SS_ASSIGN_OR_RETURN(uint64_t n, md.GetArrayLength("tokenizer.ggml.tokens"));
    if (n == 0 || n > kInt32Max) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tokenizer.ggml.tokens has ", n, " entries"));
    }
    config.vocab_size = static_cast<int>(n);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(source, ": neither ", key("vocab_size"),
                                                   " nor tokenizer.ggml.tokens is present"));
  }

  const int default_head_dim =
      config.hidden_size % config.num_heads == 0 ? config.hidden_size / config.num_heads : 0;
  SS_ASSIGN_OR_RETURN(config.head_dim,
                      ReadPositiveInt(gguf, key("attention.key_length"), false, default_head_dim));
  if (md.Has(key("rope.dimension_count"))) {
    SS_ASSIGN_OR_RETURN(int rope_dims, ReadPositiveInt(gguf, key("rope.dimension_count"), true));
    if (rope_dims != config.head_dim) {
      return absl::UnimplementedError(
          absl::StrCat(source, ": partial RoPE (", rope_dims, " of ", config.head_dim, " dims)"));
    }
  }

  if (md.Has(key("rope.scaling.type"))) {
    SS_ASSIGN_OR_RETURN(std::string type, md.GetString(key("rope.scaling.type")));
    if (type == "linear") {
      config.rope_scaling.type = RopeScalingType::kLinear;
      SS_ASSIGN_OR_RETURN(double factor, md.GetFloat(key("rope.scaling.factor")));
      config.rope_scaling.factor = static_cast<float>(factor);
    } else if (type != "none") {
      return absl::UnimplementedError(
          absl::StrCat(source, ": rope scaling type '", type, "' is not supported"));
    }
  }
  // llama.cpp stores Llama 3.1's "llama3" scaling as per-dimension factors in this tensor.
  if (gguf.HasTensor("rope_freqs.weight")) {
    return absl::UnimplementedError(
        absl::StrCat(source, ": rope_freqs.weight (llama3 RoPE scaling) is not supported"));
  }

  config.rope_pair_layout =
      config.arch == ModelArch::kQwen2 ? RopePairLayout::kHalves : RopePairLayout::kAdjacent;
  config.attention_bias = config.arch == ModelArch::kQwen2 || gguf.HasTensor("blk.0.attn_q.bias");
  config.tie_word_embeddings = !gguf.HasTensor("output.weight");
  SS_ASSIGN_OR_RETURN(config.bos_token_id, ReadTokenId(md, "tokenizer.ggml.bos_token_id"));
  SS_ASSIGN_OR_RETURN(int32_t eos, ReadTokenId(md, "tokenizer.ggml.eos_token_id"));
  if (eos >= 0) config.eos_token_ids.push_back(eos);
  SS_ASSIGN_OR_RETURN(config.weight_dtype, DominantDType(gguf));
  SS_RETURN_IF_ERROR(AnnotateStatus(ValidateModelConfig(config), source));
  return config;
}

}  // namespace sparseserve::model
