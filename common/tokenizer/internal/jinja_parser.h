// ParseJinja: chat-template source to a JinjaProgram. Statements supported: text, {{ expr }},
// if/elif/else, for (tuple targets, `if` filter, else, break/continue), set (names, tuples,
// namespace attributes, block form) and Hugging Face's {% generation %}. Anything else (macro,
// call, include, extends, filter blocks, ...) is rejected here, at load time, never at render
// time. Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_PARSER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/internal/jinja_ast.h"

namespace sparseserve::tokenizer::internal {

// Deepest nesting of block statements (if, for, set, generation).
inline constexpr int kMaxJinjaBlockNesting = 64;

// Returns kInvalidArgument "line L, column C: <what>" for lexical and syntax errors, unknown or
// unsupported tags, unknown filters and tests, unclosed blocks and nesting past the limits.
absl::StatusOr<JinjaProgram> ParseJinja(absl::string_view source);

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_PARSER_H_
