#include "common/tokenizer/internal/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer::internal {
namespace {

// Python's str.isprintable() is false for these besides the C0/C1 controls: the non-ASCII
// spaces (Zs), line/paragraph separators and the common format characters (Cf).
bool IsNonPrintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) {
    return true;
  }
  return (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF;
}

struct NamespaceBox {
  mutable JinjaDict attributes;  // the one mutable payload: `{% set ns.x = ... %}`
};

struct FunctionBox {
  std::string name;
  JinjaValue receiver;  // undefined for a global
};

const std::string& EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

int MaxDepth(const JinjaList& items) {
  int depth = 0;
  for (const JinjaValue& item : items) depth = std::max(depth, item.depth());
  return depth;
}

int MaxDepth(const JinjaDict& dict) {
  int depth = 0;
  for (const auto& entry : dict.entries()) depth = std::max(depth, entry.second.depth());
  return depth;
}

int Order(double a, double b) {
  return a < b ? -1 : (a > b ? 1 : 0);
}

}  // namespace

const JinjaValue* JinjaDict::Find(absl::string_view key) const {
  for (const auto& entry : entries_) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void JinjaDict::Set(std::string key, JinjaValue value) {
  for (auto& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

JinjaValue JinjaValue::Undefined(std::string message) {
  JinjaValue v;
  v.payload_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

JinjaValue JinjaValue::None() {
  JinjaValue v;
  v.kind_ = Kind::kNone;
  return v;
}

JinjaValue JinjaValue::Bool(bool value) {
  JinjaValue v;
  v.kind_ = Kind::kBool;
  v.int_ = value ? 1 : 0;
  return v;
}

JinjaValue JinjaValue::Int(int64_t value) {
  JinjaValue v;
  v.kind_ = Kind::kInt;
  v.int_ = value;
  return v;
}

JinjaValue JinjaValue::Float(double value) {
  JinjaValue v;
  v.kind_ = Kind::kFloat;
  v.float_ = value;
  return v;
}

JinjaValue JinjaValue::String(std::string value) {
  JinjaValue v;
  v.kind_ = Kind::kString;
  v.payload_ = std::make_shared<const std::string>(std::move(value));
  return v;
}

JinjaValue JinjaValue::List(JinjaList items, bool is_tuple) {
  JinjaValue v;
  v.kind_ = Kind::kList;
  v.is_tuple_ = is_tuple;
  v.depth_ = 1 + MaxDepth(items);
  v.payload_ = std::make_shared<const JinjaList>(std::move(items));
  return v;
}

JinjaValue JinjaValue::Dict(JinjaDict entries) {
  JinjaValue v;
  v.kind_ = Kind::kDict;
  v.depth_ = 1 + MaxDepth(entries);
  v.payload_ = std::make_shared<const JinjaDict>(std::move(entries));
  return v;
}

JinjaValue JinjaValue::Namespace(JinjaDict attributes) {
  JinjaValue v;
  v.kind_ = Kind::kNamespace;
  v.depth_ = 1 + MaxDepth(attributes);
  v.payload_ = std::make_shared<const NamespaceBox>(NamespaceBox{std::move(attributes)});
  return v;
}

JinjaValue JinjaValue::Function(std::string name, JinjaValue receiver) {
  JinjaValue v;
  v.kind_ = Kind::kFunction;
  v.depth_ = receiver.depth_;
  v.payload_ =
      std::make_shared<const FunctionBox>(FunctionBox{std::move(name), std::move(receiver)});
  return v;
}

const std::string& JinjaValue::string_value() const {
  if (kind_ == Kind::kFunction) return static_cast<const FunctionBox*>(payload_.get())->name;
  if (payload_ == nullptr) return EmptyString();
  return *static_cast<const std::string*>(payload_.get());
}

const JinjaList& JinjaValue::list() const {
  return *static_cast<const JinjaList*>(payload_.get());
}

const JinjaDict& JinjaValue::dict() const {
  return *static_cast<const JinjaDict*>(payload_.get());
}

JinjaDict& JinjaValue::namespace_attributes() const {
  return static_cast<const NamespaceBox*>(payload_.get())->attributes;
}

const JinjaValue& JinjaValue::receiver() const {
  return static_cast<const FunctionBox*>(payload_.get())->receiver;
}

bool JinjaValue::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !string_value().empty();
    case Kind::kList: return !list().empty();
    case Kind::kDict: return dict().size() > 0;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

std::string JinjaValue::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return string_value();
    default: return Repr();
  }
}

std::string JinjaValue::Repr() const {
  std::string out;
  AppendRepr(&out);
  return out;
}

void JinjaValue::AppendRepr(std::string* out) const {
  if (out->size() > kMaxJinjaStringBytes) return;
  switch (kind_) {
    case Kind::kUndefined: *out += "Undefined"; return;
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += int_ != 0 ? "True" : "False"; return;
    case Kind::kInt: absl::StrAppend(out, int_); return;
    case Kind::kFloat: *out += PythonFloatRepr(float_); return;
    case Kind::kString: *out += PythonStringRepr(string_value()); return;
    case Kind::kList: {
      *out += is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < list().size() && out->size() <= kMaxJinjaStringBytes; ++i) {
        if (i > 0) *out += ", ";
        list()[i].AppendRepr(out);
      }
      if (is_tuple_ && list().size() == 1) *out += ",";
      *out += is_tuple_ ? ")" : "]";
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (kind_ == Kind::kNamespace) *out += "<Namespace ";
      *out += "{";
      const JinjaDict& entries = kind_ == Kind::kDict ? dict() : namespace_attributes();
      for (const auto& [key, value] : entries.entries()) {
        if (out->size() > kMaxJinjaStringBytes) break;
        if (out->back() != '{') *out += ", ";
        absl::StrAppend(out, PythonStringRepr(key), ": ");
        value.AppendRepr(out);
      }
      *out += kind_ == Kind::kDict ? "}" : "}>";
      return;
    }
    case Kind::kFunction: absl::StrAppend(out, "<built-in function ", string_value(), ">"); return;
  }
}

absl::string_view JinjaValue::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "builtin_function_or_method";
  }
  return "object";
}

