// JinjaValue: the runtime values of the chat-template interpreter, with Python's semantics where
// a template can observe them (truthiness, str(), repr(), ==, <, int/float arithmetic rules).
//
// Kinds: Jinja's Undefined (carries the message an error on it reports), None, bool, int64,
// double, string (UTF-8 bytes), list (also tuples, which differ only in repr), dict (insertion
// ordered, string keys), namespace (the one mutable kind: `{% set ns.x = ... %}`) and function
// (a builtin global or a method bound to its receiver).
//
// Strings, lists and dicts are immutable and shared between copies (the
// ImmutableSandboxedEnvironment that Hugging Face renders with forbids mutating them); a
// namespace is shared by reference, as the Python object is. Namespaces make values unsafe to
// share between threads; one render owns its values.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_VALUE_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

class JinjaDict;
class JinjaValue;
using JinjaList = std::vector<JinjaValue>;

// Longest string any operation may build, and the most elements of a list: past these a render
// fails instead of exhausting memory. Str() and Repr() stop just past the string limit, so an
// oversized result is still detected by its length.
inline constexpr size_t kMaxJinjaStringBytes = size_t{16} << 20;
inline constexpr size_t kMaxJinjaListItems = size_t{1} << 20;

class JinjaValue {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  // Undefined, with an empty message.
  JinjaValue() = default;
  // `message` is what an operation that may not use an undefined value reports
  // ("'x' is undefined", "'dict object' has no attribute 'y'").
  static JinjaValue Undefined(std::string message);
  static JinjaValue None();
  static JinjaValue Bool(bool value);
  static JinjaValue Int(int64_t value);
  static JinjaValue Float(double value);
  static JinjaValue String(std::string value);
  static JinjaValue List(JinjaList items, bool is_tuple = false);
  static JinjaValue Dict(JinjaDict entries);
  // A fresh namespace object holding `attributes`.
  static JinjaValue Namespace(JinjaDict attributes);
  // A builtin global (`receiver` undefined) or the method `name` bound to `receiver`.
  static JinjaValue Function(std::string name, JinjaValue receiver);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // int or bool (Python's bool is an int).
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  // int, bool or float.
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }
  bool is_tuple() const { return is_tuple_; }
  // Nesting of lists, dicts and namespaces (0 for scalars), so that the interpreter can bound
  // the recursion of printing, comparing and destroying values a loop could nest arbitrarily.
  int depth() const { return depth_; }

  // REQUIRES: the matching kind (bool_value: kBool; int_value: is_integral(); float_value:
  // is_number(); string_value: kString, or kUndefined for its message, kFunction for its name;
  // list: kList; dict: kDict; namespace_attributes: kNamespace; receiver: kFunction).
  bool bool_value() const { return int_ != 0; }
  int64_t int_value() const { return int_; }
  double float_value() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& string_value() const;
  const JinjaList& list() const;
  const JinjaDict& dict() const;
  // The namespace's attributes, shared by every copy of this value.
  JinjaDict& namespace_attributes() const;
  // The bound receiver of a method; undefined for a global.
  const JinjaValue& receiver() const;

  // Python truthiness: undefined, None, False, 0, 0.0, "", [] and {} are false.
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints ("" for undefined, "None", "True", "1.5", "['a']").
  std::string Str() const;
  // Python repr() ("'a'", "Undefined"); how list and dict elements print.
  std::string Repr() const;
  // Python's type name, for error messages ("str", "int", "dict", "NoneType").
  absl::string_view TypeName() const;

 private:
  // Appends repr() to `out`, stopping once `out` is past kMaxJinjaStringBytes.
  void AppendRepr(std::string* out) const;

  Kind kind_ = Kind::kUndefined;
  bool is_tuple_ = false;
  int depth_ = 0;
  int64_t int_ = 0;  // kInt, and kBool as 0/1 so integral arithmetic needs no case
  double float_ = 0;
  // The kind's immutable payload (std::string, JinjaList, JinjaDict, a namespace box or a
  // function), co-owned by every copy of the value so that copies are cheap; null for scalars.
  std::shared_ptr<const void> payload_;
};

// String-keyed map in insertion order (Python dict); setting an existing key keeps its place.
// Lookups are linear: template dicts hold a handful of keys.
class JinjaDict {
 public:
  const JinjaValue* Find(absl::string_view key) const;
  void Set(std::string key, JinjaValue value);
  const std::vector<std::pair<std::string, JinjaValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, JinjaValue>> entries_;
};

// Python ==: numbers compare by value across int/float/bool, lists and dicts deeply (dicts
// ignoring order), two undefined values are equal, a namespace only to itself.
bool JinjaEquals(const JinjaValue& a, const JinjaValue& b);

// Python's ordering for <, <=, >, >= and sorting: negative, zero or positive. Numbers with
// numbers, strings with strings (by code point), lists element-wise. Returns kInvalidArgument
// ("'<' not supported between instances of 'int' and 'str'") for any other pair, and the value's
// own message for an undefined operand.
absl::StatusOr<int> JinjaCompare(const JinjaValue& a, const JinjaValue& b);

// Python repr() of a float: shortest round-trip digits, "1.0", "1e+16", "1e-05", "nan", "inf".
std::string PythonFloatRepr(double value);

// Python repr() of a str: single quotes unless the text holds ' and no ", escapes for
// backslash, the quote, \n \r \t, control characters and the non-printable spaces.
std::string PythonStringRepr(absl::string_view text);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_VALUE_H_
