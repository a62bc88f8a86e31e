#include "common/tokenizer/utf8.h"

#include "absl/strings/str_cat.h"

namespace sparseserve::tokenizer {
namespace {

// Number of bytes announced by a lead byte, 0 for bytes that cannot start a sequence.
size_t SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Valid range of the second byte, which excludes overlongs, surrogates and > U+10FFFF.
bool SecondByteValid(uint8_t lead, uint8_t second) {
  switch (lead) {
    case 0xE0: return second >= 0xA0 && second <= 0xBF;
    case 0xED: return second >= 0x80 && second <= 0x9F;
    case 0xF0: return second >= 0x90 && second <= 0xBF;
    case 0xF4: return second >= 0x80 && second <= 0x8F;
    default: return second >= 0x80 && second <= 0xBF;
  }
}

}  // namespace

Utf8Unit NextUtf8Unit(absl::string_view text, size_t pos) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t lead = bytes[pos];
  const size_t length = SequenceLength(lead);
  if (length == 0) return {Utf8Unit::kInvalid, 1, 0};
  if (length == 1) return {Utf8Unit::kValid, 1, lead};
  uint32_t codepoint = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {Utf8Unit::kIncomplete, i, 0};
    const uint8_t byte = bytes[pos + i];
    const bool ok = i == 1 ? SecondByteValid(lead, byte) : (byte & 0xC0) == 0x80;
    if (!ok) return {Utf8Unit::kInvalid, i, 0};
    codepoint = (codepoint << 6) | (byte & 0x3F);
  }
  return {Utf8Unit::kValid, length, codepoint};
}

absl::Status ValidateUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Unit unit = NextUtf8Unit(text, pos);
    if (unit.kind != Utf8Unit::kValid) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8 at byte offset ", pos));
    }
    pos += unit.length;
  }
  return absl::OkStatus();
}

void AppendCodepoint(uint32_t codepoint, std::string* out) {
  if (codepoint < 0x80) {
    out->push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (codepoint >> 18)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

void AppendRepairedUtf8(absl::string_view bytes, std::string* out, std::string* tail) {
  size_t pos = 0;
  size_t valid_start = 0;  // start of the run of valid units not yet copied
  while (pos < bytes.size()) {
    const Utf8Unit unit = NextUtf8Unit(bytes, pos);
    if (unit.kind == Utf8Unit::kValid) {
      pos += unit.length;
      continue;
    }
    out->append(bytes.data() + valid_start, pos - valid_start);
    if (unit.kind == Utf8Unit::kIncomplete && tail != nullptr) {
      tail->assign(bytes.data() + pos, unit.length);
      return;
    }
    out->append(kReplacementChar.data(), kReplacementChar.size());
    pos += unit.length;
    valid_start = pos;
  }
  out->append(bytes.data() + valid_start, pos - valid_start);
  if (tail != nullptr) tail->clear();
}

}  // namespace sparseserve::tokenizer