bool JinjaEquals(const JinjaValue& a, const JinjaValue& b) {
  using Kind = JinjaValue::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.int_value() == b.int_value();
    return a.float_value() == b.float_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.string_value() == b.string_value();
    case Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!JinjaEquals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, value] : a.dict().entries()) {
        const JinjaValue* other = b.dict().Find(key);
        if (other == nullptr || !JinjaEquals(value, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return &a.namespace_attributes() == &b.namespace_attributes();
    case Kind::kFunction:
      return a.string_value() == b.string_value() && JinjaEquals(a.receiver(), b.receiver());
    default: return false;
  }
}

absl::StatusOr<int> JinjaCompare(const JinjaValue& a, const JinjaValue& b) {
  if (a.is_undefined()) return absl::InvalidArgumentError(a.string_value());
  if (b.is_undefined()) return absl::InvalidArgumentError(b.string_value());
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.int_value() < b.int_value() ? -1 : (a.int_value() > b.int_value() ? 1 : 0);
    }
    return Order(a.float_value(), b.float_value());
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.string_value().compare(b.string_value());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const JinjaList& x = a.list();
    const JinjaList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (JinjaEquals(x[i], y[i])) continue;
      return JinjaCompare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, "d.ddde+XX", re-laid out as Python does:
  // positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppend(&out, "e", exponent < 0 ? "-" : "+",
                    absl::StrFormat("%02d", std::abs(exponent)));
    return out;
  }
  if (exponent < 0) {
    return absl::StrCat(out, "0.", std::string(static_cast<size_t>(-exponent - 1), '0'), digits);
  }
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    return absl::StrCat(out, digits, std::string(int_digits - digits.size(), '0'), ".0");
  }
  return absl::StrCat(out, digits.substr(0, int_digits), ".", digits.substr(int_digits));
}

std::string PythonStringRepr(absl::string_view text) {
  const bool has_single = text.find('\'') != absl::string_view::npos;
  const bool has_double = text.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = NextUtf8Unit(text, pos);
    if (unit.kind != Utf8Unit::kValid) {  // Python strings hold no invalid bytes; keep them
      absl::StrAppend(&out, text.substr(pos, unit.length));
      pos += unit.length;
      continue;
    }
    const uint32_t cp = unit.codepoint;
    if (cp == '\\' || cp == static_cast<uint32_t>(quote)) {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (IsNonPrintable(cp)) {
      out += cp <= 0xFF ? absl::StrFormat("\\x%02x", cp) : absl::StrFormat("\\u%04x", cp);
    } else {
      absl::StrAppend(&out, text.substr(pos, unit.length));
    }
    pos += unit.length;
  }
  out.push_back(quote);
  return out;
}

}  // namespace sparseserve::tokenizer::internal
