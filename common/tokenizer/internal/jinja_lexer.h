// LexJinja: splits a chat template into template text and the tokens inside its tags, applying
// Jinja's whitespace rules as Hugging Face configures them: trim_blocks (the newline after a
// block or comment tag is dropped), lstrip_blocks (spaces and tabs before a block or comment tag
// that starts a line are dropped), `-` / `+` modifiers on tags, comments removed, `{% raw %}`
// bodies kept verbatim, newlines normalized to \n and one trailing newline dropped
// (keep_trailing_newline=False). Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_LEXER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer::internal {

enum class JinjaTokenKind {
  kText,           // template data between tags, whitespace rules applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifier (keywords such as `if`, `and`, `true` included)
  kString,         // string literal; `text` holds the unescaped value
  kInteger,        // `int_value`
  kFloat,          // `float_value`
  kOperator,       // + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEnd,            // end of the source
};

struct JinjaToken {
  JinjaTokenKind kind = JinjaTokenKind::kEnd;
  std::string text;  // kText: data; kName: identifier; kString: value; kOperator: spelling
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based, of the token's first character
  int column = 1;  // 1-based byte column
};

// Returns kInvalidArgument "line L, column C: <what>" for an unclosed tag, comment or string, an
// integer literal past int64, an invalid escape or a character no token starts with. The last
// token is always kEnd.
absl::StatusOr<std::vector<JinjaToken>> LexJinja(absl::string_view source);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_LEXER_H_
