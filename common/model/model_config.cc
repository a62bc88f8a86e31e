#include "common/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "nlohmann/json.hpp"

namespace sparseserve::model {
namespace {

using Json = nlohmann::json;

// Typed reads of the fields of one JSON object; errors name the field and the source file.
class JsonFields {
 public:
  // `object` must outlive this; `prefix` ("rope_scaling.") is prepended to field names.
  JsonFields(const Json& object, absl::string_view source, absl::string_view prefix = "")
      : object_(object), source_(source), prefix_(prefix) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", prefix_, key, "' ", what));
  }

  // The field, or nullptr when absent or null.
  const Json* Find(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer in [min_value, INT32_MAX]; `fallback` when absent or null, or kInvalidArgument
  // when `required`.
  absl::StatusOr<int> Int(absl::string_view key, int min_value, bool required,
                          int fallback = 0) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (required) return Error(key, "is missing");
      return fallback;
    }
    if (!v->is_number_integer()) {
      return Error(key, absl::StrCat("must be an integer, got ", v->type_name()));
    }
    const bool too_big =
        v->is_number_unsigned() && v->get<uint64_t>() > std::numeric_limits<int32_t>::max();
    const int64_t value = too_big ? 0 : v->get<int64_t>();
    if (too_big || value < min_value || value > std::numeric_limits<int32_t>::max()) {
      return Error(key, absl::StrCat("value ", v->dump(), " is outside [", min_value, ", ",
                                     std::numeric_limits<int32_t>::max(), "]"));
    }
    return static_cast<int>(value);
  }

  // A finite number greater than zero; `fallback` when absent or null unless `required`.
  absl::StatusOr<double> Positive(absl::string_view key, bool required, double fallback = 0) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (required) return Error(key, "is missing");
      return fallback;
    }
    if (!v->is_number()) return Error(key, absl::StrCat("must be a number, got ", v->type_name()));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d <= 0) return Error(key, absl::StrCat("value ", d, " must be > 0"));
    return d;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be a bool, got ", v->type_name()));
    return v->get<bool>();
  }

  // A string; `fallback` when absent or null unless `required`.
  absl::StatusOr<std::string> String(absl::string_view key, bool required,
                                     absl::string_view fallback = "") const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (required) return Error(key, "is missing");
      return std::string(fallback);
    }
    if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", v->type_name()));
    return v->get<std::string>();
  }

 private:
  const Json& object_;
  absl::string_view source_;
  std::string prefix_;  // owned: callers may pass a temporary
};

// `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5, which also moves
// `rope_theta` inside it); `key` names the one present.
absl::StatusOr<RopeScaling> ParseRopeScaling(const Json& config, absl::string_view source,
                                             const char* key) {
  RopeScaling scaling;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return scaling;
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field '", key, "' must be an object or null, got ", it->type_name()));
  }
  JsonFields fields(*it, source, absl::StrCat(key, "."));
  const bool has_rope_type = fields.Find("rope_type") != nullptr;
  SS_ASSIGN_OR_RETURN(std::string type, fields.String(has_rope_type ? "rope_type" : "type",
                                                      /*required=*/true));
  if (type == "default") return scaling;
  if (type == "linear") {
    scaling.type = RopeScalingType::kLinear;
    SS_ASSIGN_OR_RETURN(double factor, fields.Positive("factor", /*required=*/true));
    scaling.factor = static_cast<float>(factor);
    return scaling;
  }
  if (type == "llama3") {
    scaling.type = RopeScalingType::kLlama3;
    SS_ASSIGN_OR_RETURN(double factor, fields.Positive("factor", true));
    SS_ASSIGN_OR_RETURN(double low, fields.Positive("low_freq_factor", true));
    SS_ASSIGN_OR_RETURN(double high, fields.Positive("high_freq_factor", true));
    SS_ASSIGN_OR_RETURN(scaling.original_max_position_embeddings,
                        fields.Int("original_max_position_embeddings", 1, true));
    scaling.factor = static_cast<float>(factor);
    scaling.low_freq_factor = static_cast<float>(low);
    scaling.high_freq_factor = static_cast<float>(high);
    return scaling;
  }
  return absl::UnimplementedError(
      absl::StrCat(source, ": rope_scaling type '", type, "' is not supported"));
}

