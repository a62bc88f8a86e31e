// JinjaToJson: the `tojson` filter of Hugging Face chat templates. transformers replaces Jinja's
// own filter (sorted keys, HTML-escaped <>&') with plain Python
// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)` and lets
// templates pass those four arguments; this reproduces that output byte for byte.
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_JSON_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_JSON_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

// Longest indentation accepted (Python has no limit; this one keeps the output bounded).
inline constexpr size_t kMaxJinjaJsonIndent = 256;

// json.dumps's arguments, with transformers' defaults.
struct JinjaJsonOptions {
  bool ensure_ascii = false;          // escape every non-ASCII character as \uXXXX
  std::optional<std::string> indent;  // nullopt: one line; else the text of one indent level
  // Python picks (", ", ": ") without an indent and (",", ": ") with one unless told.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

// Returns kInvalidArgument ("Object of type Undefined is not JSON serializable") for undefined
// values, namespaces and functions anywhere inside `value`, for an indent longer than
// kMaxJinjaJsonIndent and for output past kMaxJinjaStringBytes.
absl::StatusOr<std::string> JinjaToJson(const JinjaValue& value, const JinjaJsonOptions& options);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_JSON_H_
