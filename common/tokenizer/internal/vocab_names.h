// Vocabulary conventions shared by the tokenizer kinds: GGUF token types, the names of
// end-of-generation tokens, and byte-fallback pieces "<0xXX>". Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_VOCAB_NAMES_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_VOCAB_NAMES_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

// GGUF `tokenizer.ggml.token_type` values.
inline constexpr int32_t kTokenNormal = 1;
inline constexpr int32_t kTokenUnknown = 2;
inline constexpr int32_t kTokenControl = 3;
inline constexpr int32_t kTokenUserDefined = 4;
inline constexpr int32_t kTokenUnused = 5;
inline constexpr int32_t kTokenByte = 6;

// True for the literal texts of eos / eot / im_end style tokens ("</s>", "<|eot_id|>", ...).
bool IsEndOfGenerationName(absl::string_view piece);

// The byte of a byte-fallback piece "<0xXX>" (hex, either case); nullopt otherwise.
std::optional<uint8_t> ParseBytePiece(absl::string_view piece);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_VOCAB_NAMES_H_