// `eos_token_id`: an int, a list of ints, or absent/null.
absl::StatusOr<std::vector<int32_t>> ParseEosIds(const Json& config, const JsonFields& fields) {
  std::vector<int32_t> ids;
  auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ids;
  if (it->is_array()) {
    for (const Json& id : *it) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<int32_t>::max()) {
        return fields.Error("eos_token_id",
                            absl::StrCat("entry ", id.dump(), " is not a non-negative integer"));
      }
      ids.push_back(static_cast<int32_t>(id.get<uint64_t>()));
    }
    return ids;
  }
  SS_ASSIGN_OR_RETURN(int id, fields.Int("eos_token_id", 0, true));
  ids.push_back(id);
  return ids;
}

absl::StatusOr<ModelConfig> ParseHfConfigJson(const Json& json, absl::string_view source) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  JsonFields fields(json, source);
  ModelConfig config;
  SS_ASSIGN_OR_RETURN(std::string model_type, fields.String("model_type", true));
  if (model_type == "llama") {
    config.arch = ModelArch::kLlama;
  } else if (model_type == "mistral") {
    config.arch = ModelArch::kMistral;
  } else if (model_type == "qwen2") {
    config.arch = ModelArch::kQwen2;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(source, ": model_type '", model_type, "' is not supported"));
  }
  SS_ASSIGN_OR_RETURN(std::string act, fields.String("hidden_act", false, "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(absl::StrCat(source, ": hidden_act '", act, "' unsupported"));
  }
  SS_ASSIGN_OR_RETURN(bool mlp_bias, fields.Bool("mlp_bias", false));
  if (mlp_bias) return absl::UnimplementedError(absl::StrCat(source, ": mlp_bias unsupported"));

  SS_ASSIGN_OR_RETURN(config.vocab_size, fields.Int("vocab_size", 1, true));
  SS_ASSIGN_OR_RETURN(config.hidden_size, fields.Int("hidden_size", 1, true));
  SS_ASSIGN_OR_RETURN(config.intermediate_size, fields.Int("intermediate_size", 1, true));
  SS_ASSIGN_OR_RETURN(config.num_layers, fields.Int("num_hidden_layers", 1, true));
  SS_ASSIGN_OR_RETURN(config.num_heads, fields.Int("num_attention_heads", 1, true));
  SS_ASSIGN_OR_RETURN(config.num_kv_heads,
                      fields.Int("num_key_value_heads", 1, false, config.num_heads));
  SS_ASSIGN_OR_RETURN(config.head_dim, fields.Int("head_dim", 1, false, 0));
  if (config.head_dim == 0) {
    if (config.hidden_size % config.num_heads != 0) {
      return fields.Error("head_dim",
                          "is missing and hidden_size is not a multiple of "
                          "num_attention_heads");
    }
    config.head_dim = config.hidden_size / config.num_heads;
  }
  SS_ASSIGN_OR_RETURN(config.max_position_embeddings,
                      fields.Int("max_position_embeddings", 1, true));
  // transformers' default for all three architectures.
  SS_ASSIGN_OR_RETURN(double eps, fields.Positive("rms_norm_eps", false, 1e-6));
  config.rms_norm_eps = static_cast<float>(eps);
  SS_ASSIGN_OR_RETURN(double theta, fields.Positive("rope_theta", false, 10000.0));
  const auto rope_parameters = json.find("rope_parameters");
  if (rope_parameters != json.end() && rope_parameters->is_object()) {
    JsonFields rope_fields(*rope_parameters, source, "rope_parameters.");
    SS_ASSIGN_OR_RETURN(theta, rope_fields.Positive("rope_theta", false, theta));
    SS_ASSIGN_OR_RETURN(config.rope_scaling, ParseRopeScaling(json, source, "rope_parameters"));
  } else {
    SS_ASSIGN_OR_RETURN(config.rope_scaling, ParseRopeScaling(json, source, "rope_scaling"));
  }
  config.rope_theta = static_cast<float>(theta);
  config.rope_pair_layout = RopePairLayout::kHalves;
  SS_ASSIGN_OR_RETURN(config.attention_bias, fields.Bool("attention_bias", false));
  if (config.arch == ModelArch::kQwen2) config.attention_bias = true;  // q/k/v biases always
  SS_ASSIGN_OR_RETURN(config.tie_word_embeddings, fields.Bool("tie_word_embeddings", false));
  SS_ASSIGN_OR_RETURN(config.bos_token_id, fields.Int("bos_token_id", 0, false, -1));
  SS_ASSIGN_OR_RETURN(config.eos_token_ids, ParseEosIds(json, fields));

  // transformers >= 4.56 writes `dtype`, older versions `torch_dtype`.
  const char* dtype_key = fields.Find("torch_dtype") != nullptr ? "torch_dtype" : "dtype";
  SS_ASSIGN_OR_RETURN(std::string dtype, fields.String(dtype_key, false, "float32"));
  if (dtype == "float32") {
    config.weight_dtype = DType::kF32;
  } else if (dtype == "bfloat16") {
    config.weight_dtype = DType::kBf16;
  } else if (dtype == "float16") {
    config.weight_dtype = DType::kF16;
  } else {
    return fields.Error(dtype_key, absl::StrCat("'", dtype, "' is not float32/bfloat16/float16"));
  }

  if (config.arch == ModelArch::kQwen2) {
    SS_ASSIGN_OR_RETURN(bool sliding, fields.Bool("use_sliding_window", false));
    if (sliding) {
      SS_ASSIGN_OR_RETURN(int window, fields.Int("sliding_window", 1, false, 0));
      // transformers' Qwen2: layers from max_window_layers on use the window.
      SS_ASSIGN_OR_RETURN(int first, fields.Int("max_window_layers", 0, false, config.num_layers));
      std::vector<bool> windowed(config.num_layers, false);
      for (int l = first; l < config.num_layers; ++l) windowed[l] = true;
      // transformers >= 4.53 may list each layer's kind instead.
      if (const Json* types = fields.Find("layer_types"); types != nullptr) {
        if (!types->is_array() || static_cast<int>(types->size()) != config.num_layers) {
          return fields.Error("layer_types", "must list one kind per layer");
        }
        for (int l = 0; l < config.num_layers; ++l) {
          const Json& t = (*types)[l];
          if (!t.is_string() || (t != "sliding_attention" && t != "full_attention")) {
            return fields.Error("layer_types", "entries must be sliding_attention/full_attention");
          }
          windowed[l] = t == "sliding_attention";
        }
      }
      if (window > 0 && window < config.max_position_embeddings &&
          std::find(windowed.begin(), windowed.end(), true) != windowed.end()) {
        config.sliding_window = window;
        config.windowed_layers = std::move(windowed);
      }
    }
  }
  if (config.arch == ModelArch::kMistral) {
    SS_ASSIGN_OR_RETURN(int window, fields.Int("sliding_window", 1, false, 0));
    // A window that covers the whole context changes nothing.
    if (window > 0 && window < config.max_position_embeddings) {
      config.sliding_window = window;
      config.windowed_layers.assign(config.num_layers, true);
    }
  }
  return config;
}

}  // namespace

