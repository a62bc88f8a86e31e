#include "common/tokenizer/internal/jinja_string_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {
namespace {

struct Codepoint {
  uint32_t value;  // U+FFFD for an invalid byte
  size_t length;   // bytes in the text
};

Codepoint DecodeAt(absl::string_view text, size_t pos) {
  const Utf8Unit unit = NextUtf8Unit(text, pos);
  if (unit.kind == Utf8Unit::kValid) return {unit.codepoint, unit.length};
  return {0xFFFD, unit.kind == Utf8Unit::kInvalid ? unit.length : text.size() - pos};
}

// One-to-one case pairs of the scripts listed in the header; `cp` itself when it has none.
uint32_t ToUpper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 0x20;
  if (cp < 0xE0) return cp;
  if (cp <= 0xFE) return cp == 0xF7 ? cp : cp - 0x20;
  if (cp == 0xFF) return 0x178;
  if ((cp >= 0x100 && cp <= 0x137 && cp != 0x130 && cp != 0x131) || (cp >= 0x14A && cp <= 0x177)) {
    return cp & ~1u;
  }
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
    return (cp & 1u) == 0 ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9) return cp == 0x3C2 ? 0x3A3 : cp - 0x20;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 0x25;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 0x3F;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 0x20;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 0x50;
  return cp;
}

uint32_t ToLower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 0x20;
  if (cp < 0xC0) return cp;
  if (cp <= 0xDE) return cp == 0xD7 ? cp : cp + 0x20;
  if (cp == 0x178) return 0xFF;
  if ((cp >= 0x100 && cp <= 0x137 && cp != 0x130 && cp != 0x131) || (cp >= 0x14A && cp <= 0x177)) {
    return cp | 1u;
  }
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
    return (cp & 1u) == 1 ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 0x20;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 0x25;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 0x3F;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  return cp;
}

bool IsCased(uint32_t cp) {
  return ToUpper(cp) != cp || ToLower(cp) != cp;
}

// Rewrites every code point through `map(cp, index)`.
template <typename Map>
std::string MapCodepoints(absl::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  size_t index = 0;
  for (size_t pos = 0; pos < text.size(); ++index) {
    const Codepoint c = DecodeAt(text, pos);
    const uint32_t mapped = map(c.value, index);
    if (mapped == c.value) {
      absl::StrAppend(&out, text.substr(pos, c.length));  // invalid bytes pass through unchanged
    } else {
      AppendCodepoint(mapped, &out);
    }
    pos += c.length;
  }
  return out;
}

bool IsLineBoundary(uint32_t cp) {
  return (cp >= 0x0A && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 ||
         cp == 0x2029;
}

}  // namespace

std::vector<absl::string_view> SplitCodepoints(absl::string_view text) {
  std::vector<absl::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    const Codepoint c = DecodeAt(text, pos);
    out.push_back(text.substr(pos, c.length));
    pos += c.length;
  }
  return out;
}

bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PythonStrip(absl::string_view text, std::optional<absl::string_view> chars,
                        StripSide side) {
  std::vector<uint32_t> strip_set;
  if (chars) {
    for (size_t pos = 0; pos < chars->size();) {
      const Codepoint c = DecodeAt(*chars, pos);
      strip_set.push_back(c.value);
      pos += c.length;
    }
  }
  auto strips = [&](uint32_t cp) {
    return chars ? std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end()
                 : IsPythonSpace(cp);
  };
  const std::vector<absl::string_view> units = SplitCodepoints(text);
  size_t first = 0;
  size_t last = units.size();
  if (side != StripSide::kRight) {
    while (first < last && strips(DecodeAt(units[first], 0).value)) ++first;
  }
  if (side != StripSide::kLeft) {
    while (last > first && strips(DecodeAt(units[last - 1], 0).value)) --last;
  }
  std::string out;
  for (size_t i = first; i < last; ++i) absl::StrAppend(&out, units[i]);
  return out;
}

std::vector<std::string> PythonSplit(absl::string_view text, std::optional<absl::string_view> sep,
                                     int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    for (size_t at = text.find(*sep);
         at != absl::string_view::npos &&
         (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit);
         at = text.find(*sep, start)) {
      parts.emplace_back(text.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  size_t pos = 0;
  while (true) {
    while (pos < text.size() && IsPythonSpace(DecodeAt(text, pos).value)) {
      pos += DecodeAt(text, pos).length;
    }
    if (pos >= text.size()) return parts;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(text.substr(pos));  // the rest, trailing whitespace included
      return parts;
    }
    const size_t start = pos;
    while (pos < text.size() && !IsPythonSpace(DecodeAt(text, pos).value)) {
      pos += DecodeAt(text, pos).length;
    }
    parts.emplace_back(text.substr(start, pos - start));
  }
}

std::vector<std::string> PythonSplitLines(absl::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Codepoint c = DecodeAt(text, pos);
    if (!IsLineBoundary(c.value)) {
      pos += c.length;
      continue;
    }
    lines.emplace_back(text.substr(start, pos - start));
    pos += c.length;
    if (c.value == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
    start = pos;
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return lines;
}

std::string PythonUpper(absl::string_view text) {
  return MapCodepoints(text, [](uint32_t cp, size_t) { return ToUpper(cp); });
}

std::string PythonLower(absl::string_view text) {
  return MapCodepoints(text, [](uint32_t cp, size_t) { return ToLower(cp); });
}

std::string PythonCapitalize(absl::string_view text) {
  return MapCodepoints(
      text, [](uint32_t cp, size_t index) { return index == 0 ? ToUpper(cp) : ToLower(cp); });
}

std::string PythonTitle(absl::string_view text) {
  bool previous_cased = false;
  return MapCodepoints(text, [&](uint32_t cp, size_t) {
    const uint32_t mapped = previous_cased ? ToLower(cp) : ToUpper(cp);
    previous_cased = IsCased(cp);
    return mapped;
  });
}

std::string JinjaTitle(absl::string_view text) {
  bool word_start = true;
  return MapCodepoints(text, [&](uint32_t cp, size_t) {
    const bool separator =
        IsPythonSpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    const uint32_t mapped = separator ? cp : (word_start ? ToUpper(cp) : ToLower(cp));
    word_start = separator;
    return mapped;
  });
}

std::string PythonReplace(absl::string_view text, absl::string_view old_text,
                          absl::string_view new_text, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    for (absl::string_view unit : SplitCodepoints(text)) {
      if (count < 0 || done < count) {
        absl::StrAppend(&out, new_text);
        ++done;
      }
      absl::StrAppend(&out, unit);
    }
    if (count < 0 || done < count) absl::StrAppend(&out, new_text);
    return out;
  }
  size_t start = 0;
  for (size_t at = text.find(old_text);
       at != absl::string_view::npos && (count < 0 || done < count);
       at = text.find(old_text, start)) {
    absl::StrAppend(&out, text.substr(start, at - start));
    absl::StrAppend(&out, new_text);
    start = at + old_text.size();
    ++done;
  }
  absl::StrAppend(&out, text.substr(start));
  return out;
}

int64_t PythonFind(absl::string_view text, absl::string_view needle) {
  const size_t at = text.find(needle);
  return at == absl::string_view::npos ? -1 : CodepointLength(text.substr(0, at));
}

int64_t PythonCount(absl::string_view text, absl::string_view needle) {
  if (needle.empty()) return CodepointLength(text) + 1;
  int64_t count = 0;
  for (size_t at = text.find(needle); at != absl::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

int64_t CodepointLength(absl::string_view text) {
  return static_cast<int64_t>(SplitCodepoints(text).size());
}

}  // namespace sparseserve::tokenizer::internal
