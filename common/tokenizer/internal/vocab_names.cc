#include "common/tokenizer/internal/vocab_names.h"

#include <array>

namespace sparseserve::tokenizer::internal {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool IsEndOfGenerationName(absl::string_view piece) {
  static constexpr std::array<absl::string_view, 11> kNames = {
      "</s>",    "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>",
      "<|end|>", "<end_of_turn>", "<eos>",           "<|EOT|>",    "<|return|>"};
  for (absl::string_view name : kNames) {
    if (piece == name) return true;
  }
  return false;
}

std::optional<uint8_t> ParseBytePiece(absl::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  const int hi = HexValue(piece[3]);
  const int lo = HexValue(piece[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

}  // namespace sparseserve::tokenizer::internal
