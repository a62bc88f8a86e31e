// The methods of str and dict values that chat templates call: `.strip()`, `.split()`,
// `.startswith()`, `.replace()`, `.upper()`, `.items()`, `.get()`, ... (the full lists are in
// jinja_methods.cc), with Python's semantics (see jinja_string_ops.h for the Unicode coverage).
// Lists have none: the sandbox Hugging Face renders with forbids the mutating ones.
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_METHODS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_METHODS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_builtins.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

// Whether `object` (a str or dict) has a method `name`.
bool HasJinjaMethod(const JinjaValue& object, absl::string_view name);

// Calls `receiver.method(args)`. REQUIRES: HasJinjaMethod(receiver, method). Returns
// kInvalidArgument for wrong argument counts or types and for results past
// kMaxJinjaStringBytes.
absl::StatusOr<JinjaValue> CallJinjaMethod(const JinjaValue& receiver, absl::string_view method,
                                           const JinjaArgs& args);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_METHODS_H_
