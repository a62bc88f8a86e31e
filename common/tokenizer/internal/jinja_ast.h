// The syntax tree of a parsed chat template: expressions (JinjaExpr) and statements (JinjaStmt),
// built by ParseJinja (jinja_parser.h) and walked by RenderJinja (jinja_interpreter.h).
// Immutable once parsed; a JinjaProgram is shared read-only by concurrent renders.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_AST_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

enum class JinjaExprKind {
  kLiteral,      // `literal`
  kName,         // variable `name`
  kList,         // operands: elements
  kTuple,        // operands: elements
  kDict,         // operands: key, value, key, value, ...
  kAttribute,    // operands[0].`name`
  kItem,         // operands[0][operands[1]]
  kSlice,        // operands[0][operands[1]:operands[2]:operands[3]], absent parts null
  kCall,         // operands[0](operands[1..], kwargs)
  kFilter,       // operands[0] | `name`(operands[1..], kwargs)
  kTest,         // operands[0] is [not] `name`(operands[1..])
  kNegate,       // -operands[0] (`name` "-") or +operands[0] (`name` "+")
  kNot,          // not operands[0]
  kBinary,       // operands[0] `name` operands[1]; `name` one of + - * / // % ** ~
  kAnd,          // operands[0] and operands[1]
  kOr,           // operands[0] or operands[1]
  kCompare,      // operands[0] compare_ops[0] operands[1] compare_ops[1] operands[2] ...
  kConditional,  // operands[0] if operands[1] else operands[2] (else part may be null)
};

struct JinjaExpr;
using JinjaExprPtr = std::unique_ptr<JinjaExpr>;

struct JinjaExpr {
  JinjaExprKind kind = JinjaExprKind::kLiteral;
  int line = 0;  // where the expression starts, for runtime error messages
  std::string name;
  JinjaValue literal;
  bool negated = false;  // kTest: `is not`
  std::vector<JinjaExprPtr> operands;
  std::vector<std::string> compare_ops;  // kCompare: == != < <= > >= in "not in"
  std::vector<std::pair<std::string, JinjaExprPtr>> kwargs;  // kCall / kFilter keyword arguments
  int depth = 1;  // 1 + the deepest operand: bounds the interpreter's recursion
};

enum class JinjaStmtKind {
  kText,      // `text` verbatim
  kOutput,    // {{ expr }}
  kIf,        // branches in order; else_body when none holds
  kFor,       // {% for targets in expr [if filter] %} body [{% else %} else_body]
  kSet,       // {% set targets = expr %} or {% set targets[0].attribute = expr %}
  kSetBlock,  // {% set targets[0] %} body {% endset %}: the rendered body as a string
  kBreak,     // {% break %}
  kContinue,  // {% continue %}
  kScope,     // {% generation %} body {% endgeneration %}: body in a scope of its own
};

struct JinjaStmt;
using JinjaBody = std::vector<std::unique_ptr<JinjaStmt>>;

struct JinjaIfBranch {
  JinjaExprPtr condition;
  JinjaBody body;
};

struct JinjaStmt {
  JinjaStmtKind kind = JinjaStmtKind::kText;
  int line = 0;
  std::string text;                     // kText
  JinjaExprPtr expr;                    // kOutput, kSet: the value; kFor: the iterable
  JinjaExprPtr filter;                  // kFor: the `if` clause, may be null
  std::vector<std::string> targets;     // kFor, kSet, kSetBlock: assigned names (unpacked if > 1)
  std::string attribute;                // kSet on a namespace: targets[0].attribute
  std::vector<JinjaIfBranch> branches;  // kIf
  JinjaBody body;                       // kFor, kSetBlock, kScope
  JinjaBody else_body;                  // kIf, kFor
};

// A parsed template.
struct JinjaProgram {
  JinjaBody body;
};

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_AST_H_
