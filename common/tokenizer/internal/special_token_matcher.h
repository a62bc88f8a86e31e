// Finds added/special tokens written literally in text (longest match at each position) and
// cuts the text into literal-token and plain-text fragments. Immutable after construction,
// thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SPECIAL_TOKEN_MATCHER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SPECIAL_TOKEN_MATCHER_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

// A piece of the input: either a matched token (id >= 0) or plain text (id == -1).
struct TextFragment {
  absl::string_view text;
  int32_t id = -1;
};

class SpecialTokenMatcher {
 public:
  // `tokens`: (literal text, id) pairs; empty texts are ignored.
  explicit SpecialTokenMatcher(const std::vector<std::pair<std::string, int32_t>>& tokens);

  // Splits `text` into fragments, in order; adjacent plain text is one fragment and no
  // fragment is empty. Views point into `text`.
  std::vector<TextFragment> Split(absl::string_view text) const;

 private:
  // Candidates by first byte, longest first.
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_byte_;
  bool empty_ = true;
};

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_SPECIAL_TOKEN_MATCHER_H_
