// The parts of a Hugging Face tokenizer.json shared by both BPE kinds: the model's vocab and
// merges, the added tokens, and BOS from the post-processor template. Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_HF_BPE_MODEL_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_HF_BPE_MODEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace sparseserve::tokenizer::internal {

struct HfBpeModel {
  std::vector<std::string> tokens;   // by id; "" for ids no entry names
  std::vector<int32_t> token_types;  // GGUF types: normal, control (special added tokens),
                                     // user-defined (other added tokens), unused (gaps)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  int32_t unk_id = -1;                                      // model.unk_token
  int32_t bos_id = -1;        // the special token the post-processor puts before $A
  bool template_bos = false;  // the post-processor adds bos_id
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// Parses `root["model"]` (REQUIRES: type "BPE", checked by the caller), `root["added_tokens"]`
// and `root["post_processor"]`. Returns kInvalidArgument for missing or mistyped fields,
// duplicate or negative ids, ids too sparse to be a vocabulary, or malformed merges.
// May throw nlohmann::json::exception only on a library bug; the caller catches anyway.
absl::StatusOr<HfBpeModel> ParseHfBpeModel(const nlohmann::json& root);

// Every object reachable from `node` through "Sequence" containers (keys "pretokenizers",
// "normalizers", "decoders", "processors"), `node` itself first; nulls skipped.
// Returns kInvalidArgument past a nesting depth of 8.
absl::StatusOr<std::vector<const nlohmann::json*>> FlattenSequence(const nlohmann::json& node);

// `node[key]` as a string, or `fallback` when absent or not a string.
std::string StringField(const nlohmann::json& node, absl::string_view key,
                        absl::string_view fallback = "");
// `node[key]` as a bool, or `fallback` when absent or not a bool.
bool BoolField(const nlohmann::json& node, absl::string_view key, bool fallback);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_HF_BPE_MODEL_H_
