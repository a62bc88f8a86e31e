// UTF-8 helpers for the tokenizers and the streaming decoder: strict validation (no overlongs,
// surrogates or values past U+10FFFF), codepoint splitting, and repair of invalid bytes to
// U+FFFD by maximal subparts (the Unicode-recommended practice). Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_UTF8_H_
#define SPARSESERVE_COMMON_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer {

// The replacement character U+FFFD, UTF-8 encoded.
inline constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

// What starts at some position of a byte string.
struct Utf8Unit {
  enum Kind { kValid, kIncomplete, kInvalid };
  Kind kind;
  // kValid: bytes of the codepoint. kIncomplete: bytes left before the end (a valid prefix of a
  // longer sequence). kInvalid: bytes of the maximal invalid subpart (>= 1) to replace.
  size_t length;
  uint32_t codepoint;  // only for kValid
};

// REQUIRES: pos < text.size().
Utf8Unit NextUtf8Unit(absl::string_view text, size_t pos);

// Returns kInvalidArgument naming the byte offset of the first invalid sequence.
absl::Status ValidateUtf8(absl::string_view text);

// Appends the UTF-8 encoding of `codepoint` (REQUIRES: a valid scalar value).
void AppendCodepoint(uint32_t codepoint, std::string* out);

// Appends `bytes` to `out` with every invalid sequence replaced by U+FFFD. When `tail` is not
// null, an incomplete sequence at the very end is stored there instead of being replaced
// (the caller prepends it to the next bytes); otherwise it is replaced too.
void AppendRepairedUtf8(absl::string_view bytes, std::string* out, std::string* tail);

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_UTF8_H_
