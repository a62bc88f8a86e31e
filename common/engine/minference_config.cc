#include "common/engine/minference_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace sparseserve::engine {
namespace {

using kernels::HeadPattern;
using kernels::HeadPatternKind;
using nlohmann::json;

absl::StatusOr<HeadPatternKind> ParseType(const std::string& type) {
  if (type == "vertical_and_slash") return HeadPatternKind::kVerticalSlash;
  if (type == "stream_llm" || type == "a_shape") return HeadPatternKind::kAShape;
  if (type == "block_sparse") return HeadPatternKind::kBlockSparse;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown pattern type '", type, "' (vertical_and_slash, stream_llm, block_sparse)"));
}

}  // namespace

absl::string_view HeadPatternTypeName(HeadPatternKind kind) {
  switch (kind) {
    case HeadPatternKind::kVerticalSlash: return "vertical_and_slash";
    case HeadPatternKind::kAShape: return "stream_llm";
    case HeadPatternKind::kBlockSparse: return "block_sparse";
    case HeadPatternKind::kDense: return "dense";
  }
  return "?";
}

absl::StatusOr<kernels::MInferenceConfig> ParseMInferenceConfig(absl::string_view text,
                                                                int num_layers, int num_heads) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(
        "MInference config: expected a JSON list with one object per layer");
  }
  if (static_cast<int>(j.size()) != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("MInference config: ", j.size(), " layers, the model has ", num_layers));
  }
  kernels::MInferenceConfig config = kernels::MInferenceConfig::Uniform(num_layers, num_heads);
  for (int layer = 0; layer < num_layers; ++layer) {
    const json& heads = j[layer];
    if (!heads.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MInference config: layer ", layer, " is not an object of heads"));
    }
    for (const auto& [key, value] : heads.items()) {
      const std::string where =
          absl::StrCat("MInference config: layer ", layer, " head '", key, "'");
      int head = -1;
      if (!absl::SimpleAtoi(key, &head) || head < 0 || head >= num_heads) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": not a head id in [0, ", num_heads, ")"));
      }
      if (!value.is_array() || value.size() < 3 || !value[0].is_string() ||
          !value[1].is_number_integer() || !value[2].is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": expected [type, v, s, score]"));
      }
      absl::StatusOr<HeadPatternKind> kind = ParseType(value[0].get<std::string>());
      if (!kind.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", kind.status().message()));
      HeadPattern p;
      p.kind = *kind;
      const int64_t v = value[1].get<int64_t>(), s = value[2].get<int64_t>();
      if (v < 1 || v > (1 << 30) || s > (1 << 30) ||
          (p.kind != HeadPatternKind::kBlockSparse && s < 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": sizes (", v, ", ", s, ") must be >= 1"));
      }
      p.v = static_cast<int32_t>(v);
      p.s = static_cast<int32_t>(std::max<int64_t>(s, 0));
      config.heads[layer * num_heads + head] = p;
    }
  }
  return config;
}

absl::StatusOr<kernels::MInferenceConfig> LoadMInferenceConfig(const std::string& path,
                                                               int num_layers, int num_heads) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read MInference config ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<kernels::MInferenceConfig> config =
      ParseMInferenceConfig(text.str(), num_layers, num_heads);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::string MInferenceConfigJson(const kernels::MInferenceConfig& config,
                                 const std::vector<double>& scores) {
  json layers = json::array();
  for (int layer = 0; layer < config.num_layers; ++layer) {
    json heads = json::object();
    for (int head = 0; head < config.num_heads; ++head) {
      const HeadPattern& p = config.at(layer, head);
      const size_t i = static_cast<size_t>(layer) * config.num_heads + head;
      heads[std::to_string(head)] = json::array({std::string(HeadPatternTypeName(p.kind)), p.v, p.s,
                                                 i < scores.size() ? scores[i] : 0.0});
    }
    layers.push_back(std::move(heads));
  }
  return layers.dump() + "\n";
}

absl::StatusOr<std::shared_ptr<const kernels::MInferenceConfig>> MInferencePatternsFor(
    const std::string& path, bool planted, int num_layers, int num_heads) {
  kernels::MInferenceConfig config = kernels::MInferenceConfig::Uniform(num_layers, num_heads);
  if (!path.empty()) {
    absl::StatusOr<kernels::MInferenceConfig> loaded =
        LoadMInferenceConfig(path, num_layers, num_heads);
    if (!loaded.ok()) return loaded.status();
    config = *std::move(loaded);
  }
  config.planted = planted;
  return std::make_shared<const kernels::MInferenceConfig>(std::move(config));
}

}  // namespace sparseserve::engine
