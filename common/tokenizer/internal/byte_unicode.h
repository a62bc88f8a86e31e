// GPT-2's reversible byte <-> unicode mapping used by byte-level BPE vocabularies: printable
// bytes map to themselves, the other 68 bytes to U+0100 onwards in byte order (so ' ' is 'Ġ').
// Tables are built once; thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_BYTE_UNICODE_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_BYTE_UNICODE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

// The UTF-8 text of the codepoint that stands for `byte`.
const std::string& ByteToUnicode(uint8_t byte);

// The byte a codepoint stands for, -1 if it is not one of the 256 mapped codepoints.
int UnicodeToByte(uint32_t codepoint);

// Maps every byte of `bytes` to its codepoint.
std::string EncodeByteLevel(absl::string_view bytes);

// Inverse of EncodeByteLevel for valid UTF-8 `text`; codepoints outside the mapping (or invalid
// bytes) are copied unchanged.
std::string DecodeByteLevel(absl::string_view text);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_BYTE_UNICODE_H_
