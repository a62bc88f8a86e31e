// The arithmetic, concatenation and comparison operators of chat-template expressions, with
// Python's semantics: int64 integers (overflow is an error where Python would grow), `/` always
// a float, floor division and modulo rounding toward negative infinity, str and list `+` and
// `*`, `~` joining str() of both sides. Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_OPERATORS_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_OPERATORS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

// `left op right` for op in + - * / // % ** ~. Returns kInvalidArgument with Python's message
// for unsupported operand types, division by zero and int64 overflow, the operand's own
// message for an undefined operand (except with ~), and for results past kMaxJinjaStringBytes
// or kMaxJinjaListItems.
absl::StatusOr<JinjaValue> ApplyJinjaBinary(absl::string_view op, const JinjaValue& left,
                                            const JinjaValue& right);

// `-operand` or `+operand` on a number; kInvalidArgument otherwise.
absl::StatusOr<JinjaValue> ApplyJinjaUnary(absl::string_view op, const JinjaValue& operand);

// `left op right` for op in == != < <= > >= in "not in". kInvalidArgument for orderings of
// incomparable values and `in` on a container that has no membership.
absl::StatusOr<bool> ApplyJinjaComparison(absl::string_view op, const JinjaValue& left,
                                          const JinjaValue& right);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_OPERATORS_H_
