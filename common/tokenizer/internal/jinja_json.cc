#include "common/tokenizer/internal/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/core/status.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {
namespace {

class JsonWriter {
 public:
  explicit JsonWriter(const JinjaJsonOptions& options)
      : options_(options),
        item_separator_(options.item_separator.value_or(options.indent ? "," : ", ")),
        key_separator_(options.key_separator.value_or(": ")) {}

  absl::Status Write(const JinjaValue& value, int level) {
    using Kind = JinjaValue::Kind;
    if (out_.size() > kMaxJinjaStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tojson output is over the limit of ", kMaxJinjaStringBytes, " bytes"));
    }
    switch (value.kind()) {
      case Kind::kNone: out_ += "null"; return absl::OkStatus();
      case Kind::kBool: out_ += value.bool_value() ? "true" : "false"; return absl::OkStatus();
      case Kind::kInt: absl::StrAppend(&out_, value.int_value()); return absl::OkStatus();
      case Kind::kFloat: WriteFloat(value.float_value()); return absl::OkStatus();
      case Kind::kString: WriteString(value.string_value()); return absl::OkStatus();
      case Kind::kList: return WriteList(value.list(), level);
      case Kind::kDict: return WriteDict(value.dict(), level);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Object of type ", value.TypeName(), " is not JSON serializable"));
    }
  }

  std::string& out() { return out_; }

 private:
  // Python's float repr, with JSON's names for the non-finite values.
  void WriteFloat(double d) {
    if (std::isnan(d)) {
      out_ += "NaN";
    } else if (std::isinf(d)) {
      out_ += d < 0 ? "-Infinity" : "Infinity";
    } else {
      out_ += PythonFloatRepr(d);
    }
  }

  void WriteString(const std::string& s) {
    out_.push_back('"');
    for (size_t pos = 0; pos < s.size();) {
      const Utf8Unit unit = NextUtf8Unit(s, pos);
      const uint32_t cp = unit.kind == Utf8Unit::kValid ? unit.codepoint : 0xFFFD;
      switch (cp) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        case '\b': out_ += "\\b"; break;
        case '\f': out_ += "\\f"; break;
        default:
          if (cp < 0x20) {
            absl::StrAppendFormat(&out_, "\\u%04x", cp);
          } else if (cp >= 0x80 && options_.ensure_ascii) {
            AppendAsciiEscape(cp);
          } else if (unit.kind == Utf8Unit::kValid) {
            out_.append(s, pos, unit.length);
          } else {
            absl::StrAppend(&out_, kReplacementChar);
          }
      }
      pos += unit.length;
    }
    out_.push_back('"');
  }

  // \uXXXX, as a UTF-16 surrogate pair above the BMP.
  void AppendAsciiEscape(uint32_t cp) {
    if (cp < 0x10000) {
      absl::StrAppendFormat(&out_, "\\u%04x", cp);
      return;
    }
    const uint32_t v = cp - 0x10000;
    absl::StrAppendFormat(&out_, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
  }

  // A newline and `level` indents: before each element and before the closing bracket.
  void WriteBreak(int level) {
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  absl::Status WriteList(const JinjaList& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return absl::OkStatus();
    }
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      if (options_.indent) WriteBreak(level + 1);
      SS_RETURN_IF_ERROR(Write(items[i], level + 1));
    }
    if (options_.indent) WriteBreak(level);
    out_.push_back(']');
    return absl::OkStatus();
  }

  absl::Status WriteDict(const JinjaDict& dict, int level) {
    if (dict.size() == 0) {
      out_ += "{}";
      return absl::OkStatus();
    }
    std::vector<const std::pair<std::string, JinjaValue>*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::sort(entries.begin(), entries.end(),
                [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out_.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      if (options_.indent) WriteBreak(level + 1);
      WriteString(entries[i]->first);
      out_ += key_separator_;
      SS_RETURN_IF_ERROR(Write(entries[i]->second, level + 1));
    }
    if (options_.indent) WriteBreak(level);
    out_.push_back('}');
    return absl::OkStatus();
  }

  const JinjaJsonOptions& options_;
  const std::string item_separator_;
  const std::string key_separator_;
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> JinjaToJson(const JinjaValue& value, const JinjaJsonOptions& options) {
  if (options.indent && options.indent->size() > kMaxJinjaJsonIndent) {
    return absl::InvalidArgumentError(
        absl::StrCat("tojson indent is longer than ", kMaxJinjaJsonIndent, " characters"));
  }
  JsonWriter writer(options);
  SS_RETURN_IF_ERROR(writer.Write(value, 0));
  return std::move(writer.out());
}

}  // namespace sparseserve::tokenizer::internal