bool ModelConfig::AllLayersWindowed() const {
  return sliding_window > 0 &&
         std::all_of(windowed_layers.begin(), windowed_layers.end(), [](bool w) { return w; });
}

absl::string_view ModelArchName(ModelArch arch) {
  switch (arch) {
    case ModelArch::kLlama: return "llama";
    case ModelArch::kMistral: return "mistral";
    case ModelArch::kQwen2: return "qwen2";
  }
  return "unknown";
}

absl::StatusOr<ModelConfig> ParseHfConfig(absl::string_view json_text, absl::string_view source) {
  absl::StatusOr<ModelConfig> config;
  // nlohmann-json throws from accessors (and bad_alloc); nothing may escape this function.
  try {
    const Json json = Json::parse(json_text.begin(), json_text.end(), /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
    }
    config = ParseHfConfigJson(json, source);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed config: ", e.what()));
  }
  if (!config.ok()) return config.status();
  SS_RETURN_IF_ERROR(AnnotateStatus(ValidateModelConfig(*config), source));
  return config;
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  auto error = [](absl::string_view field, auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("ModelConfig.", field, " ", what...));
  };
  for (const auto& [name, value] : {std::pair<const char*, int>{"vocab_size", c.vocab_size},
                                    {"hidden_size", c.hidden_size},
                                    {"intermediate_size", c.intermediate_size},
                                    {"num_layers", c.num_layers},
                                    {"num_heads", c.num_heads},
                                    {"num_kv_heads", c.num_kv_heads},
                                    {"head_dim", c.head_dim},
                                    {"max_position_embeddings", c.max_position_embeddings}}) {
    if (value <= 0) return error(name, "= ", value, " must be > 0");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return error("num_kv_heads", "= ", c.num_kv_heads, " must divide num_heads = ", c.num_heads);
  }
  if (c.head_dim % 2 != 0) return error("head_dim", "= ", c.head_dim, " must be even for RoPE");
  if (c.sliding_window < 0) return error("sliding_window", "= ", c.sliding_window, " must be >= 0");
  if (c.sliding_window > 0 && static_cast<int>(c.windowed_layers.size()) != c.num_layers) {
    return error("windowed_layers", "has ", c.windowed_layers.size(), " entries for ", c.num_layers,
                 " layers");
  }
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0)) {
    return error("rms_norm_eps", "= ", c.rms_norm_eps, " must be finite and > 0");
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0)) {
    return error("rope_theta", "= ", c.rope_theta, " must be finite and > 0");
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kNone && !(std::isfinite(s.factor) && s.factor > 0)) {
    return error("rope_scaling.factor", "= ", s.factor, " must be finite and > 0");
  }
  if (s.type == RopeScalingType::kLlama3) {
    if (!(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0)) {
      return error("rope_scaling.high_freq_factor", "= ", s.high_freq_factor,
                   " must exceed low_freq_factor = ", s.low_freq_factor, " > 0");
    }
    if (s.original_max_position_embeddings <= 0) {
      return error("rope_scaling.original_max_position_embeddings", "= ",
                   s.original_max_position_embeddings, " must be > 0");
    }
  }
  if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) {
    return error("bos_token_id", "= ", c.bos_token_id, " is outside [-1, vocab_size)");
  }
  for (int32_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return error("eos_token_ids", "entry ", id, " is outside [0, vocab_size)");
    }
  }
  if (c.weight_dtype == DType::kI32) return error("weight_dtype", "must be a float type");
  return absl::OkStatus();
}

