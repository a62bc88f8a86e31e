// The object model of the chat-template interpreter: call arguments, attribute and item access,
// slicing, iteration and membership with Jinja's rules, function calls, and the builtin globals
// (range, namespace, dict, raise_exception, strftime_now). The methods of str and dict values
// are in jinja_methods.h, filters in jinja_filters.h, tests in jinja_tests.h.
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_BUILTINS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_BUILTINS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

// The arguments of a call, filter or test after its subject.
struct JinjaArgs {
  std::vector<JinjaValue> positional;
  std::vector<std::pair<std::string, JinjaValue>> keyword;

  // Positional argument `index`, else the keyword argument `name`, else null.
  const JinjaValue* Get(size_t index, absl::string_view name) const;
  // kInvalidArgument naming `function` unless it has between `min` and `max` positional
  // arguments and only keyword arguments among `keywords`.
  absl::Status Check(absl::string_view function, size_t min, size_t max,
                     std::initializer_list<absl::string_view> keywords = {}) const;
};

// Argument conversions for builtins; kInvalidArgument naming `function` on a type mismatch.
absl::StatusOr<std::string> StringArgument(const JinjaValue& value, absl::string_view function);
absl::StatusOr<int64_t> IntArgument(const JinjaValue& value, absl::string_view function);

// kInvalidArgument when a string of `bytes` would pass kMaxJinjaStringBytes.
absl::Status CheckJinjaStringSize(size_t bytes);
// The size str.replace(old_text, new_text, count) would give `text`, checked as above.
absl::Status CheckJinjaReplaceSize(absl::string_view text, absl::string_view old_text,
                                   absl::string_view new_text, int64_t count);

// `object.name`: a method of the object's type (bound to it), else a dict or namespace entry,
// else an undefined value. Returns kInvalidArgument when `object` is undefined.
absl::StatusOr<JinjaValue> JinjaGetAttribute(const JinjaValue& object, const std::string& name);
// `object[key]`: a dict or namespace entry, a list / tuple / string element (negative indices
// from the end), else a method for a string key, else an undefined value. kInvalidArgument when
// `object` is undefined.
absl::StatusOr<JinjaValue> JinjaGetItem(const JinjaValue& object, const JinjaValue& key);
// `object[start:stop:step]` of a list, tuple or string (by code point); undefined or none
// bounds are absent. kInvalidArgument for other objects (jinja2 compiles slices to plain Python
// subscripts), non-integer bounds or a zero step.
absl::StatusOr<JinjaValue> JinjaSlice(const JinjaValue& object, const JinjaValue& start,
                                      const JinjaValue& stop, const JinjaValue& step);
// What a for loop visits: list or tuple elements, dict keys, a string's characters, nothing for
// an undefined value. kInvalidArgument ("'int' object is not iterable") otherwise.
absl::StatusOr<JinjaList> JinjaIterate(const JinjaValue& value);

// `item in container` for strings (substring), lists and tuples (an equal element) and dicts
// (a key); false for an undefined container. kInvalidArgument for other containers and for a
// non-string item in a string.
absl::StatusOr<bool> JinjaContains(const JinjaValue& container, const JinjaValue& item);

// Calls a kFunction value: a bound method or a global. kInvalidArgument for a non-function,
// bad arguments, and for raise_exception (its message, verbatim).
absl::StatusOr<JinjaValue> CallJinjaFunction(const JinjaValue& function, const JinjaArgs& args);

// The builtin globals as function values, to seed a render's variables.
JinjaDict JinjaGlobals();
// The name of the global whose error is the template's own message, not an interpreter error.
inline constexpr absl::string_view kJinjaRaiseException = "raise_exception";

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_BUILTINS_H_
