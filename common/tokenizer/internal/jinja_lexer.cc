#include "common/tokenizer/internal/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {
namespace {

constexpr absl::string_view kWhitespace = " \t\n\r\f\v";
// Longest first, so that "//" wins over "/".
constexpr absl::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", "<=", ">="};
constexpr absl::string_view kOneCharOperators = "+-*/%~<>=.:|,()[]{}";

bool IsSpace(char c) {
  return kWhitespace.find(c) != absl::string_view::npos;
}
bool IsNameStart(char c) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// \r\n and \r become \n (Jinja's newline_sequence); one trailing newline is dropped.
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(absl::string_view source) : src_(NormalizeNewlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<JinjaToken>> Run() {
    while (pos_ < src_.size()) {
      const size_t open = FindTagOpen(pos_);
      if (open == std::string::npos) {
        Emit(JinjaTokenKind::kText, src_.substr(pos_), pos_);
        break;
      }
      const char type = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      EmitTextBefore(open, type != '{', modifier);
      const size_t inner = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      if (type == '#') {
        SS_RETURN_IF_ERROR(SkipComment(open, inner));
      } else if (type == '%' && MatchRawOpen(inner)) {
        SS_RETURN_IF_ERROR(LexRaw());
      } else {
        SS_RETURN_IF_ERROR(LexTag(open, inner, type == '%'));
      }
    }
    Emit(JinjaTokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  // Whether `text` is at `pos` of the source.
  bool At(size_t pos, absl::string_view text) const {
    return pos <= src_.size() && absl::string_view(src_).substr(pos, text.size()) == text;
  }

  size_t FindTagOpen(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string::npos; at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) {
        return at;
      }
    }
    return std::string::npos;
  }

  // Emits src_[pos_, tag_pos) with the whitespace rules of the tag that follows it: `-` strips
  // all trailing whitespace; otherwise a block or comment tag (`lstrip`) alone on its line so
  // far drops the spaces before it, unless marked `+`.
  void EmitTextBefore(size_t tag_pos, bool lstrip, char modifier) {
    std::string text = src_.substr(pos_, tag_pos - pos_);
    if (modifier == '-') {
      text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
    } else if (lstrip && modifier != '+') {
      const size_t line_pos = text.rfind('\n') + 1;  // npos + 1 == 0
      const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
      if ((line_pos > 0 || line_starting) && line_pos < text.size() &&
          std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_pos), text.end(),
                      [](char c) { return c != '\n' && IsSpace(c); })) {
        text.erase(line_pos);
      }
    }
    if (!text.empty()) Emit(JinjaTokenKind::kText, std::move(text), pos_);
    pos_ = tag_pos;
  }

  // After a tag's closing delimiter at `end` (`strip`: it was preceded by `-`; `trim`: it ends a
  // block or comment not marked `+`).
  void SkipAfterTag(size_t end, bool strip, bool trim) {
    pos_ = end;
    if (strip) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
    } else if (trim && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  absl::Status SkipComment(size_t open, size_t inner) {
    const size_t close = src_.find("#}", inner);
    if (close == std::string::npos) return Error(open, "unclosed comment");
    const char before = close > inner ? src_[close - 1] : '\0';
    SkipAfterTag(close + 2, before == '-', before != '+');
    return absl::OkStatus();
  }

  // `{% raw %}` / `{%- raw -%}` starting at pos_; on a match leaves pos_ after it.
  bool MatchRawOpen(size_t inner) {
    size_t at = inner;
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    if (!At(at, "raw") || (at + 3 < src_.size() && IsNameChar(src_[at + 3]))) {
      return false;
    }
    at += 3;
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    const bool strip = at < src_.size() && src_[at] == '-';
    if (strip) ++at;
    if (!At(at, "%}")) return false;
    SkipAfterTag(at + 2, strip, /*trim=*/false);  // Jinja applies no trim_blocks after raw
    return true;
  }

  // The body of a raw block up to `{% endraw %}`, emitted verbatim.
  absl::Status LexRaw() {
    const size_t body = pos_;
    for (size_t open = src_.find("{%", body); open != std::string::npos;
         open = src_.find("{%", open + 1)) {
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      size_t at = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      while (at < src_.size() && IsSpace(src_[at])) ++at;
      if (!At(at, "endraw")) continue;
      at += 6;
      while (at < src_.size() && IsSpace(src_[at])) ++at;
      const char close_modifier = at < src_.size() ? src_[at] : '\0';
      if (close_modifier == '-' || close_modifier == '+') ++at;
      if (!At(at, "%}")) continue;
      EmitTextBefore(open, /*lstrip=*/true, modifier);
      SkipAfterTag(at + 2, close_modifier == '-', close_modifier != '+');
      return absl::OkStatus();
    }
    return Error(body, "missing {% endraw %}");
  }

  // One `{{ ... }}` or `{% ... %}` tag: its begin token, the expression tokens, its end token.
  absl::Status LexTag(size_t open, size_t inner, bool is_block) {
    Emit(is_block ? JinjaTokenKind::kBlockBegin : JinjaTokenKind::kVariableBegin,
         is_block ? "{%" : "{{", open);
    pos_ = inner;
    int balance = 0;  // open ( [ {: a "}}" inside a dict literal is not the end
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return Error(open, is_block ? "unclosed '{%'" : "unclosed '{{'");
      if (balance == 0) {
        const absl::string_view close = is_block ? "%}" : "}}";
        const bool strip = src_[pos_] == '-' && At(pos_ + 1, close);
        const bool keep = is_block && src_[pos_] == '+' && At(pos_ + 1, close);
        if (strip || keep || At(pos_, close)) {
          const size_t close_pos = pos_ + (strip || keep ? 1 : 0);
          Emit(is_block ? JinjaTokenKind::kBlockEnd : JinjaTokenKind::kVariableEnd,
               std::string(close), close_pos);
          SkipAfterTag(close_pos + 2, strip, is_block && !keep);
          return absl::OkStatus();
        }
      }
      SS_RETURN_IF_ERROR(LexExpressionToken(&balance));
    }
  }

  absl::Status LexExpressionToken(int* balance) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (IsNameStart(c)) {
      while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
      Emit(JinjaTokenKind::kName, src_.substr(start, pos_ - start), start);
      return absl::OkStatus();
    }
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) return LexNumber();
    if (c == '\'' || c == '"') return LexString();
    for (absl::string_view op : kTwoCharOperators) {
      if (At(pos_, op)) {
        pos_ += 2;
        Emit(JinjaTokenKind::kOperator, std::string(op), start);
        return absl::OkStatus();
      }
    }
    if (kOneCharOperators.find(c) == absl::string_view::npos) {
      return Error(start, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++*balance;
    if ((c == ')' || c == ']' || c == '}') && *balance > 0) --*balance;
    ++pos_;
    Emit(JinjaTokenKind::kOperator, std::string(1, c), start);
    return absl::OkStatus();
  }

  // Integers (digits, `_` separators) and floats (digits '.' digits, optional exponent).
  absl::Status LexNumber() {
    const size_t start = pos_;
    std::string digits;
    auto read_digits = [&] {
      while (pos_ < src_.size() &&
             (absl::ascii_isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        if (src_[pos_] != '_') digits.push_back(src_[pos_]);
        ++pos_;
      }
    };
    read_digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        absl::ascii_isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      digits.push_back('.');
      ++pos_;
      read_digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t at = pos_ + 1;
      if (at < src_.size() && (src_[at] == '+' || src_[at] == '-')) ++at;
      if (at < src_.size() && absl::ascii_isdigit(static_cast<unsigned char>(src_[at]))) {
        is_float = true;
        digits += src_.substr(pos_, at - pos_);
        pos_ = at;
        read_digits();
      }
    }
    JinjaToken token = MakeToken(is_float ? JinjaTokenKind::kFloat : JinjaTokenKind::kInteger,
                                 src_.substr(start, pos_ - start), start);
    if (is_float) {
      token.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      const auto result =
          std::from_chars(digits.data(), digits.data() + digits.size(), token.int_value);
      if (result.ec != std::errc()) return Error(start, "integer literal out of range");
    }
    tokens_.push_back(std::move(token));
    return absl::OkStatus();
  }

  // A quoted literal, unescaped as Python's "unicode-escape" codec does.
  absl::Status LexString() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
      SS_RETURN_IF_ERROR(AppendEscape(start, &value));
    }
    Emit(JinjaTokenKind::kString, std::move(value), start);
    return absl::OkStatus();
  }

  // The escape whose backslash precedes pos_.
  absl::Status AppendEscape(size_t literal_pos, std::string* value) {
    const char c = src_[pos_++];
    switch (c) {
      case '\n': return absl::OkStatus();  // line continuation
      case 'n': value->push_back('\n'); return absl::OkStatus();
      case 't': value->push_back('\t'); return absl::OkStatus();
      case 'r': value->push_back('\r'); return absl::OkStatus();
      case 'b': value->push_back('\b'); return absl::OkStatus();
      case 'f': value->push_back('\f'); return absl::OkStatus();
      case 'v': value->push_back('\v'); return absl::OkStatus();
      case 'a': value->push_back('\a'); return absl::OkStatus();
      case '\\':
      case '\'':
      case '"': value->push_back(c); return absl::OkStatus();
      case 'x':
      case 'u':
      case 'U': {
        const size_t num_digits = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
        uint32_t codepoint = 0;
        const char* first = src_.data() + pos_;
        const auto result = std::from_chars(
            first, src_.data() + std::min(src_.size(), pos_ + num_digits), codepoint, 16);
        if (result.ec != std::errc() || result.ptr != first + num_digits || codepoint > 0x10FFFF ||
            (codepoint >= 0xD800 && codepoint <= 0xDFFF)) {
          return Error(literal_pos, absl::StrCat("invalid \\", std::string(1, c), " escape"));
        }
        pos_ += num_digits;
        AppendCodepoint(codepoint, value);
        return absl::OkStatus();
      }
      default:
        if (c >= '0' && c <= '7') {  // up to three octal digits
          uint32_t codepoint = static_cast<uint32_t>(c - '0');
          for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
               ++i) {
            codepoint = codepoint * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
          }
          AppendCodepoint(codepoint, value);
          return absl::OkStatus();
        }
        value->push_back('\\');  // unknown escapes stay as written, as in Python
        value->push_back(c);
        return absl::OkStatus();
    }
  }

  JinjaToken MakeToken(JinjaTokenKind kind, std::string text, size_t offset) const {
    JinjaToken token;
    token.kind = kind;
    token.text = std::move(text);
    const auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    token.line = static_cast<int>(line - line_starts_.begin()) + 1;
    token.column = static_cast<int>(offset - *line) + 1;
    return token;
  }

  void Emit(JinjaTokenKind kind, std::string text, size_t offset) {
    tokens_.push_back(MakeToken(kind, std::move(text), offset));
  }

  absl::Status Error(size_t offset, absl::string_view what) const {
    const JinjaToken at = MakeToken(JinjaTokenKind::kEnd, "", offset);
    return absl::InvalidArgumentError(
        absl::StrCat("line ", at.line, ", column ", at.column, ": ", what));
  }

  const std::string src_;
  std::vector<size_t> line_starts_;  // offset of the first byte of each line
  size_t pos_ = 0;
  std::vector<JinjaToken> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<JinjaToken>> LexJinja(absl::string_view source) {
  return Lexer(source).Run();
}

}  // namespace sparseserve::tokenizer::internal
