#include "common/tokenizer/internal/jinja_tests.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_filters.h"
#include "common/tokenizer/internal/jinja_operators.h"
#include "common/tokenizer/internal/jinja_string_ops.h"

namespace sparseserve::tokenizer::internal {
namespace {

constexpr absl::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",    "equalto", "escaped",
    "even",    "false",    "filter",   "float",       "ge",    "gt",      "greaterthan",
    "in",      "integer",  "iterable", "le",          "lower", "lt",      "lessthan",
    "mapping", "ne",       "none",     "number",      "odd",   "sameas",  "sequence",
    "string",  "test",     "true",     "undefined",   "upper", "==",      "!=",
    "<",       "<=",       ">",        ">="};

}  // namespace

bool IsJinjaTest(absl::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<bool> ApplyJinjaTest(absl::string_view name, const JinjaValue& input,
                                    const JinjaArgs& args) {
  using Kind = JinjaValue::Kind;
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.kind() == Kind::kBool;
  if (name == "true") return input.kind() == Kind::kBool && input.bool_value();
  if (name == "false") return input.kind() == Kind::kBool && !input.bool_value();
  if (name == "integer") return input.kind() == Kind::kInt;
  if (name == "float") return input.kind() == Kind::kFloat;
  if (name == "number") return input.is_number();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_dict();
  if (name == "callable") return input.kind() == Kind::kFunction;
  if (name == "iterable") {
    return input.is_undefined() || input.is_list() || input.is_dict() || input.is_string();
  }
  if (name == "sequence") return input.is_list() || input.is_dict() || input.is_string();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {  // str.islower() / isupper(): some cased letter
    const std::string text = input.Str();
    const std::string lower = PythonLower(text);
    const std::string upper = PythonUpper(text);
    return lower != upper && (name == "lower" ? lower : upper) == text;
  }
  if (name == "filter" || name == "test") {
    return input.is_string() && (name == "filter" ? IsJinjaFilter(input.string_value())
                                                  : IsJinjaTest(input.string_value()));
  }
  if (name == "odd" || name == "even") {  // value % 2 == 1, for floats too
    SS_ASSIGN_OR_RETURN(const JinjaValue remainder,
                        ApplyJinjaBinary("%", input, JinjaValue::Int(2)));
    return JinjaEquals(remainder, JinjaValue::Int(1)) == (name == "odd");
  }
  SS_RETURN_IF_ERROR(args.Check(name, 1, 1));
  const JinjaValue& other = args.positional[0];
  if (name == "divisibleby") {
    SS_ASSIGN_OR_RETURN(const JinjaValue remainder, ApplyJinjaBinary("%", input, other));
    return JinjaEquals(remainder, JinjaValue::Int(0));
  }
  if (name == "in") return JinjaContains(other, input);
  if (name == "sameas") {
    const bool singleton = input.is_none() || input.kind() == Kind::kBool;
    return input.kind() == other.kind() &&
           (singleton ? JinjaEquals(input, other)
                      : input.kind() == Kind::kNamespace && JinjaEquals(input, other));
  }
  if (name == "eq" || name == "equalto" || name == "==") return JinjaEquals(input, other);
  if (name == "ne" || name == "!=") return !JinjaEquals(input, other);
  SS_ASSIGN_OR_RETURN(const int order, JinjaCompare(input, other));
  if (name == "lt" || name == "lessthan" || name == "<") return order < 0;
  if (name == "le" || name == "<=") return order <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return order > 0;
  return order >= 0;  // ge, >=
}

}  // namespace sparseserve::tokenizer::internal
