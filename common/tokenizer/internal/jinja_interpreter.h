// RenderJinja: executes a parsed chat template (jinja_parser.h) against a set of variables,
// with Jinja's scoping (a for-loop iteration and a {% generation %} body see outer variables
// but their `set`s stay inside; `if` bodies share the enclosing scope), the `loop` object, and
// bounds on everything a template could make unbounded: output size, string and list sizes,
// value nesting and loop iterations. Expression and block nesting are bounded by the parser.
// Stateless, thread-safe: concurrent renders of one program are independent.
#ifndef SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_INTERPRETER_H_
#define SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_INTERPRETER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/internal/jinja_ast.h"
#include "common/tokenizer/internal/jinja_value.h"

namespace sparseserve::tokenizer::internal {

struct JinjaRenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // rendered text, bytes
  int64_t max_loop_iterations = 1 << 20;       // summed over every loop of one render
  int max_value_depth = 64;                    // nesting of lists / dicts a template builds
};

// Renders `program` with `variables` (which shadow the builtin globals of jinja_builtins.h).
// Returns kInvalidArgument with the template's message verbatim for raise_exception(message),
// "line N: <what>" for runtime errors (undefined used where a value is needed, type errors),
// and a message naming the limit when one is exceeded.
absl::StatusOr<std::string> RenderJinja(const JinjaProgram& program, const JinjaDict& variables,
                                        const JinjaRenderLimits& limits = {});

}  // namespace sparseserve::tokenizer::internal

#endif  // SPARSESERVE_COMMON_TOKENIZER_INTERNAL_JINJA_INTERPRETER_H_
