// The expression half of the chat-template parser: JinjaTokenStream (a cursor over LexJinja's
// tokens, shared with the statement parser in jinja_parser.cc) and ParseJinjaExpression, a
// recursive-descent parser with Jinja's operator precedence. Filter and test names are checked
// against the builtins here, so that a template using one this interpreter lacks fails to
// load instead of failing a request. Not thread-safe (a parse owns its stream).
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_EXPRESSION_PARSER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_EXPRESSION_PARSER_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_ast.h"
#include "common/tokenizer/internal/jinja_lexer.h"

namespace sparseserve::tokenizer::internal {

// Deepest expression tree and deepest nesting of parentheses, brackets, `not` and signs: they
// bound the recursion of parsing and of evaluation, whatever the template holds.
inline constexpr int kMaxJinjaExprDepth = 128;
inline constexpr int kMaxJinjaExprNesting = 64;

class JinjaTokenStream {
 public:
  // REQUIRES: `tokens` ends with a kEnd token (LexJinja's output).
  explicit JinjaTokenStream(std::vector<JinjaToken> tokens) : tokens_(std::move(tokens)) {}

  // The token `ahead` positions on (the final kEnd when past it).
  const JinjaToken& Peek(size_t ahead = 0) const;
  const JinjaToken& Next();
  bool IsOperator(absl::string_view op, size_t ahead = 0) const;
  bool IsName(absl::string_view name, size_t ahead = 0) const;
  // Consumes the operator / name when it is next.
  bool ConsumeOperator(absl::string_view op);
  bool ConsumeName(absl::string_view name);
  // Consumes the operator or returns kInvalidArgument "expected 'op', got ...".
  absl::Status ExpectOperator(absl::string_view op);

  // kInvalidArgument "line L, column C: `what`" at `token`.
  static absl::Status Error(const JinjaToken& token, absl::string_view what);
  // How a token reads in an error message: "'if'", "end of tag", "end of template".
  static std::string Describe(const JinjaToken& token);

 private:
  std::vector<JinjaToken> tokens_;
  size_t pos_ = 0;
};

// Parses an expression at the stream's position. `with_conditional` false stops before `if`
// (a for loop's filter clause), `allow_tuple` accepts an unparenthesized tuple (`1, 2`).
// Returns kInvalidArgument naming line and column for syntax errors, unknown filters or tests,
// and expressions past the depth limits.
absl::StatusOr<JinjaExprPtr> ParseJinjaExpression(JinjaTokenStream* tokens, bool with_conditional,
                                                  bool allow_tuple);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_EXPRESSION_PARSER_H_
