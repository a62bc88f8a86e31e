// MInference per-head pattern configs in MInference's JSON layout (papers/minference.md): one
// object per layer mapping a query head id ("0", "1", ...) to [type, v, s, score], type one of
// "vertical_and_slash", "stream_llm" (A-shape: v sinks, s local window; "a_shape" is accepted
// too) and "block_sparse" (v key blocks per query block). Heads a layer does not list take the
// fallback vertical-slash (1000, 6096). `sparseserve search-patterns` writes this layout and the
// servers' --minference-config reads it.
#ifndef SPARSESERVE_COMMON_ENGINE_MINFERENCE_CONFIG_H_
#define SPARSESERVE_COMMON_ENGINE_MINFERENCE_CONFIG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/minference_index.h"

namespace sparseserve::engine {

// Parses a config for a model of `num_layers` layers and `num_heads` query heads.
// kInvalidArgument (saying where) for JSON that is not the layout, a layer count other than
// num_layers, a head id outside [0, num_heads), an unknown type or sizes < 1.
absl::StatusOr<kernels::MInferenceConfig> ParseMInferenceConfig(absl::string_view json,
                                                                int num_layers, int num_heads);
// Reads and parses `path` (kNotFound when it cannot be read; errors name the path).
absl::StatusOr<kernels::MInferenceConfig> LoadMInferenceConfig(const std::string& path,
                                                               int num_layers, int num_heads);

// The config in the layout above; `scores[layer * num_heads + head]` is written as each head's
// fourth element (the search's error; 0 when empty).
std::string MInferenceConfigJson(const kernels::MInferenceConfig& config,
                                 const std::vector<double>& scores = {});

// The patterns a server runs MInference prefill with: --minference-config's file, or the
// fallback VS(1000, 6096) on every head when `path` is empty, or, with `planted`, issue 16's
// planted index (speed runs on random weights only; every figure made with it says so).
absl::StatusOr<std::shared_ptr<const kernels::MInferenceConfig>> MInferencePatternsFor(
    const std::string& path, bool planted, int num_layers, int num_heads);

// "vertical_and_slash", "stream_llm", "block_sparse" (the JSON's type names).
absl::string_view HeadPatternTypeName(kernels::HeadPatternKind kind);

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_MINFERENCE_CONFIG_H_
