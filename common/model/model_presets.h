// Named synthetic ModelConfigs with the shapes of real checkpoints, for benchmarks and tests that
// need a model's cost (weight bytes, FLOPs, KV bytes) without its weights: pair one with
// LlamaModel::CreateRandom. The shapes follow the published config.json of each model; the
// values that only matter for tokenization (bos/eos) are filled for completeness.
//
// Pure functions over constant tables; thread-safe.
#ifndef SPARSESERVE_COMMON_MODEL_MODEL_PRESETS_H_
#define SPARSESERVE_COMMON_MODEL_MODEL_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/model_config.h"

namespace sparseserve::model {

// The preset names, in the order `--help` lists them: "llama3-8b", "llama3-8b-tp2-rank",
// "llama3-70b-layer",
// "llama3-70b", "mistral-7b", "qwen2-7b", "tiny".
std::vector<std::string> SyntheticModelNames();

// The config of preset `name`; it passes ValidateModelConfig. kNotFound for an unknown name, with
// the valid names in the message.
absl::StatusOr<ModelConfig> SyntheticModelConfig(absl::string_view name);

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_MODEL_PRESETS_H_
