#include "common/tokenizer/internal/special_token_matcher.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {

SpecialTokenMatcher::SpecialTokenMatcher(
    const std::vector<std::pair<std::string, int32_t>>& tokens) {
  for (const auto& [text, id] : tokens) {
    // Only valid UTF-8 literals: a match then always starts and ends on codepoint boundaries of
    // (valid) input text, so the plain fragments stay valid UTF-8.
    if (text.empty() || !ValidateUtf8(text).ok()) continue;
    by_first_byte_[static_cast<uint8_t>(text[0])].emplace_back(text, id);
    empty_ = false;
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
}

std::vector<TextFragment> SpecialTokenMatcher::Split(absl::string_view text) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  if (empty_) {
    fragments.push_back({text, -1});
    return fragments;
  }
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const std::pair<std::string, int32_t>* match = nullptr;
    for (const auto& candidate : bucket) {
      if (absl::StartsWith(text.substr(pos), candidate.first)) {
        match = &candidate;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain_start) fragments.push_back({text.substr(plain_start, pos - plain_start), -1});
    fragments.push_back({text.substr(pos, match->first.size()), match->second});
    pos += match->first.size();
    plain_start = pos;
  }
  if (pos > plain_start) fragments.push_back({text.substr(plain_start, pos - plain_start), -1});
  return fragments;
}

}  // namespace sparseserve::tokenizer::internal