namespace {

// Parameters of one decoder layer's vectors: two norms and the attention biases.
int64_t LayerVectorParams(const ModelConfig& c) {
  int64_t n = 2 * int64_t{c.hidden_size};
  if (c.attention_bias) {
    n += (int64_t{c.num_heads} + 2 * int64_t{c.num_kv_heads}) * c.head_dim;
    if (c.arch != ModelArch::kQwen2) n += c.hidden_size;  // o_proj bias (Llama)
  }
  return n;
}

int64_t LmHeadParams(const ModelConfig& c) {
  return int64_t{c.vocab_size} * c.hidden_size;
}

}  // namespace

int64_t LayerMatrixParams(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  return 2 * h * q + 2 * h * kv + 3 * h * c.intermediate_size;
}

int64_t NumModelParams(const ModelConfig& c) {
  const int64_t embeddings = c.tie_word_embeddings ? LmHeadParams(c) : 2 * LmHeadParams(c);
  return embeddings + c.hidden_size + c.num_layers * (LayerMatrixParams(c) + LayerVectorParams(c));
}

int64_t StepWeightParams(const ModelConfig& c) {
  return c.num_layers * (LayerMatrixParams(c) + LayerVectorParams(c)) + c.hidden_size +
         LmHeadParams(c);
}

}  // namespace sparseserve::model
