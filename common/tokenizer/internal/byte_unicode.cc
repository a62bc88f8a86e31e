#include "common/tokenizer/internal/byte_unicode.h"

#include <array>

#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 512> codepoint_to_byte;  // every mapped codepoint is < 0x144
};

bool IsSelfMapped(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

Tables BuildTables() {
  Tables t;
  t.codepoint_to_byte.fill(-1);
  uint32_t next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const uint32_t codepoint = IsSelfMapped(byte) ? static_cast<uint32_t>(byte) : next_extra++;
    AppendCodepoint(codepoint, &t.byte_to_text[byte]);
    t.codepoint_to_byte[codepoint] = byte;
  }
  return t;
}

const Tables& GetTables() {
  static const Tables tables = BuildTables();  // thread-safe static initialisation
  return tables;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t byte) {
  return GetTables().byte_to_text[byte];
}

int UnicodeToByte(uint32_t codepoint) {
  if (codepoint >= 512) return -1;
  return GetTables().codepoint_to_byte[codepoint];
}

std::string EncodeByteLevel(absl::string_view bytes) {
  const Tables& tables = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += tables.byte_to_text[static_cast<uint8_t>(c)];
  return out;
}

std::string DecodeByteLevel(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = NextUtf8Unit(text, pos);
    const int byte = unit.kind == Utf8Unit::kValid ? UnicodeToByte(unit.codepoint) : -1;
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.data() + pos, unit.length);
    }
    pos += unit.length;
  }
  return out;
}

}  // namespace sparseserve::tokenizer::internal
