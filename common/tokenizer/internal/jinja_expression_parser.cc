#include "common/tokenizer/internal/jinja_expression_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/tokenizer/internal/jinja_filters.h"
#include "common/tokenizer/internal/jinja_tests.h"

namespace sparseserve::tokenizer::internal {

const JinjaToken& JinjaTokenStream::Peek(size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const JinjaToken& JinjaTokenStream::Next() {
  const JinjaToken& token = Peek();
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return token;
}

bool JinjaTokenStream::IsOperator(absl::string_view op, size_t ahead) const {
  const JinjaToken& token = Peek(ahead);
  return token.kind == JinjaTokenKind::kOperator && token.text == op;
}

bool JinjaTokenStream::IsName(absl::string_view name, size_t ahead) const {
  const JinjaToken& token = Peek(ahead);
  return token.kind == JinjaTokenKind::kName && token.text == name;
}

bool JinjaTokenStream::ConsumeOperator(absl::string_view op) {
  if (!IsOperator(op)) return false;
  Next();
  return true;
}

bool JinjaTokenStream::ConsumeName(absl::string_view name) {
  if (!IsName(name)) return false;
  Next();
  return true;
}

absl::Status JinjaTokenStream::ExpectOperator(absl::string_view op) {
  if (ConsumeOperator(op)) return absl::OkStatus();
  return Error(Peek(), absl::StrCat("expected '", op, "', got ", Describe(Peek())));
}

absl::Status JinjaTokenStream::Error(const JinjaToken& token, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", token.line, ", column ", token.column, ": ", what));
}

std::string JinjaTokenStream::Describe(const JinjaToken& token) {
  switch (token.kind) {
    case JinjaTokenKind::kBlockEnd:
    case JinjaTokenKind::kVariableEnd: return "end of tag";
    case JinjaTokenKind::kEnd: return "end of template";
    case JinjaTokenKind::kString: return "a string";
    default: return absl::StrCat("'", token.text, "'");
  }
}

namespace {

bool IsCompareOperator(const JinjaToken& token) {
  static constexpr absl::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
  return token.kind == JinjaTokenKind::kOperator &&
         std::find(std::begin(kOps), std::end(kOps), token.text) != std::end(kOps);
}

class ExpressionParser {
 public:
  explicit ExpressionParser(JinjaTokenStream* tokens) : tokens_(*tokens) {}

  // Jinja's parse_tuple: one expression, or a tuple when commas follow (`allow_tuple`).
  absl::StatusOr<JinjaExprPtr> ParseTuple(bool with_conditional, bool allow_tuple) {
    const JinjaToken& start = tokens_.Peek();
    SS_ASSIGN_OR_RETURN(JinjaExprPtr first, ParseExpression(with_conditional));
    if (!allow_tuple || !tokens_.IsOperator(",")) return first;
    std::vector<JinjaExprPtr> items;
    items.push_back(std::move(first));
    while (tokens_.ConsumeOperator(",")) {
      if (AtExpressionEnd()) break;
      SS_ASSIGN_OR_RETURN(JinjaExprPtr item, ParseExpression(with_conditional));
      items.push_back(std::move(item));
    }
    return Make(JinjaExprKind::kTuple, start, std::move(items));
  }

 private:
  // Counts one level of parser recursion for the scope of a nested parse.
  class NestingGuard {
   public:
    explicit NestingGuard(int* nesting) : nesting_(nesting) { ++*nesting_; }
    ~NestingGuard() { --*nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    int* nesting_;
  };

  absl::Status CheckNesting(const JinjaToken& at) const {
    if (nesting_ <= kMaxJinjaExprNesting) return absl::OkStatus();
    return JinjaTokenStream::Error(at, "expression nested too deeply");
  }

  bool AtExpressionEnd() const {
    const JinjaToken& token = tokens_.Peek();
    return token.kind == JinjaTokenKind::kBlockEnd || token.kind == JinjaTokenKind::kVariableEnd ||
           tokens_.IsOperator(")") || tokens_.IsOperator("]") || tokens_.IsOperator("=");
  }

  absl::StatusOr<JinjaExprPtr> Make(JinjaExprKind kind, const JinjaToken& at,
                                    std::vector<JinjaExprPtr> operands, std::string name = "") {
    auto expr = std::make_unique<JinjaExpr>();
    expr->kind = kind;
    expr->line = at.line;
    expr->name = std::move(name);
    expr->operands = std::move(operands);
    for (const JinjaExprPtr& operand : expr->operands) {
      if (operand != nullptr) expr->depth = std::max(expr->depth, operand->depth + 1);
    }
    if (expr->depth > kMaxJinjaExprDepth) {
      return JinjaTokenStream::Error(at, "expression too deeply nested or too long");
    }
    return expr;
  }

  absl::StatusOr<JinjaExprPtr> Binary(JinjaExprKind kind, const JinjaToken& at, JinjaExprPtr left,
                                      JinjaExprPtr right, std::string op = "") {
    std::vector<JinjaExprPtr> operands;
    operands.push_back(std::move(left));
    operands.push_back(std::move(right));
    return Make(kind, at, std::move(operands), std::move(op));
  }

  absl::StatusOr<JinjaExprPtr> ParseExpression(bool with_conditional) {
    const NestingGuard guard(&nesting_);
    SS_RETURN_IF_ERROR(CheckNesting(tokens_.Peek()));
    if (!with_conditional) return ParseOr();
    SS_ASSIGN_OR_RETURN(JinjaExprPtr expr, ParseOr());
    while (tokens_.IsName("if")) {
      const JinjaToken& at = tokens_.Next();
      std::vector<JinjaExprPtr> operands;
      operands.push_back(std::move(expr));
      SS_ASSIGN_OR_RETURN(JinjaExprPtr condition, ParseOr());
      operands.push_back(std::move(condition));
      JinjaExprPtr otherwise;
      if (tokens_.ConsumeName("else")) {
        SS_ASSIGN_OR_RETURN(otherwise, ParseExpression(/*with_conditional=*/true));
      }
      operands.push_back(std::move(otherwise));
      SS_ASSIGN_OR_RETURN(expr, Make(JinjaExprKind::kConditional, at, std::move(operands)));
    }
    return expr;
  }

  absl::StatusOr<JinjaExprPtr> ParseOr() {
    SS_ASSIGN_OR_RETURN(JinjaExprPtr left, ParseAnd());
    while (tokens_.IsName("or")) {
      const JinjaToken& at = tokens_.Next();
      SS_ASSIGN_OR_RETURN(JinjaExprPtr right, ParseAnd());
      SS_ASSIGN_OR_RETURN(left, Binary(JinjaExprKind::kOr, at, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<JinjaExprPtr> ParseAnd() {
    SS_ASSIGN_OR_RETURN(JinjaExprPtr left, ParseNot());
    while (tokens_.IsName("and")) {
      const JinjaToken& at = tokens_.Next();
      SS_ASSIGN_OR_RETURN(JinjaExprPtr right, ParseNot());
      SS_ASSIGN_OR_RETURN(left, Binary(JinjaExprKind::kAnd, at, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<JinjaExprPtr> ParseNot() {
    if (!tokens_.IsName("not")) return ParseCompare();
    const JinjaToken& at = tokens_.Next();
    const NestingGuard guard(&nesting_);
    SS_RETURN_IF_ERROR(CheckNesting(at));
    SS_ASSIGN_OR_RETURN(JinjaExprPtr operand, ParseNot());
    std::vector<JinjaExprPtr> operands;
    operands.push_back(std::move(operand));
    return Make(JinjaExprKind::kNot, at, std::move(operands));
  }

  absl::StatusOr<JinjaExprPtr> ParseCompare() {
    const JinjaToken& start = tokens_.Peek();
    SS_ASSIGN_OR_RETURN(JinjaExprPtr first, ParseMath1());
    std::vector<JinjaExprPtr> operands;
    std::vector<std::string> ops;
    while (true) {
      if (IsCompareOperator(tokens_.Peek()) || tokens_.IsName("in")) {
        ops.push_back(tokens_.Next().text);
      } else if (tokens_.IsName("not") && tokens_.IsName("in", 1)) {
        tokens_.Next();
        tokens_.Next();
        ops.push_back("not in");
      } else {
        break;
      }
      SS_ASSIGN_OR_RETURN(JinjaExprPtr operand, ParseMath1());
      operands.push_back(std::move(operand));
    }
    if (ops.empty()) return first;
    operands.insert(operands.begin(), std::move(first));
    SS_ASSIGN_OR_RETURN(JinjaExprPtr expr,
                        Make(JinjaExprKind::kCompare, start, std::move(operands)));
    expr->compare_ops = std::move(ops);
    return expr;
  }

  // One left-associative level of binary operators `ops` over operands parsed by `next`.
  template <typename NextLevel>
  absl::StatusOr<JinjaExprPtr> ParseBinaryLevel(std::initializer_list<absl::string_view> ops,
                                                NextLevel next) {
    SS_ASSIGN_OR_RETURN(JinjaExprPtr left, (this->*next)());
    while (true) {
      const JinjaToken& at = tokens_.Peek();
      const bool matches = at.kind == JinjaTokenKind::kOperator &&
                           std::find(ops.begin(), ops.end(), at.text) != ops.end();
      if (!matches) return left;
      tokens_.Next();
      SS_ASSIGN_OR_RETURN(JinjaExprPtr right, (this->*next)());
      SS_ASSIGN_OR_RETURN(
          left, Binary(JinjaExprKind::kBinary, at, std::move(left), std::move(right), at.text));
    }
  }

  // Jinja's levels, loosest first: + -, then ~, then * / // %, then ** (left-associative).
  absl::StatusOr<JinjaExprPtr> ParseMath1() {
    return ParseBinaryLevel({"+", "-"}, &ExpressionParser::ParseConcat);
  }
  absl::StatusOr<JinjaExprPtr> ParseConcat() {
    return ParseBinaryLevel({"~"}, &ExpressionParser::ParseMath2);
  }
  absl::StatusOr<JinjaExprPtr> ParseMath2() {
    return ParseBinaryLevel({"*", "/", "//", "%"}, &ExpressionParser::ParsePow);
  }
  absl::StatusOr<JinjaExprPtr> ParsePow() {
    return ParseBinaryLevel({"**"}, &ExpressionParser::ParseUnaryWithFilters);
  }
  absl::StatusOr<JinjaExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  // A sign binds looser than postfix operators and, for its operand, than filters:
  // `-x|abs` is `(-x)|abs`.
  absl::StatusOr<JinjaExprPtr> ParseUnary(bool with_filters) {
    JinjaExprPtr node;
    if (tokens_.IsOperator("-") || tokens_.IsOperator("+")) {
      const JinjaToken& at = tokens_.Next();
      const NestingGuard guard(&nesting_);
      SS_RETURN_IF_ERROR(CheckNesting(at));
      SS_ASSIGN_OR_RETURN(JinjaExprPtr operand, ParseUnary(false));
      std::vector<JinjaExprPtr> operands;
      operands.push_back(std::move(operand));
      SS_ASSIGN_OR_RETURN(node, Make(JinjaExprKind::kNegate, at, std::move(operands), at.text));
    } else {
      SS_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    SS_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filters) return ParseFilters(std::move(node));
    return node;
  }

  absl::StatusOr<JinjaExprPtr> Literal(const JinjaToken& at, JinjaValue value) {
    SS_ASSIGN_OR_RETURN(JinjaExprPtr expr, Make(JinjaExprKind::kLiteral, at, {}));
    expr->literal = std::move(value);
    return expr;
  }

  absl::StatusOr<JinjaExprPtr> ParsePrimary() {
    const JinjaToken& at = tokens_.Next();
    switch (at.kind) {
      case JinjaTokenKind::kName:
        if (at.text == "true" || at.text == "True") return Literal(at, JinjaValue::Bool(true));
        if (at.text == "false" || at.text == "False") return Literal(at, JinjaValue::Bool(false));
        if (at.text == "none" || at.text == "None") return Literal(at, JinjaValue::None());
        return Make(JinjaExprKind::kName, at, {}, at.text);
      case JinjaTokenKind::kString: {
        std::string text = at.text;  // adjacent literals concatenate, as in Python
        while (tokens_.Peek().kind == JinjaTokenKind::kString) text += tokens_.Next().text;
        return Literal(at, JinjaValue::String(std::move(text)));
      }
      case JinjaTokenKind::kInteger: return Literal(at, JinjaValue::Int(at.int_value));
      case JinjaTokenKind::kFloat: return Literal(at, JinjaValue::Float(at.float_value));
      case JinjaTokenKind::kOperator:
        if (at.text == "(") return ParseParenthesized(at);
        if (at.text == "[") return ParseSequence(at, "]", JinjaExprKind::kList);
        if (at.text == "{") return ParseDict(at);
        break;
      default: break;
    }
    return JinjaTokenStream::Error(at, absl::StrCat("unexpected ", JinjaTokenStream::Describe(at)));
  }

  // `(expr)`, `()`, `(a,)` or `(a, b)`; the opening parenthesis is consumed.
  absl::StatusOr<JinjaExprPtr> ParseParenthesized(const JinjaToken& at) {
    if (tokens_.ConsumeOperator(")")) return Make(JinjaExprKind::kTuple, at, {});
    SS_ASSIGN_OR_RETURN(JinjaExprPtr first, ParseExpression(true));
    if (tokens_.ConsumeOperator(")")) return first;
    std::vector<JinjaExprPtr> items;
    items.push_back(std::move(first));
    while (tokens_.ConsumeOperator(",")) {
      if (tokens_.IsOperator(")")) break;
      SS_ASSIGN_OR_RETURN(JinjaExprPtr item, ParseExpression(true));
      items.push_back(std::move(item));
    }
    SS_RETURN_IF_ERROR(tokens_.ExpectOperator(")"));
    return Make(JinjaExprKind::kTuple, at, std::move(items));
  }

  // Comma-separated expressions up to `close` (a trailing comma allowed); the opener is consumed.
  absl::StatusOr<JinjaExprPtr> ParseSequence(const JinjaToken& at, absl::string_view close,
                                             JinjaExprKind kind) {
    std::vector<JinjaExprPtr> items;
    while (!tokens_.ConsumeOperator(close)) {
      if (!items.empty()) SS_RETURN_IF_ERROR(tokens_.ExpectOperator(","));
      if (tokens_.ConsumeOperator(close)) break;
      SS_ASSIGN_OR_RETURN(JinjaExprPtr item, ParseExpression(true));
      items.push_back(std::move(item));
    }
    return Make(kind, at, std::move(items));
  }

  absl::StatusOr<JinjaExprPtr> ParseDict(const JinjaToken& at) {
    std::vector<JinjaExprPtr> items;
    while (!tokens_.ConsumeOperator("}")) {
      if (!items.empty()) SS_RETURN_IF_ERROR(tokens_.ExpectOperator(","));
      if (tokens_.ConsumeOperator("}")) break;
      SS_ASSIGN_OR_RETURN(JinjaExprPtr key, ParseExpression(true));
      SS_RETURN_IF_ERROR(tokens_.ExpectOperator(":"));
      SS_ASSIGN_OR_RETURN(JinjaExprPtr value, ParseExpression(true));
      items.push_back(std::move(key));
      items.push_back(std::move(value));
    }
    return Make(JinjaExprKind::kDict, at, std::move(items));
  }

  // `.name`, `.0`, `[key]`, `[start:stop:step]` and calls, in any number.
  absl::StatusOr<JinjaExprPtr> ParsePostfix(JinjaExprPtr node) {
    while (true) {
      const JinjaToken& at = tokens_.Peek();
      if (tokens_.ConsumeOperator(".")) {
        const JinjaToken& attr = tokens_.Next();
        std::vector<JinjaExprPtr> operands;
        operands.push_back(std::move(node));
        if (attr.kind == JinjaTokenKind::kName) {
          SS_ASSIGN_OR_RETURN(node,
                              Make(JinjaExprKind::kAttribute, at, std::move(operands), attr.text));
        } else if (attr.kind == JinjaTokenKind::kInteger) {
          SS_ASSIGN_OR_RETURN(JinjaExprPtr index, Literal(attr, JinjaValue::Int(attr.int_value)));
          operands.push_back(std::move(index));
          SS_ASSIGN_OR_RETURN(node, Make(JinjaExprKind::kItem, at, std::move(operands)));
        } else {
          return JinjaTokenStream::Error(attr, "expected an attribute name after '.'");
        }
      } else if (tokens_.ConsumeOperator("[")) {
        SS_ASSIGN_OR_RETURN(node, ParseSubscript(at, std::move(node)));
      } else if (tokens_.IsOperator("(")) {
        SS_ASSIGN_OR_RETURN(node, ParseCall(JinjaExprKind::kCall, at, std::move(node), ""));
      } else {
        return node;
      }
    }
  }

  // After `[`: an index or a slice, then `]`.
  absl::StatusOr<JinjaExprPtr> ParseSubscript(const JinjaToken& at, JinjaExprPtr object) {
    std::vector<JinjaExprPtr> operands;
    operands.push_back(std::move(object));
    bool is_slice = false;
    for (int part = 0; part < 3; ++part) {
      JinjaExprPtr bound;
      if (!tokens_.IsOperator(":") && !tokens_.IsOperator("]")) {
        SS_ASSIGN_OR_RETURN(bound, ParseExpression(true));
      }
      operands.push_back(std::move(bound));
      if (part == 2 || !tokens_.ConsumeOperator(":")) break;
      is_slice = true;
    }
    SS_RETURN_IF_ERROR(tokens_.ExpectOperator("]"));
    if (!is_slice) {
      if (operands[1] == nullptr) return JinjaTokenStream::Error(at, "empty subscript");
      return Make(JinjaExprKind::kItem, at, std::move(operands));
    }
    operands.resize(4);
    return Make(JinjaExprKind::kSlice, at, std::move(operands));
  }

  // `(args, name=value)` applied to `subject` as a call, filter or test named `name`.
  absl::StatusOr<JinjaExprPtr> ParseCall(JinjaExprKind kind, const JinjaToken& at,
                                         JinjaExprPtr subject, std::string name) {
    std::vector<JinjaExprPtr> operands;
    operands.push_back(std::move(subject));
    std::vector<std::pair<std::string, JinjaExprPtr>> kwargs;
    if (tokens_.ConsumeOperator("(")) {
      while (!tokens_.ConsumeOperator(")")) {
        if (operands.size() + kwargs.size() > 1) SS_RETURN_IF_ERROR(tokens_.ExpectOperator(","));
        if (tokens_.ConsumeOperator(")")) break;
        if (tokens_.Peek().kind == JinjaTokenKind::kName && tokens_.IsOperator("=", 1)) {
          std::string key = tokens_.Next().text;
          tokens_.Next();
          SS_ASSIGN_OR_RETURN(JinjaExprPtr value, ParseExpression(true));
          kwargs.emplace_back(std::move(key), std::move(value));
          continue;
        }
        if (!kwargs.empty()) {
          return JinjaTokenStream::Error(tokens_.Peek(),
                                         "positional argument follows keyword argument");
        }
        SS_ASSIGN_OR_RETURN(JinjaExprPtr arg, ParseExpression(true));
        operands.push_back(std::move(arg));
      }
    }
    int kwargs_depth = 0;
    for (const auto& kwarg : kwargs) kwargs_depth = std::max(kwargs_depth, kwarg.second->depth);
    SS_ASSIGN_OR_RETURN(JinjaExprPtr expr, Make(kind, at, std::move(operands), std::move(name)));
    expr->depth = std::max(expr->depth, kwargs_depth + 1);
    if (expr->depth > kMaxJinjaExprDepth) {
      return JinjaTokenStream::Error(at, "expression too deeply nested or too long");
    }
    expr->kwargs = std::move(kwargs);
    return expr;
  }

  // `| filter(args)` and `is [not] test args`, in any number, each checked by name.
  absl::StatusOr<JinjaExprPtr> ParseFilters(JinjaExprPtr node) {
    while (true) {
      const JinjaToken& at = tokens_.Peek();
      if (tokens_.ConsumeOperator("|")) {
        const JinjaToken& name = tokens_.Next();
        if (name.kind != JinjaTokenKind::kName) {
          return JinjaTokenStream::Error(name, "expected a filter name after '|'");
        }
        if (!IsJinjaFilter(name.text)) {
          return JinjaTokenStream::Error(name, absl::StrCat("unknown filter '", name.text, "'"));
        }
        SS_ASSIGN_OR_RETURN(node,
                            ParseCall(JinjaExprKind::kFilter, at, std::move(node), name.text));
      } else if (tokens_.ConsumeName("is")) {
        SS_ASSIGN_OR_RETURN(node, ParseTest(at, std::move(node)));
      } else if (tokens_.IsOperator("(")) {
        SS_ASSIGN_OR_RETURN(node, ParseCall(JinjaExprKind::kCall, at, std::move(node), ""));
      } else {
        return node;
      }
    }
  }

  // After `is`: `[not] name`, then `(args)` or one bare argument (`is divisibleby 3`).
  absl::StatusOr<JinjaExprPtr> ParseTest(const JinjaToken& at, JinjaExprPtr subject) {
    const bool negated = tokens_.ConsumeName("not");
    const JinjaToken& name = tokens_.Next();
    if (name.kind != JinjaTokenKind::kName) {
      return JinjaTokenStream::Error(name, "expected a test name after 'is'");
    }
    if (!IsJinjaTest(name.text)) {
      return JinjaTokenStream::Error(name, absl::StrCat("unknown test '", name.text, "'"));
    }
    JinjaExprPtr expr;
    const JinjaToken& next = tokens_.Peek();
    const bool bare_argument =
        (next.kind == JinjaTokenKind::kName || next.kind == JinjaTokenKind::kString ||
         next.kind == JinjaTokenKind::kInteger || next.kind == JinjaTokenKind::kFloat ||
         tokens_.IsOperator("[") || tokens_.IsOperator("{")) &&
        !tokens_.IsName("else") && !tokens_.IsName("or") && !tokens_.IsName("and");
    if (tokens_.IsOperator("(")) {
      SS_ASSIGN_OR_RETURN(expr, ParseCall(JinjaExprKind::kTest, at, std::move(subject), name.text));
    } else if (bare_argument) {
      if (tokens_.IsName("is")) {
        return JinjaTokenStream::Error(next, "tests cannot be chained with 'is'");
      }
      SS_ASSIGN_OR_RETURN(JinjaExprPtr arg, ParsePrimary());
      SS_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      std::vector<JinjaExprPtr> operands;
      operands.push_back(std::move(subject));
      operands.push_back(std::move(arg));
      SS_ASSIGN_OR_RETURN(expr, Make(JinjaExprKind::kTest, at, std::move(operands), name.text));
    } else {
      std::vector<JinjaExprPtr> operands;
      operands.push_back(std::move(subject));
      SS_ASSIGN_OR_RETURN(expr, Make(JinjaExprKind::kTest, at, std::move(operands), name.text));
    }
    expr->negated = negated;
    return expr;
  }

  JinjaTokenStream& tokens_;
  int nesting_ = 0;
};

}  // namespace

absl::StatusOr<JinjaExprPtr> ParseJinjaExpression(JinjaTokenStream* tokens, bool with_conditional,
                                                  bool allow_tuple) {
  return ExpressionParser(tokens).ParseTuple(with_conditional, allow_tuple);
}

}  // namespace sparseserve::tokenizer::internal
