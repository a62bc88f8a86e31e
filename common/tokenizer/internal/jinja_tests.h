// The tests (`x is defined`, `x is divisibleby 3`) chat templates may use, by name, with Jinja
// 3.1's semantics. The parser rejects names not listed here, so a template fails when it is
// loaded rather than at request time. Stateless, thread-safe.
//
// Tests: boolean callable defined divisibleby eq equalto escaped even false filter float ge gt
// greaterthan in integer iterable le lower lt lessthan mapping ne none number odd sameas
// sequence string test true undefined upper, and == != < <= > >= (for select / selectattr).
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_TESTS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_TESTS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_builtins.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

bool IsJinjaTest(absl::string_view name);

// Applies test `name` to `input`. REQUIRES: IsJinjaTest(name). Returns kInvalidArgument for
// arguments or inputs of the wrong type (with Python's message where there is one).
absl::StatusOr<bool> ApplyJinjaTest(absl::string_view name, const JinjaValue& input,
                                    const JinjaArgs& args);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_TESTS_H_
