#include "common/tokenizer/internal/jinja_operators.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_builtins.h"

namespace sparseserve::tokenizer::internal {
namespace {

absl::Status Unsupported(absl::string_view op, const JinjaValue& left, const JinjaValue& right) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 left.TypeName(), "' and '", right.TypeName(),
                                                 "'"));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError("integer overflow (integers are limited to 64 bits)");
}

absl::StatusOr<JinjaValue> IntPower(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if ((exponent & 1) != 0 && __builtin_mul_overflow(result, base, &result)) return Overflow();
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return JinjaValue::Int(result);
}

absl::StatusOr<JinjaValue> Arithmetic(absl::string_view op, const JinjaValue& left,
                                      const JinjaValue& right) {
  const bool integral = left.is_integral() && right.is_integral();
  const int64_t a = left.int_value();
  const int64_t b = right.int_value();
  const double x = left.float_value();
  const double y = right.float_value();
  int64_t result = 0;
  if (op == "+") {
    if (!integral) return JinjaValue::Float(x + y);
    if (__builtin_add_overflow(a, b, &result)) return Overflow();
    return JinjaValue::Int(result);
  }
  if (op == "-") {
    if (!integral) return JinjaValue::Float(x - y);
    if (__builtin_sub_overflow(a, b, &result)) return Overflow();
    return JinjaValue::Int(result);
  }
  if (op == "*") {
    if (!integral) return JinjaValue::Float(x * y);
    if (__builtin_mul_overflow(a, b, &result)) return Overflow();
    return JinjaValue::Int(result);
  }
  if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError("division by zero");
    return JinjaValue::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (integral) {
      if (b == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) return Overflow();
      int64_t quotient = a / b;
      int64_t remainder = a % b;
      if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // round toward -infinity
        --quotient;
        remainder += b;
      }
      return JinjaValue::Int(op == "//" ? quotient : remainder);
    }
    if (y == 0) return absl::InvalidArgumentError("float modulo or floor division by zero");
    double remainder = std::fmod(x, y);
    if (remainder != 0 && ((remainder < 0) != (y < 0))) remainder += y;
    return JinjaValue::Float(op == "//" ? std::floor((x - remainder) / y + 0.5) : remainder);
  }
  // **
  if (integral && b >= 0) return IntPower(a, b);
  if (x == 0 && y < 0) {
    return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
  }
  return JinjaValue::Float(std::pow(x, y));
}

// `sequence * count` for a str or list (either operand order in Python).
absl::StatusOr<JinjaValue> Repeat(const JinjaValue& sequence, int64_t count) {
  const double unit = sequence.is_string() ? static_cast<double>(sequence.string_value().size())
                                           : static_cast<double>(sequence.list().size());
  if (count <= 0 || unit == 0) {
    return sequence.is_string() ? JinjaValue::String("")
                                : JinjaValue::List({}, sequence.is_tuple());
  }
  const double total = unit * static_cast<double>(count);
  if (sequence.is_string()) {
    SS_RETURN_IF_ERROR(CheckJinjaStringSize(static_cast<size_t>(std::min(total, 1e18))));
    std::string out;
    for (int64_t i = 0; i < count; ++i) out += sequence.string_value();
    return JinjaValue::String(std::move(out));
  }
  if (total > static_cast<double>(kMaxJinjaListItems)) {
    return absl::InvalidArgumentError(
        absl::StrCat("list of more than ", kMaxJinjaListItems, " items"));
  }
  JinjaList items;
  for (int64_t i = 0; i < count; ++i) {
    items.insert(items.end(), sequence.list().begin(), sequence.list().end());
  }
  return JinjaValue::List(std::move(items), sequence.is_tuple());
}

absl::StatusOr<JinjaValue> Add(const JinjaValue& left, const JinjaValue& right) {
  if (left.is_string() && right.is_string()) {
    SS_RETURN_IF_ERROR(
        CheckJinjaStringSize(left.string_value().size() + right.string_value().size()));
    return JinjaValue::String(left.string_value() + right.string_value());
  }
  if (left.is_list() && right.is_list() && left.is_tuple() == right.is_tuple()) {
    if (left.list().size() + right.list().size() > kMaxJinjaListItems) {
      return absl::InvalidArgumentError(
          absl::StrCat("list of more than ", kMaxJinjaListItems, " items"));
    }
    JinjaList items = left.list();
    items.insert(items.end(), right.list().begin(), right.list().end());
    return JinjaValue::List(std::move(items), left.is_tuple());
  }
  if (left.is_string() || left.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("can only concatenate ", left.TypeName(),
                                                   " (not \"", right.TypeName(), "\") to ",
                                                   left.TypeName()));
  }
  return Unsupported("+", left, right);
}

}  // namespace

absl::StatusOr<JinjaValue> ApplyJinjaBinary(absl::string_view op, const JinjaValue& left,
                                            const JinjaValue& right) {
  if (op == "~") {
    const std::string l = left.Str();
    const std::string r = right.Str();
    SS_RETURN_IF_ERROR(CheckJinjaStringSize(l.size() + r.size()));
    return JinjaValue::String(l + r);
  }
  if (left.is_undefined()) return absl::InvalidArgumentError(left.string_value());
  if (right.is_undefined()) return absl::InvalidArgumentError(right.string_value());
  if (left.is_number() && right.is_number()) return Arithmetic(op, left, right);
  if (op == "+") return Add(left, right);
  if (op == "*") {
    if ((left.is_string() || left.is_list()) && right.is_integral()) {
      return Repeat(left, right.int_value());
    }
    if (left.is_integral() && (right.is_string() || right.is_list())) {
      return Repeat(right, left.int_value());
    }
  }
  if (op == "%" && left.is_string()) {
    return absl::InvalidArgumentError("printf-style '%' string formatting is not supported");
  }
  return Unsupported(op == "**" ? "** or pow()" : op, left, right);
}

absl::StatusOr<JinjaValue> ApplyJinjaUnary(absl::string_view op, const JinjaValue& operand) {
  if (operand.is_undefined()) return absl::InvalidArgumentError(operand.string_value());
  if (operand.kind() == JinjaValue::Kind::kFloat) {
    return JinjaValue::Float(op == "-" ? -operand.float_value() : operand.float_value());
  }
  if (!operand.is_integral()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for unary ", op, ": '", operand.TypeName(), "'"));
  }
  if (op == "+") return JinjaValue::Int(operand.int_value());
  if (operand.int_value() == INT64_MIN) return Overflow();
  return JinjaValue::Int(-operand.int_value());
}

absl::StatusOr<bool> ApplyJinjaComparison(absl::string_view op, const JinjaValue& left,
                                          const JinjaValue& right) {
  if (op == "==") return JinjaEquals(left, right);
  if (op == "!=") return !JinjaEquals(left, right);
  if (op == "in") return JinjaContains(right, left);
  if (op == "not in") {
    SS_ASSIGN_OR_RETURN(const bool contained, JinjaContains(right, left));
    return !contained;
  }
  SS_ASSIGN_OR_RETURN(const int order, JinjaCompare(left, right));
  if (op == "<") return order < 0;
  if (op == "<=") return order <= 0;
  if (op == ">") return order > 0;
  return order >= 0;
}

}  // namespace sparseserve::tokenizer::internal
